#include "runtime/constraint_list.hpp"

#include <tycho/core/error.hpp>

#include <algorithm>

#include "settings/config_defaults.hpp"
#include "settings/config_read.hpp"
#include "settings/settings_read.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/settings.hpp"

namespace tycho::host {

namespace {
constexpr const char* k_table = "reconstruct.constraints";

std::string entry_label(std::size_t i, const std::string& name) {
  return cat("[[", k_table, "]] ", i + 1, name.empty() ? std::string() : cat(" (", name, ")"));
}

// The entries of the document's list, each a table with a name (checked).
std::vector<std::pair<std::string, const toml::table*>> list_entries(const config_document& doc) {
  std::vector<std::pair<std::string, const toml::table*>> out;
  auto node = doc.root().at_path(k_table);
  if (!node) return out;
  const toml::array* list = node.as_array();
  if (list == nullptr)
    fail(TYCHO_ERR_INVALID_ARGUMENT, doc.origin(), ": '", k_table, "' must be a list of tables ([[", k_table,
         "]] name = \"...\"), got a ", node.is_table() ? "single table [reconstruct.constraints]" : "value");
  for (std::size_t i = 0; i < list->size(); ++i) {
    const toml::table* t = list->get(i)->as_table();
    if (t == nullptr)
      fail(TYCHO_ERR_INVALID_ARGUMENT, doc.origin(), ": ", entry_label(i, ""), " must be a table with a 'name'");
    const auto name = read_key<std::string>(*t, "name", k_table);
    if (!name)
      fail(TYCHO_ERR_INVALID_ARGUMENT, doc.origin(), ": ", entry_label(i, ""),
           " has no 'name': say which constraint (`tycho plugins` lists them)");
    out.emplace_back(*name, t);
  }
  return out;
}

int64_t iteration_key(const toml::table& t, const std::string& label, const char* key, int64_t fallback) {
  const int64_t v = setting_value<int64_t>(t, k_table, key).value_or(fallback);
  if (v < (std::string(key) == "first_iteration" ? 1 : 0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, label, ": '", key, "' = ", v, " must be ",
         std::string(key) == "first_iteration" ? ">= 1" : ">= 0 (0: to the end)");
  return v;
}

const component_ref& find_constraint(const registry& reg, const std::string& label, const std::string& name) {
  try {
    return reg.find(TYCHO_COMPONENT_CONSTRAINT, name);
  } catch (const error& e) {
    fail(e.status, label, ": name = \"", name, "\": ", e.what());
  }
}
}  // namespace

std::vector<std::string> constraint_host_keys() { return setting_keys(host_settings(k_table)); }

void validate_constraints(const config_document& doc, const registry& reg) {
  const auto entries = list_entries(doc);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& [name, t] = entries[i];
    const std::string label = entry_label(i, name);
    const component_ref& c = find_constraint(reg, label, name);
    std::vector<std::string> keys = constraint_host_keys();
    keys.insert(keys.end(), c.config_keys.begin(), c.config_keys.end());
    try {  // the messages name the table; say which entry of the list
      check_keys(*t, k_table, keys, doc.origin());
      check_setting_values(*t, k_table, host_settings(k_table), "the runtime");
      check_setting_values(*t, k_table, c.settings, cat("constraint '", c.name, "'"));
    } catch (const error& e) {
      fail(e.status, label, ": ", e.what());
    }
    const int64_t first = iteration_key(*t, label, "first_iteration", 1);
    const int64_t last = iteration_key(*t, label, "last_iteration", 0);
    if (last > 0 && last < first)
      fail(TYCHO_ERR_INVALID_ARGUMENT, label, ": last_iteration = ", last, " is before first_iteration = ", first);
  }
}

void constraint_list::read(const config_document& doc, const registry& reg, const constraint_shorthands& sh) {
  auto shorthand = [&](const char* name, const std::string& label, toml::table table, int64_t first) {
    shorthand_tables_.push_back(std::make_unique<toml::table>(std::move(table)));
    entries_.push_back({label, name, shorthand_tables_.back().get(), first, 0});
  };
  // As the driver of ABI 1.2 applied them: a pure phase, else the amplitude clamp; the probe's
  // modes orthonormalised from the probe's first step on.
  if (sh.potential)  // the constraint's own defaults (reference = "zero")
    shorthand(defaults::potential_constraint, "[reconstruct.object] kind = \"potential\"", {}, 1);
  else if (sh.pure_phase)
    shorthand(defaults::phase_constraint, "[reconstruct.object] kind = \"phase\"", {}, 1);
  else if (sh.amplitude_max > 0)
    shorthand(defaults::amplitude_constraint, "[reconstruct.object] amplitude_max", toml::table{{"max", sh.amplitude_max}},
              1);
  if (sh.orthogonalize_modes && sh.probe_modes > 1)
    shorthand(defaults::mode_constraint, "[reconstruct.probe] orthogonalize_modes", {}, sh.probe_first_iteration);
  // Several slices: depth detail the data cannot carry is damped by default (on the matrix's 50 Å
  // SrTiO3 scan 0.18 without, 0.98 with; bench/RESULTS.md), unless the list has its own.
  if (sh.depth_regulariser && !lists_constraint(doc, defaults::depth_constraint) && !lists_constraint(doc, "object_depth"))
    shorthand(defaults::depth_constraint, "[reconstruct.object] depth_regulariser = \"missing_cone\"", {}, 1);
  const auto entries = list_entries(doc);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& [name, t] = entries[i];
    const std::string label = entry_label(i, name);
    if (name == defaults::mode_constraint && sh.probe_modes < 2)  // as positions_affine without correction
      log_warning("constraints", cat(label, ": orthonormalises several probe modes, and this run has one ([reconstruct] "
                                            "probe_modes = ", sh.probe_modes, "): it does nothing in this run"));
    entries_.push_back({label, name, t, iteration_key(*t, label, "first_iteration", 1),
                        iteration_key(*t, label, "last_iteration", 0)});
  }
  for (const auto& e : entries_) refs_.push_back(&find_constraint(reg, e.label, e.name));
}

