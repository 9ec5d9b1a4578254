// A result file to resume from (`tycho reconstruct --from`): read, checked against the config's
// data, and its optimizers' state restored.

#include "runtime/session_state.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/sdk.hpp>
#include <tycho/sdk/optimizer.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "results/manifest_checks.hpp"
#include "results/result_file.hpp"
#include "settings/iteration_settings.hpp"

namespace tycho::host {

using namespace session_detail;

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string t;
  for (std::size_t i = 0; i < shape.size(); ++i) t += (i ? " x " : "") + std::to_string(shape[i]);
  return t.empty() ? "()" : t;
}

}  // namespace

resume_data session_detail::load_resume(const std::string& path, const registry& reg) {
  resume_data r(read_result_file(reg, path, "--from", "resumed with --from"));
  if (!r.file.schedule_iterations || !r.file.manifest.find("optimizer_state"))
    fail(TYCHO_ERR_BAD_DATA, "'", path, "' cannot be resumed: it was written by a tycho that did not save ",
         "the optimizer state and the schedule's length");
  r.total = *r.file.schedule_iterations;
  r.count = r.total;
  if (const nlohmann::json* n = r.file.manifest.find("history.stopping.iterations"); n && n->is_number())
    r.count = r.file.manifest.integer("history.stopping.iterations", 0, k_most_iterations);
  // Halvings are the rule's: a fixed-count file, or one that does not say how many were allowed,
  // holds none a run writes.
  if (const nlohmann::json* at = r.file.manifest.find("history.stopping.halved_at")) {
    const nlohmann::json* rule = r.file.manifest.find("history.stopping.iterations");
    if (!(rule && rule->is_string()) || !r.file.manifest.find("history.stopping.plateau_halvings"))
      r.file.manifest.refuse("history.stopping.halved_at", at,
                             "no halvings in a file without history.stopping.iterations = \"auto\" and "
                             "history.stopping.plateau_halvings");
  }
  if (const nlohmann::json* rule = r.file.manifest.find("history.stopping.iterations"); rule && rule->is_string()) {
    const manifest_reader& m = r.file.manifest;
    if (rule->get<std::string>() != "auto") m.refuse("history.stopping.iterations", rule, "\"auto\" or a whole number");
    r.by_rule = true;
    r.max_iterations = m.integer("history.stopping.max_iterations", 1, k_most_iterations);
    r.stop_window = m.integer("history.stopping.window", 3, 1000);
    r.counting_noise = m.finite("history.stopping.counting_noise", "the loss's counting noise");
    // The learning rates' halvings at the rule's verdicts (a file from before them had none): the
    // iterations after which they fell, each a window after the one before, no more than allowed.
    if (m.find("history.stopping.plateau_halvings")) {
      r.plateau_halvings = m.integer("history.stopping.plateau_halvings", 0, 30);
      const nlohmann::json& at = m.at("history.stopping.halved_at", "a list of iterations");
      if (!at.is_array() || at.size() > std::size_t(r.plateau_halvings))
        m.refuse("history.stopping.halved_at", &at,
                 cat("a list of at most ", r.plateau_halvings, " iterations (plateau_halvings)"));
      r.halved_at = m.integers("history.stopping.halved_at", at.size(), 1, r.done);
      for (std::size_t k = 1; k < r.halved_at.size(); ++k)
        if (r.halved_at[k] < r.halved_at[k - 1] + r.stop_window)
          m.refuse("history.stopping.halved_at", &at,
                   cat("iterations each at least the window (", r.stop_window, ") after the one before"));
    }
    if (r.counting_noise < 0)
      m.refuse("history.stopping.counting_noise", m.find("history.stopping.counting_noise"), "a number >= 0");
  }
  return r;
}

