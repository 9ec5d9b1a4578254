function h = tycho_session_create(config, varargin)
% TYCHO_SESSION_CREATE  Create a tycho reconstruction session (GNU Octave and MATLAB).
%   H = TYCHO_SESSION_CREATE(CONFIG) parses and validates the configuration, loads the plugins,
%   reads the data and prepares the engine. CONFIG is either the path of a TOML file (a char
%   array ending in '.toml'; relative input paths in it resolve from the file's folder) or TOML
%   text (the keys of a config file, docs/config-reference.md).
%
%   H = TYCHO_SESSION_CREATE(CONFIG, 'set', {'key=value', ...}, 'base_dir', DIR)
%     'set'       overrides applied in order, as `tycho reconstruct --set`
%     'base_dir'  where relative input paths of TOML text resolve from (default: the current
%                 folder; for a file: the file's folder)
%
%   H is a handle (a number) for TYCHO_SESSION_RUN, _GET, _SAVE and _FREE; free it with
%   TYCHO_SESSION_FREE(H). Use a session from one thread at a time.
%   Errors have the identifier 'tycho:<status>' (e.g. 'tycho:TYCHO_ERR_INVALID_ARGUMENT') and
%   tycho's message, which names the file or key at fault.
  if ~ischar(config)
    error('tycho:TYCHO_ERR_INVALID_ARGUMENT', 'tycho_session_create: CONFIG must be a file path or TOML text (char)');
  end
  overrides = {};
  base_dir = '';
  for k = 1:2:numel(varargin)
    if k + 1 > numel(varargin)
      error('tycho:TYCHO_ERR_INVALID_ARGUMENT', 'tycho_session_create: option ''%s'' has no value', varargin{k});
    end
    switch varargin{k}
      case 'set'
        overrides = varargin{k + 1};
        if ischar(overrides), overrides = {overrides}; end
      case 'base_dir'
        base_dir = varargin{k + 1};
      otherwise
        error('tycho:TYCHO_ERR_INVALID_ARGUMENT', 'tycho_session_create: unknown option ''%s'' (allowed: set, base_dir)', varargin{k});
    end
  end
  text = config;
  is_file = isempty(strfind(config, sprintf('\n'))) && numel(config) > 5 && strcmp(config(end-4:end), '.toml');
  if is_file
    fid = fopen(config, 'r');
    if fid < 0
      error('tycho:TYCHO_ERR_IO', 'tycho_session_create: cannot read the config %s', config);
    end
    text = fread(fid, Inf, '*char')';
    fclose(fid);
    if isempty(base_dir)
      base_dir = fileparts(config);
    end
  end
  h = tycho_mex('create', text, base_dir, overrides);
end
