// The `simulate` source component: 4D-STEM patterns of a known object computed on the fly in
// read() with the cpu engine's forward model, for tests and benchmarks of any size.
#include <tycho/sdk.hpp>
#include <tycho/sdk/source.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "simulator.hpp"

using tycho::sdk::cat;
using tycho::sdk::fail;
namespace sim = tycho::simulate;

namespace {

// The component, as tycho/sdk/source.hpp adapts it.
class simulate_source {
 public:
  explicit simulate_source(const tycho::sdk::config_view& config) {
    const sim::settings s = sim::read_settings(config);
    model_ = std::make_unique<sim::simulator>(s);
    description_ = cat("simulate:", s.scan[0], "x", s.scan[1], "x", s.detector[0], "x", s.detector[1]);

    tycho_dataset_info& i = info_;
    i.struct_size = sizeof(tycho_dataset_info);
    i.scan_shape[0] = s.scan[0];
    i.scan_shape[1] = s.scan[1];
    i.detector_shape[0] = s.detector[0];
    i.detector_shape[1] = s.detector[1];
    // Poisson counts are whole numbers: delivered as uint16 counts (what a counting detector
    // stores, half the bytes) where every pixel's count stays far below 65535 (10 σ above the
    // whole pattern's dose in one pixel); noise-free fractions of the beam as float32.
    const double per_pattern = s.counts_per_pattern();
    counts_ = s.noisy() && per_pattern + 10.0 * std::sqrt(per_pattern) + 10.0 < 65535.0;
    i.stored_dtype = counts_ ? tycho::sdk::dtype_uint16 : tycho::sdk::dtype_float32;
    i.scan_step_A[0] = i.scan_step_A[1] = s.step_A;
    i.detector_pixel_invA[0] = i.detector_pixel_invA[1] = s.pixel_invA;
    i.energy_eV = s.energy_eV;
    i.semiangle_mrad = s.semiangle_mrad;
    i.C10_A = s.C10_A;
    i.patterns_centred = 1;
    i.description = description_.c_str();

    tycho::sdk::log(
        TYCHO_LOG_INFO, "simulate",
        cat("simulating ", s.scan[0], " x ", s.scan[1], " patterns of ", s.detector[0], " x ", s.detector[1],
            " (step ", s.step_A, " Å, pixel ", model_->pixel_A(0), " x ", model_->pixel_A(1), " Å) from a ",
            model_->object_rows(), " x ", model_->object_cols(), " px ",
            s.object == "npy" ? cat("phase map '", s.npy_path, "'")
                              : cat("random phase object (max ", s.phase_max_rad, " rad, features ",
                                    s.feature_size_A, " Å, seed ", s.seed, ")"),
            s.noisy() ? cat(", Poisson noise at ", s.dose_e_per_A2, " e/Å² (", s.counts_per_pattern(),
                            " e per pattern)")
                      : std::string(", noise-free (fractions of the beam)")));
  }

  const tycho_dataset_info& info() const { return info_; }
  void read(int64_t first, int64_t count, float* dst) { model_->read(first, count, dst); }
  // The counts as uint16 (the adapter asks only when info() says uint16: noisy, small doses).
  void read_stored(int64_t first, int64_t count, void* dst) {
    const int64_t m = info_.detector_shape[0] * info_.detector_shape[1];
    staging_.resize(std::size_t(count * m));
    model_->read(first, count, staging_.data());
    auto* out = static_cast<uint16_t*>(dst);
    for (int64_t k = 0; k < count * m; ++k) {
      const float v = staging_[std::size_t(k)];
      if (!(v >= 0.f && v < 65535.f))
        fail(TYCHO_ERR_INTERNAL, "simulate: pattern ", first + k / m, " holds a count of ", v, ", beyond uint16");
      out[k] = uint16_t(v);
    }
  }

 private:
  std::unique_ptr<sim::simulator> model_;
  std::string description_;  // pointed to by info_.description
  bool counts_ = false;      // delivered as uint16 counts (read_stored)
  std::vector<float> staging_;
  tycho_dataset_info info_{};
};

const tycho_component k_components[] = {tycho::sdk::with_settings(
    tycho::sdk::component(TYCHO_COMPONENT_SOURCE, "simulate", "1.0.0",
                          "synthetic 4D-STEM patterns computed on read (single slice, the cpu engine's model, "
                          "optional Poisson noise)",
                          TYCHO_DEVICE_BIT(kDLCPU), sim::k_config_keys,
                          tycho::sdk::source_vtable<simulate_source>("simulate")),
    sim::k_settings)};

}  // namespace

TYCHO_PLUGIN("simulate", "1.0.0", k_components)
