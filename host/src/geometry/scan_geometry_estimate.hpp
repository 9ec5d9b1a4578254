// The scan's geometry from the data, before the first iteration ([preprocess]
// scan_rotation_deg = "auto"): which linear map of the nominal raster puts each pattern where the
// probe was, in the detector's frame (tycho/core/scan_map.hpp).
//
// Two measurements, each used where it is reliable, both logged:
//  - the parallax of the bright field (tycho/core/parallax.hpp): with a defocused probe it gives
//    the whole map up to one scale that only the product C10 · step fixes: the rotation over all
//    360° (the sign of the stated C10 decides between θ and θ + 180°), a transposed detector (the
//    map's determinant is negative), the ratio of the axes' steps and their shear. Used when its
//    standard error is below 5 % and the bright field's images shift by at least a third of a
//    scan step across the disc;
//  - the curl of the centre-of-mass field (py4DSTEM's estimate): the rotation modulo 180° and the
//    transpose, for a probe near focus too. θ and θ + 180° are told apart by the integrated COM
//    (a differential phase contrast image): atoms shift the phase up, so its skewness is
//    positive at the right angle (Lubk & Zweck, Phys. Rev. A 91, 023805, 2015: the COM is the
//    probe-weighted mean phase gradient).
// The map's overall scale stays the nominal step's: the parallax cannot separate it from C10, and
// the reconstruction refines it with the positions. The parallax then says which C10 would make
// the nominal step right (reported, not applied).
#pragma once

#include <cstdint>
#include <vector>

#include "tycho/host/preprocess.hpp"

namespace tycho::host {

// Below this relative standard error the parallax's scale replaces a stated C10 (at the nominal
// step): measured 0.3 % from the truth on hBN, 3 % on Si [110] and SrTiO3 [001] after the depth's
// correction, 8 % low on MoSe2 (at 0.9 % standard error; a lattice's overlapping discs shorten
// the shifts); at 5 % standard error (WS2, 2,500 electrons per pattern) 20 % low. The session's
// log names it where a stated C10 is kept.
constexpr double parallax_C10_error_max = 0.02;

struct geometry_optics {
  double wavelength_A = 0;  // 0: unknown
  double C10_A = 0;         // the stated (nominal) defocus; 0 when not stated
  double semiangle_mrad = 0;
  double dk_invA[2] = {0, 0};  // of the patterns the stage measures on (after binning)
  double step_A[2] = {0, 0};   // the nominal scan step
  double specimen_middle_A = 0;  // depth of the specimen's middle below the entrance ([reconstruct] slices)
  int64_t slices = 1;            // [reconstruct] slices
  bool known() const { return wavelength_A > 0 && semiangle_mrad > 0 && dk_invA[0] > 0 && dk_invA[1] > 0; }
};
// The optics and calibrations of `doc` over the file's (never throws: unknown values are 0).
geometry_optics resolve_geometry_optics(const config_document& doc, const tycho_dataset_info& info, int64_t binning);

// The images the parallax needs from the patterns the stage reads: groups of binned pixels over
// the bright field (radius from the stated semiangle), a central block of the scan.
parallax_images make_parallax_images(const geometry_optics& o, int64_t rx, int64_t ry, int64_t n0, int64_t n1);

// Decides the map. `com` (rx·ry x 2, the fit subtracted, NaN where unknown) on the whole scan;
// `images` summed over every rank (nullptr: no parallax). transpose_given: −1 estimate, 0 / 1 given.
// search_follows: where nothing measures the geometry, a run's trial reconstructions may rank one
// ([preprocess] scan_geometry_search not false): the fallback's warning says so.
scan_geometry_estimate estimate_scan_geometry(const std::vector<double>& com, int64_t rx, int64_t ry,
                                              const parallax_images* images, const geometry_optics& o,
                                              int transpose_given, bool search_follows);

// How a note of the lattice's measurement begins: the setting (scan_scale = "lattice" where it was
// `asked` for, else "auto"), and for a `fallback` to the stated step a warning where it was asked
// for (under "auto" a specimen without a lattice is expected: information).
std::string lattice_note_head(bool asked, bool fallback);

// scan_scale = "lattice" (`asked`) or "auto": measures the map from the crystal's lattice in
// `block` (summed over every rank), paired through e's map, and where it is found and agrees with
// e's transpose and rotation (within 5°) makes it e's map (its whole map where its step ratio or
// shear exceeds 5 %, else its isotropic scale times e's rotation), and moves the parallax's C10
// estimate with the scale (the parallax fixes C10 / step). Otherwise e is left as it was and a
// note says why (a warning where the lattice was asked for).
void apply_lattice_map(scan_geometry_estimate& e, const lattice_block& block, const geometry_optics& o, bool asked);

// The skewness of the phase integrated from the COM field (rx·ry x 2, detector axes) turned into
// scan axes by θ (py4DSTEM's convention, transposed first when asked): positive for atoms at the
// right θ, negative at θ + 180°.
double dpc_skewness(const std::vector<double>& com, int64_t rx, int64_t ry, double rotation_deg, bool transpose);

}  // namespace tycho::host
