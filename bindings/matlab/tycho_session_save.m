function tycho_session_save(h, path, mode)
% TYCHO_SESSION_SAVE  Save the result of a tycho session (arrays and manifest, a zip that
%   numpy.load reads; docs/file-format.md), atomically.
%   TYCHO_SESSION_SAVE(H, PATH) fails with 'tycho:TYCHO_ERR_IO' if PATH exists;
%   TYCHO_SESSION_SAVE(H, PATH, 'o') replaces it ('w', the default, does not). PATH is relative
%   to the current folder; its folder must exist.
  if nargin < 3, mode = 'w'; end
  if ~any(strcmp(mode, {'w', 'o'}))
    error('tycho:TYCHO_ERR_INVALID_ARGUMENT', 'tycho_session_save: mode must be ''w'' (new file) or ''o'' (overwrite), not ''%s''', mode);
  end
  tycho_mex('save', h, path, strcmp(mode, 'o'));
end
