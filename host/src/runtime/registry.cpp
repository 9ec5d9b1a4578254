#include "tycho/host/registry.hpp"

#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>

#include "tycho/host/log.hpp"

namespace fs = std::filesystem;

namespace tycho::host {

// Struct sizes as ABI 1.0 froze them (offset of the last 1.0 field plus its size): a plugin
// built against any 1.x minor has at least these, whatever a later minor appends.
constexpr std::size_t k_descriptor_size_1_0 =
    offsetof(tycho_plugin_descriptor, components) + sizeof(const tycho_component*);
constexpr std::size_t k_component_size_1_0 = offsetof(tycho_component, vtable) + sizeof(const void*);

struct registry::library {
  boost::dll::shared_library lib;
};

const char* kind_name(tycho_component_kind kind) {
  switch (kind) {
    case TYCHO_COMPONENT_SOURCE: return "source";
    case TYCHO_COMPONENT_ENGINE: return "engine";
    case TYCHO_COMPONENT_LOSS: return "loss";
    case TYCHO_COMPONENT_OPTIMIZER: return "optimizer";
    case TYCHO_COMPONENT_REDUCER: return "reducer";
    case TYCHO_COMPONENT_FORMAT: return "format";
    case TYCHO_COMPONENT_CONSTRAINT: return "constraint";
  }
  return "unknown";
}

namespace {
// The absolute path of the shared object (or executable) this function is compiled into.
fs::path this_module_path() {
  const auto here = reinterpret_cast<std::uintptr_t>(&this_module_path);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // "start-end perms offset dev inode   /absolute/path"
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    if (!(in >> range >> perms >> offset >> dev >> inode) || !std::getline(in >> std::ws, path)) continue;
    const auto dash = range.find('-');
    if (dash == std::string::npos) continue;
    const auto start = std::stoull(range.substr(0, dash), nullptr, 16);
    const auto end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (here >= start && here < end && !path.empty() && path[0] == '/') return path;
  }
  // No /proc (not Linux): dladdr's name, made absolute against the current folder.
  std::error_code ec;
  fs::path p = boost::dll::this_line_location().string();
  return p.is_absolute() ? p : fs::absolute(p, ec);
}
}  // namespace

registry::registry() = default;
registry::~registry() = default;

std::vector<std::string> registry::default_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("TYCHO_PLUGIN_PATH")) {
    std::string s(env);
    std::size_t start = 0;
    while (start <= s.size()) {
      std::size_t colon = s.find(':', start);
      if (colon == std::string::npos) colon = s.size();
      if (colon > start) {
        // Canonical, so one folder named two ways is scanned once.
        std::error_code ec;
        fs::path entry = s.substr(start, colon - start);
        fs::path canon = fs::canonical(entry, ec);
        std::string d = ec ? entry.string() : canon.string();
        if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
      }
      start = colon + 1;
    }
  }
  // The folder of the module that holds this code: libtycho.so's, or for the tycho command the
  // executable's (/proc/self/exe, whatever name it was invoked by). libtycho's path comes from
  // /proc/self/maps, which always holds the absolute path of the mapped file: dladdr gives the
  // name as passed to dlopen, which is relative for ctypes.CDLL("build/lib/libtycho.so").
  std::vector<fs::path> candidates;
  for (const fs::path& module : {this_module_path(), fs::path(boost::dll::program_location().string())}) {
    if (!module.is_absolute()) continue;
    const fs::path here = module.parent_path();
    candidates.push_back(here / "tycho" / "plugins");
    candidates.push_back(here / ".." / "lib" / "tycho" / "plugins");
  }
  if (const fs::path installed = TYCHO_INSTALL_PLUGIN_DIR; !installed.empty()) candidates.push_back(installed);
  // A missing folder stays in the list (lexically normalised) so `tycho plugins` and the log
  // line of global() name every place that was looked at.
  for (const fs::path& candidate : candidates) {
    std::error_code ec;
    std::string d = fs::is_directory(candidate, ec) ? fs::canonical(candidate, ec).string()
                                                     : candidate.lexically_normal().string();
    if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  }
  return dirs;
}

