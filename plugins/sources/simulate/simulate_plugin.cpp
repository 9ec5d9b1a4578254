// The `simulate` source component: 4D-STEM patterns of a known object computed on the fly in
// read() with the cpu engine's forward model, for tests and benchmarks of any size.
#include <tycho/sdk.hpp>
#include <tycho/sdk/source.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "simulator.hpp"

using tycho::sdk::cat;
using tycho::sdk::fail;
namespace sim = tycho::simulate;

struct tycho_source {
  std::unique_ptr<sim::simulator> model;
  std::string description;  // pointed to by info.description
  tycho_dataset_info info{};
};

namespace {

tycho_status source_open(const tycho_config* cfg, tycho_source** out) {
  return tycho::sdk::guarded([&] {
    if (out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "simulate source: open() needs an output");
    *out = nullptr;
    tycho::sdk::config_view config(cfg);
    sim::settings s = sim::read_settings(config);
    auto src = std::make_unique<tycho_source>();
    src->model = std::make_unique<sim::simulator>(s);
    src->description = cat("simulate:", s.scan[0], "x", s.scan[1], "x", s.detector[0], "x", s.detector[1]);

    tycho_dataset_info& i = src->info;
    i.struct_size = sizeof(tycho_dataset_info);
    i.scan_shape[0] = s.scan[0];
    i.scan_shape[1] = s.scan[1];
    i.detector_shape[0] = s.detector[0];
    i.detector_shape[1] = s.detector[1];
    i.stored_dtype = tycho::sdk::dtype_float32;
    i.scan_step_A[0] = i.scan_step_A[1] = s.step_A;
    i.detector_pixel_invA[0] = i.detector_pixel_invA[1] = s.pixel_invA;
    i.energy_eV = s.energy_eV;
    i.semiangle_mrad = s.semiangle_mrad;
    i.C10_A = s.C10_A;
    i.patterns_centred = 1;
    i.description = src->description.c_str();

    tycho::sdk::log(
        TYCHO_LOG_INFO, "simulate",
        cat("simulating ", s.scan[0], " x ", s.scan[1], " patterns of ", s.detector[0], " x ", s.detector[1],
            " (step ", s.step_A, " Å, pixel ", src->model->pixel_A(0), " x ", src->model->pixel_A(1),
            " Å) from a ", src->model->object_rows(), " x ", src->model->object_cols(), " px ",
            s.object == "npy" ? cat("phase map '", s.npy_path, "'")
                              : cat("random phase object (max ", s.phase_max_rad, " rad, features ",
                                    s.feature_size_A, " Å, seed ", s.seed, ")"),
            s.noisy() ? cat(", Poisson noise at ", s.dose_e_per_A2, " e/Å² (", s.counts_per_pattern(),
                            " e per pattern)")
                      : std::string(", noise-free (fractions of the beam)")));
    *out = src.release();
  });
}

tycho_status source_info(tycho_source* src, tycho_dataset_info* out) {
  return tycho::sdk::guarded([&] {
    if (src == nullptr || out == nullptr)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "simulate source: info() needs a source and an output");
    tycho::sdk::copy_dataset_info(src->info, out);
  });
}

tycho_status source_read(tycho_source* src, int64_t first, int64_t count, DLTensor* dst) {
  return tycho::sdk::guarded([&] {
    if (src == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "simulate source: read() needs a source");
    const sim::settings& s = src->model->config();
    tycho::sdk::check_read_request("simulate", src->description, s.scan, s.detector, first, count,
                                   dst);
    if (count == 0) return;
    src->model->read(first, count, tycho::sdk::data_of<float>(*dst));
  });
}

void source_close(tycho_source* src) { delete src; }

const tycho_source_vtable k_vtable = {sizeof(tycho_source_vtable), TYCHO_ABI_VERSION, &source_open,
                                      &source_info, &source_read, &source_close};

const tycho_component k_components[] = {tycho::sdk::component(
    TYCHO_COMPONENT_SOURCE, "simulate", "1.0.0",
    "synthetic 4D-STEM patterns computed on read (single slice, the cpu engine's model, optional "
    "Poisson noise)",
    TYCHO_DEVICE_BIT(kDLCPU), sim::k_config_keys, &k_vtable)};

}  // namespace

TYCHO_PLUGIN("simulate", "1.0.0", k_components)
