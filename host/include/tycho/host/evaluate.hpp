// `tycho evaluate`: the accuracy of a saved result against a ground-truth phase (.npz with
// phase, pixel_size_A, scan_origin_A), as defined in the data README; returns JSON text.
#pragma once

#include <string>

#include "tycho/host/registry.hpp"

namespace tycho::host {
std::string evaluate_result(const registry& reg, const std::string& result_path,
                            const std::string& truth_path, double sigma_A, double fov_fraction);
}
