// Plugin discovery and loading (Boost.DLL), and the registry of components by kind and name.
#pragma once

#include <tycho/tycho_plugin.h>

#include "tycho/host/settings.hpp"

#include <memory>
#include <string>
#include <vector>

namespace tycho::host {

// The table of host functions every plugin receives (logging, errors, config, allocation).
const tycho_host_api* host_api();

// "source", "engine", ... for messages and config keys.
const char* kind_name(tycho_component_kind kind);

struct component_ref {
  tycho_component_kind kind;
  std::string name;
  std::string version;
  std::string description;
  std::string plugin_path;
  uint32_t devices = 0;
  std::vector<std::string> config_keys;
  const void* vtable = nullptr;
  uint32_t flags = 0;  // TYCHO_COMPONENT_* (ABI 1.1; 0 for a 1.0 component)
  // Typed declarations of its keys (ABI 1.1; empty for a 1.0 component). config_keys holds
  // their names too, besides any key listed without a declaration.
  std::vector<setting_decl> settings;

  template <class VT>
  const VT* as() const {
    return static_cast<const VT*>(vtable);
  }
};

// What happened to one plugin file: loaded (with its components) or refused (with why).
struct plugin_report {
  std::string path;
  bool loaded = false;
  std::string name;
  std::string version;
  uint32_t abi_version = 0;
  std::string refusal;
  std::vector<std::string> components;  // "kind name version"
};

class registry {
 public:
  registry();
  ~registry();
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;

  // Entries of TYCHO_PLUGIN_PATH (':'-separated), then the plugin folder beside libtycho /
  // the tycho command (lib/tycho/plugins), the same in the build and the install tree, then
  // the configured install folder (<libdir>/tycho/plugins). Missing folders stay in the list
  // (load_directories skips them) so the log and `tycho plugins` name every folder looked at.
  static std::vector<std::string> default_search_dirs();

  // Loads every libtycho_plugin_*.so in the folders (missing folders are skipped).
  void load_directories(const std::vector<std::string>& dirs);
  // Loads one file; a refusal is recorded in reports() and returned as false.
  bool load_file(const std::string& path);

  // The component of `kind` named `name`; throws TYCHO_ERR_NOT_FOUND naming the nearest name.
  const component_ref& find(tycho_component_kind kind, const std::string& name) const;
  std::vector<std::string> names(tycho_component_kind kind) const;
  const std::vector<component_ref>& components() const { return components_; }
  // A component that can describe itself (an engine's plan_memory): a usable one, else a
  // plan-only one (TYCHO_COMPONENT_PLAN_ONLY, never in components()); nullptr if neither.
  const component_ref* find_description(tycho_component_kind kind, const std::string& name) const;
  const std::vector<component_ref>& plan_only() const { return plan_only_; }
  const std::vector<plugin_report>& reports() const { return reports_; }
  // Every folder given to load_directories, in order (missing ones too).
  const std::vector<std::string>& searched_folders() const { return searched_; }

  // A registry loaded from the default folders, shared by the process.
  static registry& global();

 private:
  struct library;
  std::vector<std::unique_ptr<library>> libraries_;
  std::vector<component_ref> components_;
  std::vector<component_ref> plan_only_;
  std::vector<plugin_report> reports_;
  std::vector<std::string> searched_;
};

}  // namespace tycho::host
