// A known phase map simulated, reconstructed and scored, for end-to-end tests on the `simulate`
// source: the map (atom_lattice) as the source's object_phase_npy, `tycho reconstruct` on a
// config, and `tycho evaluate` against the truth file written here. Header-only, inline.
#pragma once

#include <tycho/host/registry.hpp>
#include <tycho/host/result_record.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "npy_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace tycho::test {

// A 2-D C-order .npy (version 1.0) of the values as float32 or float64.
inline void write_npy(const std::string& path, const std::vector<double>& v, int64_t rows, int64_t cols,
               bool float64) {
  if (float64) {
    tycho::test::write_npy(path, "<f8", {rows, cols}, v.data(), v.size() * sizeof(double));
  } else {
    const std::vector<float> f(v.begin(), v.end());
    tycho::test::write_npy(path, "<f4", {rows, cols}, f.data(), f.size() * sizeof(float));
  }
}

// Gaussian "atoms" (σ 0.35 Å) on a hexagonal lattice of 2.6 Å, each moved by up to ±0.3 Å and
// of its own weight (so no shift by a lattice period matches the map as well as the true
// registration), scaled to 0 to 0.5 rad, on a grid of (pixel0_A, pixel1_A) pixels.
inline std::vector<double> atom_lattice(int64_t rows, int64_t cols, double pixel0_A, double pixel1_A) {
  std::vector<double> phase(std::size_t(rows * cols), 0.0);
  const double a = 2.6, sigma = 0.35, h = a * std::sqrt(3.0) / 2;
  const double height_A = double(rows) * pixel0_A, width_A = double(cols) * pixel1_A;
  struct atom {
    double x, y, weight;
  };
  std::vector<atom> atoms;
  uint64_t state = 12345;
  auto uniform = [&state] {  // a fixed LCG: the same map on every platform
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return double(state >> 11) * 0x1.0p-53;
  };
  for (int64_t r = -1; double(r) * h < height_A + a; ++r)
    for (int64_t c = -1; double(c) * a < width_A + a; ++c) {
      double x = double(r) * h + 0.6 * (uniform() - 0.5);
      double y = double(c) * a + (r % 2 ? a / 2 : 0.0) + 0.6 * (uniform() - 0.5);
      atoms.push_back({x, y, 0.5 + uniform()});
    }
  double mx = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double x = double(i) * pixel0_A, y = double(j) * pixel1_A, v = 0;
      for (const auto& at : atoms) {
        double d2 = (x - at.x) * (x - at.x) + (y - at.y) * (y - at.y);
        if (d2 < 16 * sigma * sigma) v += at.weight * std::exp(-0.5 * d2 / (sigma * sigma));
      }
      phase[std::size_t(i * cols + j)] = v;
      mx = std::max(mx, v);
    }
  for (auto& v : phase) v *= 0.5 / mx;
  return phase;
}

struct reconstruction {
  tycho::test::command_result run;
  std::vector<double> loss;
};

// `tycho reconstruct` on a config, quietly, into `result`.
inline reconstruction reconstruct(const tycho::test::temp_folder& tmp, const std::string& toml,
                           const std::string& result) {
  const std::string cfg = tmp.write("run.toml", toml);
  reconstruction r;
  r.run = run_command({tycho::test::tycho_exe(), "reconstruct", cfg, "-q", "-o", result});
  if (r.run.exited_with(0)) {
    auto rec = tycho::host::load_record(tycho::host::format_for_path(plugins(), result), result);
    const auto& h = rec.array("loss_history", result);
    r.loss.assign(h.as<double>(), h.as<double>() + h.count());
  }
  return r;
}

// The truth for `tycho evaluate` (phase, pixel_size_A, scan_origin_A), written through the zip
// format plugin as an .npz.
inline void write_truth(const std::string& path, const std::vector<double>& phase, int64_t rows, int64_t cols,
                 double pixel_A, double origin0_A, double origin1_A) {
  std::vector<float> phase32(phase.begin(), phase.end());
  std::vector<tycho::owned_array> truth;
  truth.push_back(tycho::owned_array::from_vector("phase", {kDLFloat, 32, 1}, {rows, cols}, phase32));
  truth.push_back(tycho::owned_array::from_vector("pixel_size_A", {kDLFloat, 64, 1}, {1},
                                                  std::vector<double>{pixel_A}));
  truth.push_back(tycho::owned_array::from_vector("scan_origin_A", {kDLFloat, 64, 1}, {2},
                                                  std::vector<double>{origin0_A, origin1_A}));
  tycho::host::save_record(plugins().find(TYCHO_COMPONENT_FORMAT, "zip"), truth, "{}", path,
                           TYCHO_SAVE_OVERWRITE);
}

// `tycho evaluate RESULT --truth TRUTH` as JSON.
inline nlohmann::json evaluate(const std::string& result, const std::string& truth) {
  auto ev = run_command({tycho::test::tycho_exe(), "evaluate", result, "--truth", truth});
  EXPECT_TRUE(ev.exited_with(0)) << ev.describe();
  try {
    return nlohmann::json::parse(ev.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "evaluate did not print JSON: " << e.what() << "\n" << ev.describe();
    return nlohmann::json::object({{"pearson", 0.0}, {"shift_px", {99, 99}}});
  }
}

// A small lattice scan for end-to-end tests: 16 x 16 positions of 0.5 Å over the atom lattice,
// 64² detector of 0.06 Å⁻¹, 80 keV, 20 mrad, C10 −100 Å, 1e5 e/Å². Writes the map as
// `phase.npy` and its truth as `truth.npz` into `folder` (the object grid's default padding,
// 16 px) and returns the [data] table that simulates it.
inline std::string lattice_scan_16x16(const std::string& folder) {
  const int64_t n = 64, pad = 16, rows = 160, cols = 160;
  const double pixel = 1.0 / (64 * 0.06);
  const std::vector<double> phase = atom_lattice(rows, cols, pixel, pixel);
  write_npy(folder + "/phase.npy", phase, rows, cols, false);
  const double origin = double(pad + n / 2) * pixel;
  write_truth(folder + "/truth.npz", phase, rows, cols, pixel, origin, origin);
  return R"([data]
source = "simulate"
scan_shape = [16, 16]
detector_shape = [64, 64]
detector_pixel_invA = 0.06
semiangle_mrad = 20.0
C10_A = -100.0
object_phase_npy = "phase.npy"
dose_e_per_A2 = 1e5
threads = 2
)";
}

}  // namespace tycho::test