namespace {
// OpenMP threads that spin while they wait (libgomp's default, 300,000 spins before they sleep)
// hold a core the rest of the run needs: the host's reader of the next batch (target_residency =
// "disk"; it runs at idle priority so as not to slow the engine) and the engine's own serial
// steps. On the 2-core build machine a run from disk cost +25 % wall per iteration for it, and the
// same run in memory 6 % more CPU (bench/RESULTS.md, issue 30). Unless the user chose how their
// threads wait, they sleep (OMP_WAIT_POLICY = passive, the standard variable every runtime reads).
// Set before the first plugin, and with it the OpenMP runtime, is loaded; a runtime already
// loaded (a Python process that imported one) keeps its own setting.
void prefer_sleeping_openmp_threads() {
  for (const char* chosen : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"})
    if (std::getenv(chosen) != nullptr) return;
  setenv("OMP_WAIT_POLICY", "passive", 0);
}
}  // namespace

void registry::load_directories(const std::vector<std::string>& dirs) {
  prefer_sleeping_openmp_threads();
  for (const auto& dir : dirs) {
    std::error_code ec;
    searched_.push_back(dir);
    if (!fs::is_directory(dir, ec)) {
      log(TYCHO_LOG_DEBUG, "plugins", cat("plugin folder '", dir, "' does not exist; skipped"));
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      auto name = entry.path().filename().string();
      if (name.rfind("libtycho_plugin_", 0) == 0 && entry.path().extension() == ".so")
        files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());  // deterministic: first file wins a name clash
    for (const auto& f : files) load_file(f.string());
  }
}

bool registry::load_file(const std::string& path) {
  plugin_report report;
  report.path = path;
  auto refuse = [&](const std::string& why) {
    report.refusal = why;
    log(TYCHO_LOG_WARNING, "plugins", cat("refused plugin '", path, "': ", why));
    reports_.push_back(report);
    return false;
  };

  auto lib = std::make_unique<library>();
  try {
    lib->lib.load(path, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    return refuse(cat("cannot be loaded: ", e.what()));
  }
  if (!lib->lib.has(TYCHO_PLUGIN_ENTRY_SYMBOL))
    return refuse(cat("exports no '", TYCHO_PLUGIN_ENTRY_SYMBOL, "' function"));
  auto entry = lib->lib.get<const tycho_plugin_descriptor*()>(TYCHO_PLUGIN_ENTRY_SYMBOL);
  const tycho_plugin_descriptor* d = entry();
  if (d == nullptr) return refuse("its entry function returned no descriptor");

  // The first two fields are frozen across all ABI versions: read them before anything else.
  report.abi_version = d->abi_version;
  unsigned major = TYCHO_ABI_MAJOR_OF(d->abi_version), minor = TYCHO_ABI_MINOR_OF(d->abi_version);
  std::string versions = cat("built for tycho ABI ", major, ".", minor, ", this host has ABI ",
                             TYCHO_ABI_VERSION_MAJOR, ".", TYCHO_ABI_VERSION_MINOR);
  if (major != TYCHO_ABI_VERSION_MAJOR)
    return refuse(cat(versions, " (major versions differ: rebuild the plugin against tycho ",
                      TYCHO_ABI_VERSION_MAJOR, ".x)"));
  if (d->struct_size < k_descriptor_size_1_0)
    return refuse(cat("its descriptor is ", d->struct_size, " bytes, expected at least ",
                      k_descriptor_size_1_0));
  // ABI 1.1: the minor the plugin requires, and its DLPack header. A descriptor of 1.0 has
  // neither (its struct_size ends before them).
  auto has = [&](std::size_t offset, std::size_t size) { return d->struct_size >= offset + size; };
  const uint32_t required =
      has(offsetof(tycho_plugin_descriptor, abi_version_required), sizeof(uint32_t)) && d->abi_version_required != 0
          ? d->abi_version_required
          : d->abi_version;
  if (minor > TYCHO_ABI_VERSION_MINOR) {
    if (TYCHO_ABI_MAJOR_OF(required) != TYCHO_ABI_VERSION_MAJOR || TYCHO_ABI_MINOR_OF(required) > TYCHO_ABI_VERSION_MINOR)
      return refuse(cat(versions, " (the plugin is newer than the host and requires ABI ", TYCHO_ABI_MAJOR_OF(required),
                        ".", TYCHO_ABI_MINOR_OF(required), ": update tycho)"));
    log(TYCHO_LOG_DEBUG, "plugins",
        cat("'", path, "': ", versions, "; it requires ABI ", TYCHO_ABI_MAJOR_OF(required), ".",
            TYCHO_ABI_MINOR_OF(required), ", so it is loaded and only the fields of ABI ", TYCHO_ABI_VERSION_MAJOR, ".",
            TYCHO_ABI_VERSION_MINOR, " are read"));
  }
  if (has(offsetof(tycho_plugin_descriptor, dlpack_version), sizeof(uint32_t)) && d->dlpack_version != 0 &&
      (d->dlpack_version < TYCHO_DLPACK_VERSION_MIN || d->dlpack_version >= TYCHO_DLPACK_VERSION_END))
    return refuse(cat("built with dlpack.h version ", d->dlpack_version, ", this host accepts ",
                      TYCHO_DLPACK_VERSION_MIN, " (0.6) up to but not including ", TYCHO_DLPACK_VERSION_END,
                      " (another DLTensor layout): rebuild the plugin against DLPack 0.6 to 1.x"));
  report.name = d->name ? d->name : "";
  report.version = d->version ? d->version : "";
  if (d->init != nullptr) {
    tycho_status s = d->init(host_api());
    if (s != TYCHO_OK) {
      const std::string why = last_error();
      return refuse(cat("its init function failed with status ", int(s), why.empty() ? "" : ": ", why));
    }
  }

  std::vector<component_ref> added;
  // The plugin's component structs may be smaller (older minor) than the host's: step through
  // the array by the plugin's own struct size, as Vulkan's loader does with its chains.
  const std::size_t stride = d->n_components > 0 ? d->components[0].struct_size : 0;
  for (int64_t i = 0; i < d->n_components; ++i) {
    const tycho_component& c = *reinterpret_cast<const tycho_component*>(
        reinterpret_cast<const char*>(d->components) + std::size_t(i) * stride);
    std::string cname = c.name ? c.name : "";
    if (c.struct_size < k_component_size_1_0 || c.struct_size != stride ||
        TYCHO_ABI_MAJOR_OF(c.abi_version) != TYCHO_ABI_VERSION_MAJOR)
      return refuse(cat("component '", cname, "' has an incompatible descriptor"));
    if (c.vtable == nullptr) return refuse(cat("component '", cname, "' has no vtable"));
    // Every vtable starts with struct_size and abi_version.
    auto* head = static_cast<const uint32_t*>(c.vtable);
    if (TYCHO_ABI_MAJOR_OF(head[1]) != TYCHO_ABI_VERSION_MAJOR)
      return refuse(cat("component '", cname, "' has a vtable of ABI ", TYCHO_ABI_MAJOR_OF(head[1]),
                        ".", TYCHO_ABI_MINOR_OF(head[1])));
    component_ref ref;
    ref.kind = c.kind;
    ref.name = cname;
    ref.version = c.version ? c.version : "";
    ref.description = c.description ? c.description : "";
    ref.plugin_path = path;
    ref.devices = c.devices;
    for (const char* const* k = c.config_keys; k && *k; ++k) ref.config_keys.emplace_back(*k);
    ref.vtable = c.vtable;
    if (c.struct_size >= offsetof(tycho_component, flags) + sizeof(c.flags)) ref.flags = c.flags;
    if (c.struct_size >= offsetof(tycho_component, settings) + sizeof(c.settings)) {
      try {
        ref.settings = read_settings(c.settings, cat(kind_name(ref.kind), " '", cname, "'"));
      } catch (const error& e) {
        return refuse(e.what());
      }
      for (const auto& decl : ref.settings)
        if (std::find(ref.config_keys.begin(), ref.config_keys.end(), decl.key) == ref.config_keys.end())
          ref.config_keys.push_back(decl.key);
    }
    if (ref.flags & TYCHO_COMPONENT_PLAN_ONLY) {
      report.components.push_back(cat(kind_name(ref.kind), " ", ref.name, " ", ref.version, " (plan only)"));
      plan_only_.push_back(std::move(ref));
      continue;
    }
    bool clash = false;
    for (const auto& existing : components_)
      if (existing.kind == ref.kind && existing.name == ref.name) {
        log(TYCHO_LOG_WARNING, "plugins",
            cat(kind_name(ref.kind), " '", ref.name, "' from '", path, "' ignored: '",
                existing.plugin_path, "' already provides it"));
        clash = true;
      }
    if (clash) continue;
    report.components.push_back(cat(kind_name(ref.kind), " ", ref.name, " ", ref.version));
    added.push_back(std::move(ref));
  }
  components_.insert(components_.end(), added.begin(), added.end());
  report.loaded = true;
  reports_.push_back(report);
  libraries_.push_back(std::move(lib));
  return true;
}

const component_ref& registry::find(tycho_component_kind kind, const std::string& name) const {
  for (const auto& c : components_)
    if (c.kind == kind && c.name == name) return c;
  auto known = names(kind);
  std::string msg = cat("unknown ", kind_name(kind), " '", name, "'");
  std::string near = nearest_name(name, known);
  if (!near.empty()) msg += cat("; did you mean '", near, "'?");
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  std::string folders;
  for (const auto& d : searched_) folders += (folders.empty() ? "'" : ", '") + d + "'";
  msg += known.empty() ? cat(" (no ", kind_name(kind), " plugins were found in the folders searched: ",
                             folders.empty() ? std::string("none") : folders,
                             "; set TYCHO_PLUGIN_PATH to the folder of libtycho_plugin_*.so, see `tycho plugins`)")
                       : cat(" (available: ", list, ")");
  fail(TYCHO_ERR_NOT_FOUND, msg);
}

const component_ref* registry::find_description(tycho_component_kind kind, const std::string& name) const {
  for (const auto* list : {&components_, &plan_only_})
    for (const auto& c : *list)
      if (c.kind == kind && c.name == name) return &c;
  return nullptr;
}

std::vector<std::string> registry::names(tycho_component_kind kind) const {
  std::vector<std::string> out;
  for (const auto& c : components_)
    if (c.kind == kind) out.push_back(c.name);
  return out;
}

registry& registry::global() {
  static registry* r = [] {
    auto* reg = new registry();  // never destroyed: plugins stay loaded until exit
    const auto dirs = default_search_dirs();
    reg->load_directories(dirs);
    // One line naming every folder searched and what it gave, for "unknown engine" puzzles.
    std::string line;
    for (const auto& d : dirs) {
      std::size_t n = 0;
      for (const auto& rep : reg->reports())
        if (rep.loaded && fs::path(rep.path).parent_path() == fs::path(d)) ++n;
      std::error_code ec;
      line += cat(line.empty() ? "" : ", ", "'", d, "' (",
                  fs::is_directory(d, ec) ? cat(n, n == 1 ? " plugin" : " plugins") : std::string("does not exist"), ")");
    }
    log(TYCHO_LOG_INFO, "plugins", cat("plugin folders searched: ", line.empty() ? std::string("none") : line));
    return reg;
  }();
  return *r;
}

}  // namespace tycho::host
