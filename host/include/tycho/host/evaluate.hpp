// `tycho evaluate`: the accuracy of a saved result against a ground truth (.npz with phase or
// phase_total, pixel_size_A, scan_origin_A; optionally per-depth phases, layer phases and true
// scan positions, host/src/evaluate/truth_file.hpp), as defined in the data READMEs; returns JSON text.
#pragma once

#include <optional>
#include <string>

#include "tycho/host/registry.hpp"

namespace tycho::host {
// slice_thickness_A: the depth of each of a multislice result's slices, Å, used instead of the
// one its manifest records (nullopt: the manifest's). Throws tycho::error naming the file and
// array for a result or truth that cannot be compared.
std::string evaluate_result(const registry& reg, const std::string& result_path,
                            const std::string& truth_path, double sigma_A, double fov_fraction,
                            std::optional<double> slice_thickness_A = std::nullopt);
}
