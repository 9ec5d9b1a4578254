// [[reconstruct.constraints]]: the constraint components of a run (ABI 1.3), read and checked
// before any data is read, created once the engine exists and destroyed with the session.
// The runtime's own shorthand keys ([reconstruct.object] amplitude_max and kind = "phase",
// [reconstruct.probe] orthogonalize_modes) become built-in constraints ahead of the list.
// Host-internal (toml++ stays out of the public headers).
#pragma once

#include <tycho/core/config.hpp>
#include <tycho/core/driver.hpp>
#include <tycho/host/registry.hpp>

#include <toml++/toml.h>

#include <memory>
#include <string>
#include <vector>

namespace tycho::host {

// One entry: its component, its own table and its iterations.
struct constraint_entry {
  std::string label;          // for messages: "[[reconstruct.constraints]] 2 (probe_power)"
  std::string name;           // the component
  const toml::table* table;   // the entry (owned by the document, or by the list for a shorthand)
  int64_t first_iteration = 1;
  int64_t last_iteration = 0;  // 0: to the end
};

// What the runtime's shorthand keys ask for (read_reconstruct_settings fills it).
struct constraint_shorthands {
  double amplitude_max = 0;           // [reconstruct.object] amplitude_max (> 0: on)
  bool pure_phase = false;            // [reconstruct.object] kind = "phase"
  bool potential = false;             // [reconstruct.object] kind = "potential"
  bool orthogonalize_modes = true;    // [reconstruct.probe] orthogonalize_modes
  int64_t probe_modes = 1;
  int64_t probe_first_iteration = 1;  // the orthonormalisation follows the probe's steps
  bool depth_regulariser = false;     // slices > 1 and [reconstruct.object] depth_regulariser = "missing_cone"
};

// The keys the runtime reads in every entry besides the component's own.
std::vector<std::string> constraint_host_keys();

// Checks the list's shape, every entry's name (an installed constraint), keys and values:
// errors name the entry and the key.
void validate_constraints(const config_document& doc, const registry& reg);

// Whether the document's [[reconstruct.constraints]] list names the constraint `name`.
bool lists_constraint(const config_document& doc, const std::string& name);

// The constraints of a run, created for the engine's device; destroys them with itself.
class constraint_list {
 public:
  constraint_list() = default;
  constraint_list(const constraint_list&) = delete;
  constraint_list& operator=(const constraint_list&) = delete;
  ~constraint_list();

  // Shorthands first, then the document's list, in order.
  void read(const config_document& doc, const registry& reg, const constraint_shorthands& shorthands);
  // Creates every entry with `setup` (its config is set per entry); with `positions_corrected`
  // false a constraint that acts only on positions is created but never runs (a warning says so).
  void create(tycho_constraint_setup setup, bool positions_corrected);
  const std::vector<constraint_binding>& bindings() const { return bindings_; }
  // (name, component) of each created constraint, for the manifest.
  std::vector<const component_ref*> components() const { return refs_; }

 private:
  std::vector<constraint_entry> entries_;
  std::vector<std::unique_ptr<toml::table>> shorthand_tables_;
  std::vector<const component_ref*> refs_;
  std::vector<constraint_binding> bindings_;
};

}  // namespace tycho::host
