// The runtime's own config keys, one declaration each: type, default (as TOML writes it; none
// when it comes from the data or other keys), range or allowed values, unit, one line of doc.
// Components declare theirs through tycho_component::settings. docs/config-reference.md is
// checked against these (tests/test_settings.cpp). The runtime's value checks stay where the
// values are used (their messages say more than a range can); these give names, defaults, docs.
#include <tycho/core/error.hpp>

#include <cmath>
#include <map>

#include "settings/config_defaults.hpp"
#include "tycho/host/settings.hpp"

namespace tycho::host {

namespace {
setting_decl decl(const char* key, tycho_setting_type type, std::optional<std::string> default_text, const char* unit,
                  const char* doc) {
  setting_decl d;
  d.key = key;
  d.type = type;
  d.default_text = std::move(default_text);
  d.unit = unit;
  d.doc = doc;
  return d;
}
setting_decl at_least(setting_decl d, double v, bool exclusive = false) {
  d.bounds |= TYCHO_SETTING_HAS_MIN | (exclusive ? TYCHO_SETTING_MIN_EXCLUSIVE : 0u);
  d.min = v;
  return d;
}
setting_decl at_most(setting_decl d, double v, bool exclusive = false) {
  d.bounds |= TYCHO_SETTING_HAS_MAX | (exclusive ? TYCHO_SETTING_MAX_EXCLUSIVE : 0u);
  d.max = v;
  return d;
}
// A mixed key's forms, as the reference's type column writes them (without its backticks).
setting_decl taking(setting_decl d, const char* forms) {
  d.forms = forms;
  return d;
}
setting_decl one_of(setting_decl d, std::vector<std::string> values) {
  d.allowed = std::move(values);
  return d;
}
std::string quoted(const char* s) { return cat("\"", s, "\""); }

constexpr auto S = TYCHO_SETTING_STRING;
constexpr auto I = TYCHO_SETTING_INTEGER;
constexpr auto N = TYCHO_SETTING_NUMBER;
constexpr auto B = TYCHO_SETTING_BOOL;
constexpr auto IL = TYCHO_SETTING_INTEGER_LIST;
constexpr auto NL = TYCHO_SETTING_NUMBER_LIST;
constexpr auto M = TYCHO_SETTING_MIXED;
const std::nullopt_t none = std::nullopt;

std::vector<setting_decl> parameter_keys() {
  return {
      decl("optimizer", S, quoted(defaults::optimizer), "", "the optimizer component (`tycho plugins` lists them)"),
      at_least(decl("first_iteration", I, "1", "", "the parameter stays fixed before this iteration"), 1),
      one_of(decl("schedule", S, "\"constant\"", "", "learning-rate schedule"), {"constant", "cosine", "exponential"}),
      at_most(at_least(decl("final_learning_rate_fraction", N, "0.1", "",
                            "the schedule's factor at the last iteration"),
                       0, true),
              1),
  };
}

const std::map<std::string, std::vector<setting_decl>>& tables() {
  static const std::map<std::string, std::vector<setting_decl>> t = [] {
    std::map<std::string, std::vector<setting_decl>> m;
    m["data"] = {
        decl("source", S, quoted(defaults::source), "", "the source component that reads the data"),
        at_most(at_least(decl("scan_step_A", N, none, "Å", "scan step for both scan axes (default: from the file)"), 1e-6), 1e9),
        at_least(decl("detector_pixel_invA", N, none, "Å⁻¹", "reciprocal pixel size for both detector axes (default: from the file)"), 0, true),
        at_most(at_least(decl("fast_axis", I, none, "", "the scan axis the beam sweeps first, 0 or 1 (default: not known); with one slice the scan map then holds that axis's step as stated and lets a drift stretch the other"), 0), 1),
        decl("positions_from", S, none, "", "a tycho result whose saved positions a fresh run starts from (e.g. corrected by an earlier run on the same data), relative to the config's folder"),
        decl("shuffle_positions", B, "false", "", "a control: the patterns are given the scan's positions in a random order (seeded by [reconstruct] seed), so that the positions place nothing; the scan geometry search's structureless baseline"),
        at_least(decl("detector_distance_m", N, none, "m", "far-field detector: specimen-to-detector distance; with detector_pixel_size_m gives detector_pixel_invA = p / (λ z) (default: from the file)"), 0, true),
        at_least(decl("detector_pixel_size_m", N, none, "m", "far-field detector: physical pixel size, both axes (default: from the file)"), 0, true),
    };
    m["optics"] = {
        at_most(at_least(decl("energy_eV", N, none, "eV", "beam energy (default: from the file)"), 1), 1e8),
        at_least(decl("semiangle_mrad", N, none, "mrad", "probe-forming aperture semiangle (default: from the file)"), 0, true),
        decl("C10_A", N, none, "Å", "defocus aberration C10, < 0 underfocus (default: from the file, else 0)"),
        decl("defocus_A", N, none, "Å", "abTEM's defocus, stored as C10 = −defocus_A"),
        taking(decl("refine_C10", M, "\"auto\"", "", "with scan_rotation_deg = \"auto\": \"auto\" starts from the C10 the bright field's parallax measures (when it is precise) and, with one slice, refines it with the scan map (several slices: refined where the map refines the scale, [reconstruct.positions] refine_scan_scale, else held: a thick specimen's slices trade off against the defocus); true: refined with any number of slices; false: keep the stated C10"), "boolean or \"auto\""),
        one_of(decl("radiation", S, none, "", "what the beam is, which sets the wavelength of energy_eV (default: what the file says, else \"electron\")"),
               {"electron", "xray"}),
        one_of(decl("probe_model", S, "\"aperture\"", "", "the initial probe: a disc or annulus in the back focal plane (condenser aperture, zone plate), or a pinhole in real space"),
               {"aperture", "pinhole"}),
        at_most(at_least(decl("central_stop", N, "0", "", "a zone plate's central stop: the blocked fraction of the pupil's radius"), 0), 1, true),
        at_least(decl("zone_plate_diameter_m", N, none, "m", "zone plate diameter D; with focal_length_m gives semiangle_mrad = D / 2f"), 0, true),
        at_least(decl("focal_length_m", N, none, "m", "zone plate focal length f"), 0, true),
        at_least(decl("pinhole_diameter_m", N, none, "m", "probe_model = \"pinhole\": its diameter; propagated by C10 to the specimen"), 0, true),
    };
    m["preprocess"] = {
        at_least(decl("object_padding_px", I, "16", "px", "object margin beyond the outermost probe windows, each side"), 0),
        decl("scan_origin_A", NL, "[0, 0]", "Å", "where the first scan position lies, [x, y]"),
        decl("pad_detector", B, "false", "", "pad each detector axis to the next fast FFT size, masked"),
        decl("pad_detector_to", IL, none, "px", "pad the detector to this window [N0', N1'], masked; each from the detector's size to 65536"),
        taking(decl("saturation_value", M, none, "", "a number > 0 or false: values at or above it are masked as saturated (default: the integer dtype's maximum)"), "number > 0, or false"),
        at_most(at_least(decl("max_masked_fraction", N, "0.5", "", "the largest fraction of detector pixels that may be masked"), 0), 1),
        decl("detect_bad_pixels", B, "true", "", "search the data for dead and hot detector pixels (against their neighbours, over the scan) and mask them"),
        taking(decl("bad_pixels", M, none, "", "detector pixels to mask, [[row, column], ...] in the data's own (stored) frame"), "array of [row, column] pairs of integers ≥ 0"),
        decl("integer_targets", B, none, "", "keep integer counts as uint16 targets (default: true for counts the source delivers as such; float32 data of whole counts packed only for an engine on a GPU)"),
        one_of(decl("com_fit", S, "\"none\"", "", "fit the patterns' centre of mass over the scan"), {"none", "constant", "plane"}),
        decl("recentre", B, "false", "", "shift every pattern by its fitted centre of mass; needs com_fit"),
        taking(decl("scan_rotation_deg", M, "\"auto\"", "degrees", "rotation of the scan against the detector (py4DSTEM's convention; applied to the positions): a number, or \"auto\": estimated from the data (the bright field's parallax, else the centre-of-mass curl, else 0 with a warning)"), "number, degrees, or \"auto\""),
        taking(decl("scan_transpose", M, "\"auto\"", "", "a bool or \"auto\": the detector axes are swapped against the scan axes"), "boolean, or \"auto\""),
        one_of(decl("scan_scale", S, "\"auto\"", "", "the scan map's isotropic scale with scan_rotation_deg = \"auto\": \"stated\" (the stated step), \"lattice\" (a crystal's whole map, scale included, from its lattice peaks in the scan against its discs on the detector; with one slice; without a lattice the stated step, with a warning) or \"auto\" (the lattice where a crystal gives one, with one slice and no [data] fast_axis, whose stated step the run then holds; else the stated step, said)"), {"stated", "lattice", "auto"}),
        taking(decl("scan_geometry_search", M, "\"auto\"", "", "with scan_rotation_deg = \"auto\": trial reconstructions (positions held, scan_geometry_search_iterations each) at candidate rotations every scan_geometry_search_step_deg and each open transpose, ranked by their loss, checked on held-out patterns with five other seeds and four folds each (at 99 % where neighbouring patterns place no position, else 95 %), the rotation then placed by trials of the whole scan as one batch and held by the scan map; \"auto\": where neither the parallax nor the centre-of-mass curl measures the geometry (a single rank; not from a prepared file), true: instead of them, false: never (the nominal raster, with a warning)"), "boolean, or \"auto\""),
        at_most(at_least(decl("scan_geometry_search_step_deg", N, "20", "degrees", "the geometry search's spacing of candidate rotations over the full turn (the best is refined by half a step either side)"), 1), 90),
        at_most(at_least(decl("scan_geometry_search_iterations", I, "200", "", "iterations of each of the geometry search's trial reconstructions"), 4), 100000),
        at_least(decl("binning", I, "1", "", "sum b x b detector pixels"), 1),
        decl("crop_detector", IL, none, "px", "keep the centred [N0, N1] pixels of each pattern"),
        decl("normalise", B, "false", "", "scale every pattern to the scan's mean total intensity"),
        decl("save_raw_data", B, "false", "", "`tycho preprocess` only: embed the preprocessed patterns"),
    };
    m["reconstruct"] = {
        decl("engine", S, quoted(defaults::engine), "", "the engine component"),
        taking(decl("iterations", M, "\"auto\"", "", "iterations (epochs over all patterns): a whole number from 0 to 1e9 for a fixed count, or \"auto\": until the loss stops falling by more than its noise (the stopping rule), at most max_iterations"), "integer or \"auto\""),
        at_most(at_least(decl("max_iterations", I, "1000", "", "with iterations = \"auto\": the most iterations the run takes"), 1), 1e9),
        at_most(at_least(decl("stop_window", I, "20", "iterations", "with iterations = \"auto\": the iterations W the loss's trend is fitted over and predicted ahead"), 3), 1000),
        at_most(at_least(decl("plateau_halvings", I, "3", "", "with iterations = \"auto\": where the stopping rule finds that the loss no longer falls (or rises), the object's and probe's learning rates are halved and the rule judges again after W iterations, up to this many times before the run ends there; 0: it ends at the first such verdict"), 0), 30),
        at_most(at_least(decl("schedule_iterations", I, none, "", "the iterations a decaying learning-rate schedule (cosine, exponential) spans; default: iterations when it is a number, else 100"), 1), 1e9),
        at_least(decl("batch_size", I, "128", "", "mini-batch size in positions, global over the ranks"), 1),
        decl("loss", S, quoted(defaults::loss), "", "the loss component"),
        decl("seed", I, "0", "", "seeds the per-iteration permutation of the patterns"),
        at_most(at_least(decl("validation_fraction", N, "0", "",
                              "the share of the patterns held out of every batch (drawn by seed), their mean loss at the "
                              "run's end reported as the held-out loss: how well the model predicts patterns it was not "
                              "fitted to; needs the positions held"), 0), 0.5),
        at_least(decl("validation_fold", I, "0", "",
                      "with validation_fraction f: which of the seed's 1/f disjoint blocks of patterns is held out "
                      "(k-fold cross-validation: folds 0 to 1/f - 1)"), 0),
        one_of(decl("batching", S, "\"auto\"", "",
                    "which patterns form a batch: random (a permutation each iteration), compact (patches of "
                    "neighbouring positions, the object stepped only under each batch's windows), or auto "
                    "(compact for objects larger than an eighth of what a batch's windows cover)"),
               {"auto", "random", "compact"}),
        one_of(decl("precision", S, "\"float32\"", "", "what the engine computes in"), {"float32", "float64"}),
        at_least(decl("probe_modes", I, "1", "", "probe modes (mixed state); at most the window's pixels"), 1),
        at_least(decl("slices", I, "1", "", "object slices (multislice); > 1 needs slice_thickness_A"), 1),
        at_least(decl("slice_thickness_A", N, none, "Å", "distance between consecutive slices (needed when slices > 1)"), 0, true),
        decl("devices", IL, "[0]", "", "GPUs for an engine that runs on one, each >= 0"),
        one_of(decl("target_residency", S, "\"auto\"", "", "where the targets live: the engine's memory, host memory, or read per batch from disk"),
               {"auto", "device", "host", "disk"}),
        at_least(decl("host_memory_GiB", N, none, "GiB", "host memory the planner may use (default: physical memory, or a lower RLIMIT_AS/RLIMIT_DATA)"), 0, true),
    };
    m["reconstruct.object"] = parameter_keys();
    m["reconstruct.object"].push_back(
        at_least(decl("amplitude_max", N, "0", "", "after each step clip |O| to at most this, if > 0 (0: off)"), 0));
    m["reconstruct.object"].push_back(one_of(
        decl("kind", S, "\"complex\"", "",
             "complex transmission, a pure phase (|O| = 1 after each step), or a real non-negative potential "
             "(|O| = 1 and phase >= 0: the constraint object_potential)"),
        {"complex", "phase", "potential"}));
    m["reconstruct.object"].push_back(one_of(
        decl("depth_regulariser", S, "\"missing_cone\"", "",
             "with several slices: the constraint object_missing_cone (the depth detail the data cannot carry "
             "damped), unless the constraints list a depth regulariser; \"none\": off"),
        {"missing_cone", "none"}));
    m["reconstruct.probe"] = parameter_keys();
    m["reconstruct.probe"].push_back(at_most(
        at_least(decl("mode_power", N, "0.1", "", "share of the power the initial modes beyond the first carry together"), 0),
        1, true));
    m["reconstruct.probe"].push_back(
        decl("orthogonalize_modes", B, "true", "", "keep several modes orthonormal, in decreasing power, after each step"));
    m["reconstruct.probe"].push_back(decl("initial", S, "\"model\"", "",
                                          "the starting probe: \"model\" (the [optics] model), or an .npy or HDF5 file (a CXI file's illumination), relative to the config's folder"));
    m["reconstruct.probe"].push_back(decl("initial_dataset", S, none, "",
                                          "the probe's dataset in an HDF5 initial (default: /entry_1/instrument_1/source_1/illumination, else .../source_1/probe)"));
    m["reconstruct.probe"].push_back(decl("vacuum_pattern", S, none, "",
                                          "a vacuum pattern (.npy, or an HDF5 file with vacuum_pattern_dataset) recorded with no specimen, on the data's detector: its square root replaces the model's aperture, the phase still from [optics] (frames summed)"));
    m["reconstruct.probe"].push_back(decl("vacuum_pattern_dataset", S, none, "",
                                          "the frames' dataset in an HDF5 vacuum_pattern, shape (..., N0, N1)"));
    m["reconstruct.positions"] = {
        taking(decl("correct", M, "\"auto\"", "", "position correction: move each probe position by its gradient once per iteration, its step divided by the loss's curvature measured at the first step and 1, 4, 16, ... iterations after it; \"auto\": with the scan map refined, from first_iteration beside it where the map holds the isotropic scale (one slice), else from the iteration after the map's refinement has converged (a freed scale trades off against them), and after 20 of their own steps the corrections beyond the map are weighed against their counting noise (each position's Fisher information from the engine): kept above twice its variance, else the positions return to the map's and stay there (data that are not counts, or an engine without the information: kept); \"after_scan_map\": from the iteration after the map converged, unweighed; none of these where the map is not refined; true: from first_iteration; false: never"), "boolean, \"auto\" or \"after_scan_map\""),
        at_least(decl("first_iteration", I, "1", "", "the positions stay fixed before this iteration"), 1),
        at_least(decl("learning_rate", N, "1", "", "fraction of the Gauss–Newton step (the probe's curvature sets the scale)"), 0, true),
        at_least(decl("max_step_A", N, "0.1", "Å", "largest move of a position per iteration and axis"), 0, true),
        decl("remove_mean_shift", B, "true", "", "remove the mean move of all positions at each step, so the object cannot drift"),
        one_of(decl("schedule", S, "\"constant\"", "", "learning-rate schedule"), {"constant", "cosine", "exponential"}),
        at_most(at_least(decl("final_learning_rate_fraction", N, "0.1", "", "the schedule's factor at the last iteration"),
                         0, true),
                1),
        decl("refine_scan_map", B, "true", "", "true: refine the scan's linear map (rotation unless scan_rotation_deg is given, the ratio of the steps, shear; the isotropic scale with refine_scan_scale) and the probe's C10 ([optics] refine_C10) as a few global parameters, every scan_map_every iterations from scan_map_first_iteration; with correct = true, or \"after_scan_map\" once the map has converged, the positions' own steps keep the rest"),
        taking(decl("refine_scan_scale", M, "\"auto\"", "", "refine the scan's isotropic scale too: \"auto\" with several slices (then C10 too, with refine_C10 = \"auto\", and the probe waits until the map has converged), not with one (the scale and C10 are not separable there); true, false: always, never"), "boolean or \"auto\""),
        at_least(decl("scan_map_first_iteration", I, "10", "", "the scan map's first step"), 1),
        at_least(decl("scan_map_every", I, "5", "iterations", "iterations between the scan map's steps"), 1),
        at_least(decl("scan_map_max_move_A", N, "0.3", "Å", "largest move of one scan-map step at the scan's rms radius"), 0, true),
    };
    m["reconstruct.constraints"] = {
        decl("name", S, none, "", "the constraint component (`tycho plugins` lists them); required"),
        at_least(decl("first_iteration", I, "1", "", "the constraint applies from this iteration on"), 1),
        at_least(decl("last_iteration", I, "0", "", "and up to this one (0: to the end)"), 0),
    };
    m["parallel"] = {
        decl("reducer", S, "\"auto\"", "", "\"auto\": none for one rank, else the first reducer of the engine's device; \"none\"; or a reducer's name"),
        one_of(decl("sharding", S, "\"patterns\"", "", "how the patterns are split over the ranks"), {"patterns", "replicated"}),
        at_most(at_least(decl("timeout_s", N, "600", "s", "a collective that waits longer ends the run"), 1), 1e9),
        one_of(decl("on_error", S, "\"abort\"", "", "C API sessions: stop every rank, or only return the error"), {"abort", "return"}),
        one_of(decl("rendezvous", S, "\"auto\"", "", "how the ranks of a GPU run meet before the reducer has a communicator"),
               {"auto", defaults::rendezvous_host_reducer, "tcp", "file"}),
        at_most(at_least(decl("rendezvous_port", I, none, "", "TCP port of the rendezvous (default: MASTER_PORT, + 1 under torchrun)"), 1), 65535),
        decl("rendezvous_file", S, none, "", "a path every rank sees, fresh for each run; relative to the config file"),
    };
    m["output"] = {
        decl("path", S, "\"tycho-result.zip\"", "", "the result file, relative to the current folder"),
        decl("previews", B, "true", "", "write PNG previews beside the result"),
        decl("format", S, quoted(defaults::format), "", "the format component"),
        decl("overwrite", B, "false", "", "replace an existing result (never an input, never a non-regular file)"),
        at_most(at_least(decl("checkpoint_every", I, "0", "iterations",
                              "save the result so far every N iterations (0: never); resumable with --from"), 0),
                1000000000),
    };
    return m;
  }();
  return t;
}
}  // namespace

const std::vector<std::string>& host_setting_tables() {
  static const std::vector<std::string> names = {"data", "optics", "preprocess", "reconstruct",
                                                 "reconstruct.object", "reconstruct.probe", "reconstruct.positions",
                                                 "reconstruct.constraints", "parallel", "output"};
  return names;
}

const std::vector<setting_decl>& host_settings(const std::string& table) {
  auto it = tables().find(table);
  if (it == tables().end()) fail(TYCHO_ERR_NOT_FOUND, "the runtime reads no keys in [", table, "]");
  return it->second;
}

}  // namespace tycho::host
