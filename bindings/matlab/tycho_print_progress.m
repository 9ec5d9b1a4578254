function stop = tycho_print_progress(p)
% TYCHO_PRINT_PROGRESS  A progress function for TYCHO_SESSION_RUN that prints one line per
%   iteration ("iteration 3/10  loss 4.0325e-02  0.35 s") and never stops the run.
  fprintf('iteration %d/%d  loss %.4e  %.2f s\n', p.iteration, p.iterations_total, p.loss, p.seconds);
  stop = false;
end
