function result = tycho_reconstruct(config, varargin)
% TYCHO_RECONSTRUCT  Run a tycho reconstruction and return its arrays (the main job of
%   `tycho reconstruct CONFIG`, without previews).
%   R = TYCHO_RECONSTRUCT(CONFIG) with CONFIG a TOML file path or TOML text (as
%   TYCHO_SESSION_CREATE). Options (name, value):
%     'iterations'  run this many iterations (sets [reconstruct] iterations, so the learning-rate
%                   schedules span them, as `tycho reconstruct --iterations N`)
%     'set'         {'key=value', ...} overrides, as `tycho reconstruct --set`
%     'base_dir'    where relative input paths of TOML text resolve from
%     'progress'    true (print a line per iteration) or a function (see TYCHO_SESSION_RUN)
%     'output'      also save the result to this zip file (replacing it)
%   R is a struct of arrays, laid out as TYCHO_SESSION_GET describes: object (H x W x slices),
%   probe (N0 x N1 x modes), positions_px and positions_A (P x 2), loss_history
%   (iterations x 1), and mask (N0 x N1 uint8) when the loaded libtycho provides it.
  create_args = {};
  progress = [];
  output = '';
  overrides = {};
  for k = 1:2:numel(varargin)
    if k + 1 > numel(varargin)
      error('tycho:TYCHO_ERR_INVALID_ARGUMENT', 'tycho_reconstruct: option ''%s'' has no value', varargin{k});
    end
    value = varargin{k + 1};
    switch varargin{k}
      case 'iterations'
        overrides{end + 1} = sprintf('reconstruct.iterations=%d', value);
      case 'set'
        if ischar(value), value = {value}; end
        overrides = [overrides, value(:)'];
      case 'base_dir'
        create_args = [create_args, {'base_dir', value}];
      case 'progress'
        progress = value;
      case 'output'
        output = value;
      otherwise
        error('tycho:TYCHO_ERR_INVALID_ARGUMENT', 'tycho_reconstruct: unknown option ''%s'' (allowed: iterations, set, base_dir, progress, output)', varargin{k});
    end
  end
  % 'iterations' is applied last, so it wins over a 'set' of the same key.
  overrides = [overrides(~strncmp(overrides, 'reconstruct.iterations=', 23)), ...
               overrides(strncmp(overrides, 'reconstruct.iterations=', 23))];
  h = tycho_session_create(config, 'set', overrides, create_args{:});
  cleanup = onCleanup(@() tycho_session_free(h));
  tycho_session_run(h, 0, progress);
  result = struct();
  for name = {'object', 'probe', 'positions_px', 'positions_A', 'loss_history'}
    result.(name{1}) = tycho_session_get(h, name{1});
  end
  try
    result.mask = tycho_session_get(h, 'mask');
  catch err
    if ~strcmp(err.identifier, 'tycho:TYCHO_ERR_NOT_FOUND'), rethrow(err); end
  end
  if ~isempty(output)
    tycho_session_save(h, output, 'o');
  end
end
