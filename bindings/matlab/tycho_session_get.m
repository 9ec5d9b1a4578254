function a = tycho_session_get(h, name)
% TYCHO_SESSION_GET  A copy of one result array of a tycho session.
%   A = TYCHO_SESSION_GET(H, NAME), NAME one of (tycho's shapes are row-major, C order):
%     'object'        tycho (slices, H, W) complex64  -> H x W x slices single complex
%     'probe'         tycho (modes, N0, N1)           -> N0 x N1 x modes, the object's class
%     'positions_px'  tycho (P, 2) float64            -> P x 2 double, probe centres in object
%                     pixels, (row, column); 'positions' is the same
%     'positions_A'   tycho (P, 2) float64            -> P x 2 double, in Angstrom
%     'loss_history'  tycho (iterations,) float64     -> iterations x 1 double
%   (complex128 / double complex with [reconstruct] precision = "float64".)
%   Indices keep their meaning: A(i, j, s) is tycho's element [s-1, i-1, j-1], so A(:, :, 1)
%   is the first slice as an H x W image, and positions_px(p, :) is scan position p's
%   (row, column) in object pixels, 0-based as tycho counts pixels. Values are copied bit for
%   bit. Another NAME raises 'tycho:TYCHO_ERR_NOT_FOUND'.
  a = tycho_mex('get', h, name);
end