// Refuses a resumed file whose data does not match the config's, naming both.
void session_detail::check_resume_shapes(const resume_data& r, const std::vector<int64_t>& scan,
                                         const std::vector<int64_t>& window, const std::vector<int64_t>& object,
                                         const std::vector<int64_t>& probe, int64_t patterns, bool float64) {
  const owned_array& obj = r.record.array("object", r.path);
  const owned_array& prb = r.record.array("probe", r.path);
  const owned_array& pos = r.record.array("positions_px", r.path);
  if (r.scan_shape != scan || r.window_shape != window || obj.shape != object || prb.shape != probe)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "--from '", r.path, "' does not match this config's data: the file has scan ",
         shape_text(r.scan_shape), ", window ", shape_text(r.window_shape), ", object ", shape_text(obj.shape),
         ", probe ", shape_text(prb.shape), "; the config gives scan ", shape_text(scan), ", window ",
         shape_text(window), ", object ", shape_text(object), ", probe ", shape_text(probe));
  // The dtype of the configured precision: a resumed run keeps the precision it was saved in.
  const DLDataType want{kDLComplex, uint8_t(float64 ? 128 : 64), 1};
  auto same = [](DLDataType a, DLDataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; };
  auto name = [](DLDataType t) { return dtype_name_of(t); };
  if (!same(obj.dtype, want) || !same(prb.dtype, want))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "--from '", r.path, "' holds a ", name(obj.dtype), " object and a ",
         name(prb.dtype), " probe (precision ", precision_of(obj.dtype), "), but [reconstruct] precision = \"",
         float64 ? "float64" : "float32", "\" needs ", name(want),
         ": resume with the precision the file was written with");
  if (pos.shape != std::vector<int64_t>{patterns, 2} || !same(pos.dtype, DLDataType{kDLFloat, 64, 1}))
    fail(TYCHO_ERR_BAD_DATA, "'", r.path, "': positions_px ", shape_text(pos.shape), " is not (", patterns,
         ", 2) float64");
}

// Gives a new optimizer the saved state of `which` ("object" or "probe").
void session_detail::restore_optimizer(const resume_data& r, const char* which, const component_ref& ref, tycho_optimizer* opt) {
  const auto* vt = ref.as<tycho_optimizer_vtable>();
  const int64_t count = has_state_functions(vt) ? vt->state_count(opt) : 0;
  const std::optional<saved_optimizer>& saved =
      std::string(which) == "object" ? r.file.object_optimizer : r.file.probe_optimizer;
  if (!saved) {
    if (count == 0) return;
    fail(TYCHO_ERR_BAD_DATA, "'", r.path, "' holds no state for the ", which, " optimizer");
  }
  if (saved->optimizer != ref.name)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "--from '", r.path, "': the ", which, " optimizer was \"", saved->optimizer,
         "\", the config asks for \"", ref.name, "\"; a resumed run keeps its optimizers");
  for (int64_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    check_status(vt->state_array(opt, i, &name, nullptr), "optimizer state_array");
    const std::string array = cat("optimizer.", which, ".", name ? name : "");
    const owned_array& a = r.record.array(array, r.path);
    DLTensor t = const_cast<owned_array&>(a).view();
    // The optimizer checks the values it is given (e.g. Adam's mean squares >= 0): its refusal
    // names the file and the array here.
    if (vt->set_state(opt, i, &t, saved->steps) != TYCHO_OK)
      fail(TYCHO_ERR_BAD_DATA, "'", r.path, "': array '", array, "' (resumed with --from) is refused by the ", which,
           " optimizer: ", last_error());
  }
}

// A run stepping the object in tiles continues their step counts: the file's, or, from a file
// whose run stepped the whole object, `object_steps` for every tile (each took every step).
void session_detail::restore_tile_steps(const resume_data& r, driver& drv, int64_t object_steps) {
  const object_tiles& tiles = *drv.tiles();
  for (const owned_array& a : r.record.arrays) {
    if (a.name != "object_tile_steps") continue;
    if (a.dtype.code != kDLInt || a.dtype.bits != 64 || a.shape != std::vector<int64_t>{tiles.rows(), tiles.cols()})
      fail(TYCHO_ERR_BAD_DATA, "'", r.path, "': object_tile_steps ", shape_text(a.shape), " is not (", tiles.rows(),
           ", ", tiles.cols(), ") int64, the tiles of this run's object");
    std::vector<int64_t> steps(a.as<int64_t>(), a.as<int64_t>() + a.count());
    for (std::size_t k = 0; k < steps.size(); ++k)  // counted on from here: bounded as the optimizers' own
      if (steps[k] < 0 || steps[k] > sdk::k_most_optimizer_steps)
        fail(TYCHO_ERR_BAD_DATA, "'", r.path, "': object_tile_steps holds ", steps[k], " at tile (",
             int64_t(k) / tiles.cols(), ", ", int64_t(k) % tiles.cols(), "); expected a step count from 0 to 2^53");
    drv.set_tile_steps(std::move(steps));
    return;
  }
  drv.set_tile_steps(std::vector<int64_t>(std::size_t(tiles.rows() * tiles.cols()), object_steps));
}

}  // namespace tycho::host
