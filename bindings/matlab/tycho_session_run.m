function completed = tycho_session_run(h, iterations, progress)
% TYCHO_SESSION_RUN  Run more iterations of a tycho session.
%   TYCHO_SESSION_RUN(H) runs the configured [reconstruct] iterations.
%   TYCHO_SESSION_RUN(H, N) runs N more iterations (0: the configured number). A second run
%   continues where the last one stopped.
%   TYCHO_SESSION_RUN(H, N, PROGRESS) calls PROGRESS(P) after each iteration with a struct P:
%     iteration         1-based, counted over the session's whole life
%     iterations_total  what ITERATION goes to in this run, as tycho.h's tycho_progress
%                       defines it (the 3 of "iteration 2/3")
%     loss              mean loss per pattern of this iteration
%     seconds           wall time of this iteration, s
%   PROGRESS returns true to stop after this iteration, false to go on (like the OutputFcn of
%   MATLAB's optimizers); TYCHO_PRINT_PROGRESS prints a line and goes on. PROGRESS = true is
%   short for @tycho_print_progress. An error in PROGRESS stops the run and is raised here.
%   COMPLETED is false when PROGRESS stopped the run (what was computed is kept).
  if nargin < 2 || isempty(iterations), iterations = 0; end
  if nargin < 3 || isempty(progress) || isequal(progress, false)
    progress = [];
  elseif isequal(progress, true)
    progress = @tycho_print_progress;
  end
  completed = tycho_mex('run', h, double(iterations), progress);
end
