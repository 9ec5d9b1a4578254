function tycho_session_free(h)
% TYCHO_SESSION_FREE  Free a tycho session (its handle is then invalid). Sessions still alive
%   are freed when Octave/MATLAB exits.
  tycho_mex('free', h);
end
