function tycho_octave_test(repo, cli, out_dir)
% TYCHO_OCTAVE_TEST  The Octave/MATLAB bindings against the real library (ctest Octave.MexTest):
%   the MoS2 example reconstructed for 3 iterations by tycho_reconstruct equals, bit for bit,
%   what the `tycho` command CLI writes for the same config and iterations (read here from its
%   result zip, independently of the gateway, which also checks the column-major layout); a
%   bad config raises 'tycho:TYCHO_ERR_INVALID_ARGUMENT' naming the key; then the examples of
%   docs/embedding/matlab.md run as they are written there.
  config = fullfile(repo, 'examples', 'mos2.toml');
  cli_zip = fullfile(out_dir, 'octave-cli-result.zip');
  if ~exist(out_dir, 'dir'), mkdir(out_dir); end
  status = system(sprintf('"%s" reconstruct "%s" --set reconstruct.iterations=3 --set output.previews=false -q --overwrite -o "%s"', ...
                          cli, config, cli_zip));
  assert(status == 0, 'the tycho command failed');

  r = tycho_reconstruct(config, 'iterations', 3);

  [bytes, shape] = npy_member(cli_zip, 'object.npy');
  assert(isequal(shape, [1 220 197]), 'object.npy shape');
  assert(isa(r.object, 'single') && ~isreal(r.object) && isequal(size(r.object), [220 197]), ...
         'object: 220 x 197 single complex');
  expected = from_row_major(typecast(bytes, 'single'), shape);
  assert_bits_equal(r.object, expected, 'object');

  [bytes, shape] = npy_member(cli_zip, 'probe.npy');
  assert(isequal(size(r.probe), [96 96]));
  assert_bits_equal(r.probe, from_row_major(typecast(bytes, 'single'), shape), 'probe');

  [bytes, shape] = npy_member(cli_zip, 'positions_px.npy');
  assert(isequal(shape, [768 2]) && isequal(size(r.positions_px), [768 2]));
  % (P, 2) row-major: pairs (row, column) one after the other.
  assert(isequal(r.positions_px, reshape(typecast(bytes, 'double'), 2, 768).'), 'positions_px');

  [bytes, ~] = npy_member(cli_zip, 'loss_history.npy');
  history = typecast(bytes, 'double');
  assert(isequal(r.loss_history, history(:)) && isequal(size(r.loss_history), [3 1]), 'loss_history');
  assert(r.loss_history(3) < r.loss_history(1), 'the loss falls');

  % The command's result against the ground truth: the figures `tycho evaluate` prints.
  truth = fullfile(repo, 'examples', 'data', 'mos2_ground_truth.npz');
  [status, printed] = system(sprintf('"%s" evaluate "%s" --truth "%s" 2>/dev/null', cli, cli_zip, truth));
  assert(status == 0, 'tycho evaluate failed');
  [f, json] = tycho_evaluate(cli_zip, truth);
  assert(strcmp(json, strtrim(printed)), 'tycho_evaluate differs from tycho evaluate');
  assert(f.iterations == 3 && f.sigma_A == 2 && f.pearson > 0.3 && f.pearson < 0.9, 'evaluate figures');
  try
    tycho_evaluate(cli_zip, truth, 'fov_fraction', 2);
    error('tycho_octave_test:noerror', 'a bad option did not raise');
  catch err
    assert(strcmp(err.identifier, 'tycho:TYCHO_ERR_INVALID_ARGUMENT'), err.identifier);
    assert(~isempty(strfind(err.message, 'options->fov_fraction')), err.message);
  end

  % A bad config is an error with tycho's status as identifier and the key in the message.
  try
    tycho_reconstruct(sprintf('[reconstruct]\nbatchsize = 3\n'));
    error('tycho_octave_test:noerror', 'a bad config did not raise');
  catch err
    assert(strcmp(err.identifier, 'tycho:TYCHO_ERR_INVALID_ARGUMENT'), err.identifier);
    assert(~isempty(strfind(err.message, 'unknown key ''batchsize'' in [reconstruct]; did you mean ''batch_size''?')), err.message);
  end
  try
    tycho_session_get(12345, 'object');
    error('tycho_octave_test:noerror', 'a made-up handle did not raise');
  catch err
    assert(strcmp(err.identifier, 'tycho:TYCHO_ERR_INVALID_ARGUMENT'), err.identifier);
  end

  run_doc_examples(fullfile(repo, 'docs', 'embedding', 'matlab.md'), repo);
  fprintf('tycho_octave_test: passed (object, probe, positions, loss history bit for bit; evaluate; errors; doc page)\n');
end

function run_doc_examples(page, repo)
  % Every ```matlab block of the page, in order, in one workspace, from the repository root.
  text = fileread(page);
  blocks = regexp(text, '```matlab\n(.*?)```', 'tokens');
  assert(numel(blocks) >= 2, sprintf('%s: no ```matlab blocks', page));
  code = strjoin(cellfun(@(b) b{1}, blocks, 'UniformOutput', false), sprintf('\n'));
  here = pwd;
  cd(repo);
  restore = onCleanup(@() cd(here));
  eval(code);
end

function a = from_row_major(values, shape)
  % complex64 values (re, im pairs) of a row-major (1, H, W) array -> H x W, as the gateway does.
  z = complex(values(1:2:end), values(2:2:end));
  a = reshape(z, shape(3), shape(2)).';
end

function assert_bits_equal(a, b, what)
  same = isequal(size(a), size(b)) && ...
         isequal(typecast(real(a(:)), 'uint32'), typecast(real(b(:)), 'uint32')) && ...
         isequal(typecast(imag(a(:)), 'uint32'), typecast(imag(b(:)), 'uint32'));
  assert(same, sprintf('%s differs from the tycho command''s result', what));
end

function [data, shape] = npy_member(zip_path, name)
  % The data bytes and shape of a stored (uncompressed) .npy member of a tycho result zip
  % (docs/file-format.md: .npy members are stored, sizes in the local headers).
  fid = fopen(zip_path, 'r');
  z = fread(fid, Inf, '*uint8')';
  fclose(fid);
  u16 = @(at) double(typecast(z(at + 1:at + 2), 'uint16'));
  u32 = @(at) double(typecast(z(at + 1:at + 4), 'uint32'));
  at = 0; % 0-based offset of a local file header
  while at + 30 <= numel(z) && u32(at) == hex2dec('04034b50')
    method = u16(at + 8);
    size_ = u32(at + 18);
    name_len = u16(at + 26);
    extra_len = u16(at + 28);
    start = at + 30 + name_len + extra_len;
    if strcmp(char(z(at + 31:at + 30 + name_len)), name)
      assert(method == 0, [name ' is stored']);
      npy = z(start + 1:start + size_);
      assert(isequal(npy(1:6), uint8([147, double('NUMPY')])), [name ' is a .npy']);
      header_len = double(typecast(npy(9:10), 'uint16'));
      header = char(npy(11:10 + header_len));
      dims = regexp(header, '''shape'': \(([0-9, ]*)\)', 'tokens', 'once');
      shape = str2num(['[' dims{1} ']']);
      data = npy(11 + header_len:end);
      return;
    end
    at = start + size_;
  end
  error('tycho_octave_test:member', 'no member %s in %s', name, zip_path);
end
