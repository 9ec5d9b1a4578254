// Checks that the numbers a run starts from and the state it keeps are finite: a NaN or an
// infinity anywhere in them spreads through every later iteration, and a run must never save
// one with exit status 0 (issue 12). Each check names the file and the array.
#pragma once

#include <tycho/core/array.hpp>

#include <cstdint>
#include <string>

#include "tycho/host/dataset.hpp"

namespace tycho::host {

// The non-finite elements of a float or complex array (a complex element counts when either
// part is non-finite); other dtypes hold no NaN: 0.
struct non_finite_count {
  int64_t count = 0;
  int64_t first = -1;  // element index (C order) of the first one
  double first_value = 0;
};
non_finite_count count_non_finite(const owned_array& a);
// The same for a host tensor (C order, compact: a view the caller may read).
non_finite_count count_non_finite(const DLTensor& t);

// Throws TYCHO_ERR_BAD_DATA naming `file`, the array and the first bad element when `a` holds a
// NaN or an infinity; `why` says where the file came from (e.g. "resumed with --from").
void require_finite(const owned_array& a, const std::string& file, const std::string& why);

// Float32 (R, N0, N1) patterns read from a file that promises finite, non-negative values (a
// prepared file, which carries no bad-pixel mask): throws naming the file, the array, the
// pattern and the pixel otherwise.
void require_valid_patterns(const float* patterns, int64_t count, int64_t n0, int64_t n1, int64_t first_pattern,
                            const std::string& file, const std::string& array);

// The smallest mean intensity per detector pixel a run accepts: float32's smallest normal
// number. Below it the patterns are subnormal (precision lost) and the model's scale,
// 1 / mean total intensity, leaves float32's range: the run would compute NaN.
constexpr double k_min_mean_pixel_intensity = 1.1754943508222875e-38;

// Refuses data whose intensities cannot be computed with in float32 (see above), or whose
// mean total is not a finite number > 0, naming the data and the mean.
void check_intensity_scale(const dataset& d);

}  // namespace tycho::host
