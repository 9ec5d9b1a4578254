function [stop, err] = tycho_progress_call(progress, p)
% TYCHO_PROGRESS_CALL  Used by tycho_mex after each iteration: calls PROGRESS(P) and hands back
%   whether it asked to stop (it returned logical true) and, instead of raising, an error it
%   raised as a struct (identifier, message), which the gateway raises again once the run has
%   stopped (Octave's mexCallMATLABWithTrap would replace it with a generic error).
%   PROGRESS is called as a statement, so a function without outputs works, and so does one
%   like fprintf that returns something only when asked to.
  err = [];
  stop = false;
  try
    progress(p);
    if exist('ans', 'var')
      stop = isscalar(ans) && islogical(ans) && ans;
    end
  catch e
    err = struct('identifier', e.identifier, 'message', e.message);
    stop = true;
  end
end
