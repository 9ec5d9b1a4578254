function [figures, json] = tycho_evaluate(result, truth, varargin)
% TYCHO_EVALUATE  Accuracy of a saved tycho result against a ground truth, as `tycho evaluate`.
%   F = TYCHO_EVALUATE(RESULT, TRUTH) compares the result file RESULT (written by
%   tycho_session_save or `tycho reconstruct`) with the ground truth TRUTH (an .npz with phase or
%   phase_total, pixel_size_A, scan_origin_A; optionally phase_slices, phase_top/phase_bottom with
%   layer_depths_A, positions_true_A) and returns the figures as a struct: F.pearson and
%   F.rms_rad (the local-phase metric of the data READMEs in the inner field of view), per-depth
%   figures of a multislice result, F.positions_rms_A when the truth has the true positions.
%   TYCHO_EVALUATE(..., 'sigma_A', S, 'fov_fraction', F, 'slice_thickness_A', T) sets the
%   local-phase Gaussian's sigma (Angstrom, default 2), the inner fraction of the scanned field
%   of view (default 0.8) and each slice's depth (default: the result's own).
%   [F, JSON] = TYCHO_EVALUATE(...) also returns the JSON text. Errors have the identifier
%   'tycho:<STATUS>' and name the file, array or option at fault.
  names = {'sigma_A', 'fov_fraction', 'slice_thickness_A'};
  options = [0, 0, 0];
  if mod(numel(varargin), 2) ~= 0
    error('tycho:TYCHO_ERR_INVALID_ARGUMENT', 'tycho_evaluate: options come as name, value pairs');
  end
  for k = 1:2:numel(varargin)
    at = find(strcmp(varargin{k}, names));
    if isempty(at)
      error('tycho:TYCHO_ERR_INVALID_ARGUMENT', 'tycho_evaluate: unknown option ''%s'' (sigma_A, fov_fraction, slice_thickness_A)', varargin{k});
    end
    options(at) = double(varargin{k + 1});
  end
  json = tycho_mex('evaluate', result, truth, options);
  figures = jsondecode(json);
end