void constraint_list::create(tycho_constraint_setup setup, bool positions_corrected) {
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const constraint_entry& e = entries_[i];
    const auto* vt = refs_[i]->as<tycho_constraint_vtable>();
    if (vt->struct_size < sizeof(tycho_constraint_vtable) || !vt->create || !vt->acts_on || !vt->apply || !vt->destroy)
      fail(TYCHO_ERR_ABI_MISMATCH, e.label, ": constraint '", e.name, "' from ", refs_[i]->plugin_path,
           " has an incomplete vtable");
    const tycho_config cfg{e.table, e.label, ""};
    setup.config = &cfg;
    constraint_binding b;
    b.vtable = vt;
    b.name = e.label;
    b.first_iteration = e.first_iteration;
    b.last_iteration = e.last_iteration;
    check_status(vt->create(&setup, &b.instance), cat(e.label, " create"));
    bindings_.push_back(b);
    bindings_.back().acts_on = vt->acts_on(b.instance);
    const uint32_t acts = bindings_.back().acts_on;
    if ((acts & (TYCHO_CONSTRAINT_OBJECT | TYCHO_CONSTRAINT_PROBE | TYCHO_CONSTRAINT_POSITIONS)) == 0)
      fail(TYCHO_ERR_INVALID_ARGUMENT, e.label, ": the constraint acts on nothing (acts_on = ", acts, ")");
    if (acts == TYCHO_CONSTRAINT_POSITIONS && !positions_corrected)  // a recipe run with correction off
      log_warning("constraints", cat(e.label, ": constrains the positions, which move only with [reconstruct.positions]",
                                     " correct = true: it does nothing in this run"));
  }
}

bool lists_constraint(const config_document& doc, const std::string& name) {
  for (const auto& [listed, table] : list_entries(doc))
    if (listed == name) return true;
  return false;
}

constraint_list::~constraint_list() {
  for (const auto& b : bindings_)
    if (b.instance != nullptr) b.vtable->destroy(b.instance);
}

}  // namespace tycho::host
