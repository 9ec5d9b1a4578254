// The built-in constraint components behind the ABI's constraint vtable (ABI 1.3), each with
// its typed keys; the runtime adds name, first_iteration and last_iteration to every entry of
// [[reconstruct.constraints]].
#include <tycho/sdk.hpp>
#include <tycho/sdk/constraint.hpp>

#include "constraints.hpp"

namespace {
using namespace tycho::sdk;
namespace tc = tycho::constraints;

constexpr uint32_t k_host = TYCHO_DEVICE_BIT(kDLCPU);

const char* const k_no_keys[] = {nullptr};
const tycho_setting k_no_settings[] = {end_of_settings()};

const char* const k_amplitude_keys[] = {"min", "max", nullptr};
const tycho_setting k_amplitude_settings[] = {
    setting("min", TYCHO_SETTING_NUMBER, "0", "the smallest |O| kept (a zero becomes this)").at_least(0),
    setting("max", TYCHO_SETTING_NUMBER, "1", "the largest |O| kept (a thin specimen does not amplify: 1)").above(0),
    end_of_settings()};

const char* const k_lowpass_keys[] = {"sigma_A", "weight", nullptr};
const tycho_setting k_lowpass_settings[] = {
    setting("sigma_A", TYCHO_SETTING_NUMBER, "0.5", "σ of the Gaussian, once per iteration", "Å").above(0).at_most(1e4),
    setting("weight", TYCHO_SETTING_NUMBER, "1", "share of the filtered object blended in").above(0).at_most(1),
    end_of_settings()};

const char* const k_potential_keys[] = {"reference", nullptr};
const char* const k_references[] = {"zero", "minimum", nullptr};
const tycho_setting k_potential_settings[] = {
    setting("reference", TYCHO_SETTING_STRING, "\"zero\"",
            "\"zero\": negative phases become 0 (the vacuum's); \"minimum\": each slice's smallest phase becomes 0")
        .one_of(k_references),
    end_of_settings()};

const char* const k_tv_keys[] = {"weight", "iterations", nullptr};
const tycho_setting k_tv_settings[] = {
    setting("weight", TYCHO_SETTING_NUMBER, "0.001",
            "λ of the step, in the object's units (|O| ≈ 1: radians); 0: no change").at_least(0),
    setting("iterations", TYCHO_SETTING_INTEGER, "20", "Chambolle iterations per step").at_least(1).at_most(1000),
    end_of_settings()};

const char* const k_depth_keys[] = {"sigma_A", "weight", nullptr};
const tycho_setting k_depth_settings[] = {
    setting("sigma_A", TYCHO_SETTING_NUMBER, "5", "σ of the Gaussian along the depth, once per iteration", "Å").above(0),
    setting("weight", TYCHO_SETTING_NUMBER, "1", "share of the filtered slices blended in").above(0).at_most(1),
    end_of_settings()};

const char* const k_missing_cone_keys[] = {"gamma", nullptr};
const tycho_setting k_missing_cone_settings[] = {
    setting("gamma", TYCHO_SETTING_NUMBER, nullptr,
            "the kept band's edge over the bright field's |k_z| ≤ k_r (α − λ k_r / 2); default: the detector's largest "
            "angle over the aperture's, λ / (2 px) / α (the band of every interference the detector records)")
        .above(0).at_most(100),
    end_of_settings()};

const char* const k_power_keys[] = {"relative_power", nullptr};
const tycho_setting k_power_settings[] = {
    setting("relative_power", TYCHO_SETTING_NUMBER, "1",
            "the probe's total power over the measured patterns' mean total intensity").above(0).at_most(1e6),
    end_of_settings()};

const char* const k_aperture_keys[] = {"semiangle_factor", nullptr};
const tycho_setting k_aperture_settings[] = {
    setting("semiangle_factor", TYCHO_SETTING_NUMBER, "1.1",
            "the Fourier cut-off over the aperture's semiangle; the probe is 0 beyond it").above(0),
    end_of_settings()};

const char* const k_centre_keys[] = {"tolerance_A", "shift_object", nullptr};
const tycho_setting k_centre_settings[] = {
    setting("tolerance_A", TYCHO_SETTING_NUMBER, "0.01",
            "the distance from the window centre the probe's centroid may keep (0: always centred)", "Å")
        .at_least(0),
    setting("shift_object", TYCHO_SETTING_BOOL, "true",
            "shift the object with the probe, so the model intensities do not change"),
    end_of_settings()};

const char* const k_affine_keys[] = {"linear", "fast_axis", "residual_weight", "residual_max_A", nullptr};
const char* const k_linear[] = {"free", "drift", "nominal", nullptr};
const tycho_setting k_affine_settings[] = {
    setting("linear", TYCHO_SETTING_STRING, "\"free\"",
            "\"free\": fit scale, rotation and shear; \"drift\": only those of a drift linear in time; "
            "\"nominal\": keep the recorded ones")
        .one_of(k_linear),
    setting("fast_axis", TYCHO_SETTING_INTEGER, "1",
            "linear = \"drift\": the scan axis the beam sweeps first (1: the patterns' storage order)")
        .at_least(0)
        .at_most(1),
    setting("residual_weight", TYCHO_SETTING_NUMBER, "1", "the share of each position's residual from the map kept")
        .at_least(0)
        .at_most(1),
    setting("residual_max_A", TYCHO_SETTING_NUMBER, "0", "the largest residual kept per axis (0: no cap)", "Å").at_least(0),
    end_of_settings()};

const tycho_component k_components[] = {
    with_settings(
        constraint_component<tc::object_amplitude>(
            "object_amplitude", "1.0.0", "clamps |O| to [min, max] after each step", k_host, k_amplitude_keys),
        k_amplitude_settings),
    with_settings(constraint_component<tc::object_phase>(
                      "object_phase", "1.0.0", "a pure-phase object: |O| = 1 after each step", k_host, k_no_keys),
                  k_no_settings),
    with_settings(constraint_component<tc::object_lowpass>(
                      "object_lowpass", "1.1.0", "blends a Gaussian low-pass of the object in, once per iteration",
                      k_host, k_lowpass_keys),
                  k_lowpass_settings),
    with_settings(constraint_component<tc::object_potential>(
                      "object_potential", "1.0.0",
                      "a real, non-negative potential: O = exp(iσV), V ≥ 0, after each step", k_host, k_potential_keys),
                  k_potential_settings),
    with_settings(constraint_component<tc::object_tv>(
                      "object_tv", "1.1.0", "a total-variation (ROF) proximal step on each slice, once per iteration",
                      k_host, k_tv_keys),
                  k_tv_settings),
    with_settings(
        constraint_component<tc::object_depth>(
            "object_depth", "1.1.0", "blends a Gaussian low-pass along the slices in, once per iteration (slices > 1)",
            k_host, k_depth_keys),
        k_depth_settings),
    with_settings(constraint_component<tc::object_missing_cone>(
                      "object_missing_cone", "1.1.0",
                      "removes what the probe's cone of angles cannot transfer between depths, once per iteration "
                      "(slices > 1)",
                      k_host, k_missing_cone_keys),
                  k_missing_cone_settings),
    with_settings(constraint_component<tc::probe_orthogonal_modes>(
                      "probe_orthogonal_modes", "1.0.0",
                      "orthonormalises several probe modes in decreasing power after each step", k_host, k_no_keys),
                  k_no_settings),
    with_settings(
        constraint_component<tc::probe_power>(
            "probe_power", "1.0.0", "scales the probe's power to the measured patterns' mean intensity after each step",
            k_host, k_power_keys),
        k_power_settings),
    with_settings(
        constraint_component<tc::probe_aperture>(
            "probe_aperture", "1.0.0", "zeroes the probe's spectrum outside the probe-forming aperture after each step",
            k_host, k_aperture_keys),
        k_aperture_settings),
    with_settings(constraint_component<tc::probe_centre>(
                      "probe_centre", "1.0.0",
                      "keeps the probe's intensity centroid at the window centre, the object shifted alike", k_host,
                      k_centre_keys),
                  k_centre_settings),
    with_settings(
        constraint_component<tc::positions_affine>(
            "positions_affine", "1.0.0",
            "keeps the corrected positions an affine map of the nominal scan plus a residual", k_host, k_affine_keys),
        k_affine_settings),
};
}  // namespace

TYCHO_PLUGIN("constraints", "1.0.0", k_components)
