// The plugin ABI as the host sees it: every built-in plugin loaded through the registry with
// vtables of this ABI, refusals of plugins built for another ABI (test-only plugins in
// <build>/test-plugins, see tests/test_plugins.cmake), `tycho plugins` listing them, and the
// layout of the ABI structs pinned so that an accidental reorder fails the build.
#include <gtest/gtest.h>

#include <tycho/core/error.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/tycho.h>
#include <tycho/tycho_plugin.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "run_command.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;

namespace {

std::string test_plugin_dir() { return TYCHO_TEST_PLUGIN_DIR; }
// "1.1": this host's ABI, as the messages write it.
std::string host_abi() {
  return std::to_string(TYCHO_ABI_VERSION_MAJOR) + "." + std::to_string(TYCHO_ABI_VERSION_MINOR);
}
std::string test_plugin(const std::string& stem) {
  return test_plugin_dir() + "/libtycho_plugin_" + stem + ".so";
}

// ---------------------------------------------------------------- layout (compile time)

// The two frozen fields every descriptor and vtable starts with.
#define TYCHO_EXPECT_HEAD(T)                                                            \
  static_assert(offsetof(T, struct_size) == 0, #T ": struct_size must be first");      \
  static_assert(offsetof(T, abi_version) == 4, #T ": abi_version must be second");     \
  static_assert(std::is_same_v<decltype(T::struct_size), uint32_t>, #T ": struct_size"); \
  static_assert(std::is_same_v<decltype(T::abi_version), uint32_t>, #T ": abi_version")

TYCHO_EXPECT_HEAD(tycho_plugin_descriptor);
TYCHO_EXPECT_HEAD(tycho_component);
TYCHO_EXPECT_HEAD(tycho_host_api);
TYCHO_EXPECT_HEAD(tycho_source_vtable);
TYCHO_EXPECT_HEAD(tycho_loss_vtable);
TYCHO_EXPECT_HEAD(tycho_engine_vtable);
TYCHO_EXPECT_HEAD(tycho_optimizer_vtable);
TYCHO_EXPECT_HEAD(tycho_reducer_vtable);
TYCHO_EXPECT_HEAD(tycho_format_vtable);
#undef TYCHO_EXPECT_HEAD

// Structs passed by pointer that carry their size first.
static_assert(offsetof(tycho_dataset_info, struct_size) == 0);
static_assert(offsetof(tycho_engine_setup, struct_size) == 0);
static_assert(offsetof(tycho_step_info, struct_size) == 0);
static_assert(offsetof(tycho_record, struct_size) == 0);
static_assert(offsetof(tycho_progress, struct_size) == 0);
static_assert(offsetof(tycho_session_options, struct_size) == 0);
static_assert(offsetof(tycho_session_options, base_dir) == 8);
static_assert(offsetof(tycho_session_options, overrides) == 16);
static_assert(offsetof(tycho_session_options, n_overrides) == 24);
static_assert(offsetof(tycho_session_options, communicator) == 32);
static_assert(sizeof(tycho_session_options) == 40);

static_assert(TYCHO_ABI_VERSION == ((TYCHO_ABI_VERSION_MAJOR << 16) | TYCHO_ABI_VERSION_MINOR));
static_assert(TYCHO_ABI_MAJOR_OF((2u << 16) | 7u) == 2 && TYCHO_ABI_MINOR_OF((2u << 16) | 7u) == 7);

// ABI 1.1 on LP64 (Linux x86-64 / aarch64): the whole layout of the structs a plugin and the
// host exchange. Appending is allowed within a major version (then update the sizes here and
// bump the minor); moving a field is not.
#if UINTPTR_MAX == 0xffffffffffffffffu
static_assert(offsetof(tycho_plugin_descriptor, name) == 8);
static_assert(offsetof(tycho_plugin_descriptor, version) == 16);
static_assert(offsetof(tycho_plugin_descriptor, init) == 24);
static_assert(offsetof(tycho_plugin_descriptor, n_components) == 32);
static_assert(offsetof(tycho_plugin_descriptor, components) == 40);
static_assert(offsetof(tycho_plugin_descriptor, abi_version_required) == 48);  // 1.1
static_assert(offsetof(tycho_plugin_descriptor, dlpack_version) == 52);        // 1.1
static_assert(sizeof(tycho_plugin_descriptor) == 56);

static_assert(offsetof(tycho_component, kind) == 8);
static_assert(offsetof(tycho_component, name) == 16);
static_assert(offsetof(tycho_component, version) == 24);
static_assert(offsetof(tycho_component, description) == 32);
static_assert(offsetof(tycho_component, devices) == 40);
static_assert(offsetof(tycho_component, config_keys) == 48);
static_assert(offsetof(tycho_component, vtable) == 56);
static_assert(offsetof(tycho_component, flags) == 64);     // 1.1
static_assert(offsetof(tycho_component, settings) == 72);  // 1.1
static_assert(sizeof(tycho_component) == 80);

static_assert(offsetof(tycho_host_api, log) == 8);
static_assert(offsetof(tycho_host_api, set_error) == 16);
static_assert(offsetof(tycho_host_api, config_get_string) == 24);
static_assert(offsetof(tycho_host_api, config_get_double) == 32);
static_assert(offsetof(tycho_host_api, config_get_int) == 40);
static_assert(offsetof(tycho_host_api, config_get_bool) == 48);
static_assert(offsetof(tycho_host_api, config_base_dir) == 56);
static_assert(offsetof(tycho_host_api, alloc) == 64);
static_assert(offsetof(tycho_host_api, free) == 72);
static_assert(offsetof(tycho_host_api, last_error) == 80);
static_assert(offsetof(tycho_host_api, config_table_name) == 88);
static_assert(sizeof(tycho_host_api) == 96);

static_assert(offsetof(tycho_source_vtable, open) == 8);
static_assert(offsetof(tycho_source_vtable, info) == 16);
static_assert(offsetof(tycho_source_vtable, read) == 24);
static_assert(offsetof(tycho_source_vtable, close) == 32);
static_assert(offsetof(tycho_source_vtable, read_positions) == 40);  // appended
static_assert(offsetof(tycho_source_vtable, read_detector_mask) == 48);  // appended in 1.3
static_assert(sizeof(tycho_source_vtable) == 56);

static_assert(offsetof(tycho_loss_vtable, create) == 8);
static_assert(offsetof(tycho_loss_vtable, evaluate) == 16);
static_assert(offsetof(tycho_loss_vtable, destroy) == 24);
static_assert(offsetof(tycho_loss_vtable, evaluate_far_field) == 32);  // appended in 1.3
static_assert(sizeof(tycho_loss_vtable) == 40);

static_assert(offsetof(tycho_engine_vtable, create) == 8);
static_assert(offsetof(tycho_engine_vtable, compute_batch) == 16);
static_assert(offsetof(tycho_engine_vtable, get_tensor) == 24);
static_assert(offsetof(tycho_engine_vtable, destroy) == 32);
static_assert(offsetof(tycho_engine_vtable, read_tensor) == 40);
static_assert(offsetof(tycho_engine_vtable, stream) == 48);
static_assert(offsetof(tycho_engine_vtable, collect_loss) == 56);
static_assert(offsetof(tycho_engine_vtable, plan_memory) == 64);  // 1.1
static_assert(offsetof(tycho_engine_vtable, finish_batch) == 72);  // appended in 1.3
static_assert(offsetof(tycho_engine_vtable, set_gradient_region) == 80);  // appended in 1.3
static_assert(offsetof(tycho_engine_vtable, set_position_gradient) == 88);  // appended in 1.3
static_assert(offsetof(tycho_engine_vtable, position_information) == 96);  // appended in 1.4
static_assert(sizeof(tycho_engine_vtable) == 104);

static_assert(offsetof(tycho_optimizer_vtable, create) == 8);
static_assert(offsetof(tycho_optimizer_vtable, step) == 16);
static_assert(offsetof(tycho_optimizer_vtable, destroy) == 24);
static_assert(offsetof(tycho_optimizer_vtable, state_count) == 32);
static_assert(offsetof(tycho_optimizer_vtable, state_array) == 40);
static_assert(offsetof(tycho_optimizer_vtable, set_state) == 48);
static_assert(offsetof(tycho_optimizer_vtable, step_count) == 56);
static_assert(offsetof(tycho_optimizer_vtable, state_arrays) == 64);  // 1.1
static_assert(offsetof(tycho_optimizer_vtable, flags) == 72);  // appended in 1.3
static_assert(sizeof(tycho_optimizer_vtable) == 80);

static_assert(offsetof(tycho_reducer_vtable, create) == 8);
static_assert(offsetof(tycho_reducer_vtable, rank) == 16);
static_assert(offsetof(tycho_reducer_vtable, world_size) == 24);
static_assert(offsetof(tycho_reducer_vtable, allreduce_sum) == 32);
static_assert(offsetof(tycho_reducer_vtable, broadcast) == 40);
static_assert(offsetof(tycho_reducer_vtable, barrier) == 48);
static_assert(offsetof(tycho_reducer_vtable, abort) == 56);
static_assert(offsetof(tycho_reducer_vtable, destroy) == 64);
static_assert(offsetof(tycho_reducer_vtable, shutdown) == 72);
static_assert(sizeof(tycho_reducer_vtable) == 80);
static_assert(offsetof(tycho_reducer_setup, struct_size) == 0);
static_assert(offsetof(tycho_reducer_setup, config) == 8);
static_assert(offsetof(tycho_reducer_setup, rank) == 16);
static_assert(offsetof(tycho_reducer_setup, world_size) == 20);
static_assert(offsetof(tycho_reducer_setup, local_rank) == 24);
static_assert(offsetof(tycho_reducer_setup, device) == 28);
static_assert(offsetof(tycho_reducer_setup, bootstrap) == 40);
static_assert(offsetof(tycho_reducer_setup, communicator) == 56);
static_assert(offsetof(tycho_reducer_setup, bootstrap_ref) == 64);  // 1.1
static_assert(sizeof(tycho_reducer_setup) == 72);
static_assert(sizeof(tycho_bootstrap) == 16);

static_assert(offsetof(tycho_format_vtable, extension) == 8);
static_assert(offsetof(tycho_format_vtable, save) == 16);
static_assert(offsetof(tycho_format_vtable, load) == 24);
static_assert(offsetof(tycho_format_vtable, flags) == 32);  // appended in 1.3
static_assert(sizeof(tycho_format_vtable) == 40);

static_assert(offsetof(tycho_named_array, name) == 0);
static_assert(offsetof(tycho_named_array, tensor) == 8);
static_assert(offsetof(tycho_record, n_arrays) == 8);
static_assert(offsetof(tycho_record, arrays) == 16);
static_assert(offsetof(tycho_record, manifest_json) == 24);
static_assert(offsetof(tycho_record, release) == 32);
static_assert(offsetof(tycho_record, producers) == 40);  // appended in 1.3
static_assert(offsetof(tycho_record, manifest) == 48);
static_assert(offsetof(tycho_record, manifest_context) == 56);
static_assert(sizeof(tycho_record) == 64);
static_assert(sizeof(tycho_array_producer) == 16);

static_assert(offsetof(tycho_step_info, grad_scale) == 8);
static_assert(offsetof(tycho_step_info, learning_rate_scale) == 16);
static_assert(offsetof(tycho_step_info, iteration) == 24);
static_assert(offsetof(tycho_step_info, n_boxes) == 32);  // appended in 1.3
static_assert(offsetof(tycho_step_info, boxes) == 40);
static_assert(offsetof(tycho_step_info, box_steps) == 48);
static_assert(sizeof(tycho_step_info) == 56);

static_assert(offsetof(tycho_loss_binding, vtable) == 0);
static_assert(offsetof(tycho_loss_binding, instance) == 8);
#endif

// The same at run time, so the numbers appear in the test report.
TEST(PluginAbi, LayoutIsStable) {
  EXPECT_EQ(offsetof(tycho_plugin_descriptor, struct_size), 0u);
  EXPECT_EQ(offsetof(tycho_plugin_descriptor, abi_version), 4u);
  EXPECT_EQ(offsetof(tycho_component, struct_size), 0u);
  EXPECT_EQ(offsetof(tycho_component, abi_version), 4u);
  EXPECT_EQ(offsetof(tycho_component, kind), 8u);
  EXPECT_EQ(sizeof(tycho_component_kind), 4u);
  EXPECT_EQ(int(TYCHO_COMPONENT_SOURCE), 1);
  EXPECT_EQ(int(TYCHO_COMPONENT_ENGINE), 2);
  EXPECT_EQ(int(TYCHO_COMPONENT_LOSS), 3);
  EXPECT_EQ(int(TYCHO_COMPONENT_OPTIMIZER), 4);
  EXPECT_EQ(int(TYCHO_COMPONENT_REDUCER), 5);
  EXPECT_EQ(int(TYCHO_COMPONENT_FORMAT), 6);
  EXPECT_EQ(int(TYCHO_COMPONENT_CONSTRAINT), 7);  // appended in ABI 1.3
  EXPECT_EQ(int(TYCHO_ERR_ABI_MISMATCH), 5);
  EXPECT_EQ(int(TYCHO_ERR_NOT_FOUND), 2);
  EXPECT_EQ(std::string(TYCHO_PLUGIN_ENTRY_SYMBOL), "tycho_plugin_entry");
  EXPECT_EQ(TYCHO_ABI_VERSION, (1u << 16) | 5u);
  // ABI 1.2 appended to the engine setup after loss_ref, and one tensor id.
  EXPECT_GT(offsetof(tycho_engine_setup, slice_propagator), offsetof(tycho_engine_setup, loss_ref));
  EXPECT_GT(offsetof(tycho_engine_setup, position_gradient), offsetof(tycho_engine_setup, slice_thickness_A));
  EXPECT_EQ(int(TYCHO_TENSOR_POSITIONS), 4);
  EXPECT_EQ(int(TYCHO_TENSOR_POSITIONS_GRAD), 5);
  EXPECT_EQ(int(TYCHO_TENSOR_FIXED_POINT_SUMS), 6);  // appended in ABI 1.3
  EXPECT_EQ(TYCHO_FINISH_ENDS_ITERATION, 1u);
#if UINTPTR_MAX == 0xffffffffffffffffu
  EXPECT_EQ(offsetof(tycho_engine_setup, slice_propagator), 104u);
  EXPECT_EQ(offsetof(tycho_engine_setup, position_gradient), 120u);
  // ABI 1.3 appended target_reader (targets per mini-batch).
  EXPECT_EQ(offsetof(tycho_engine_setup, target_reader), 128u);
  // ... and host_finishes_batches (deterministic sums).
  EXPECT_EQ(offsetof(tycho_engine_setup, host_finishes_batches), 136u);
  EXPECT_EQ(offsetof(tycho_engine_setup, scan_positions_px), 144u);
  EXPECT_EQ(offsetof(tycho_engine_setup, scan_first), 152u);
  EXPECT_EQ(sizeof(tycho_engine_setup), 160u);
  EXPECT_EQ(sizeof(tycho_plugin_descriptor), 56u);
  EXPECT_EQ(sizeof(tycho_component), 80u);
  EXPECT_EQ(sizeof(tycho_host_api), 96u);
  EXPECT_EQ(offsetof(tycho_component, vtable), 56u);
  EXPECT_EQ(offsetof(tycho_plugin_descriptor, components), 40u);
  // ABI 1.3: the constraint kind's structs.
  EXPECT_EQ(offsetof(tycho_constraint_setup, config), 8u);
  EXPECT_EQ(offsetof(tycho_constraint_setup, device), 16u);
  EXPECT_EQ(offsetof(tycho_constraint_setup, pixel_A), 24u);
  EXPECT_EQ(offsetof(tycho_constraint_setup, measured_power), 64u);
  EXPECT_EQ(offsetof(tycho_constraint_setup, nominal_positions), 72u);
  EXPECT_EQ(sizeof(tycho_constraint_setup), 88u);
  EXPECT_EQ(offsetof(tycho_constraint_state, object), 8u);
  EXPECT_EQ(offsetof(tycho_constraint_state, positions), 24u);
  EXPECT_EQ(offsetof(tycho_constraint_state, stream), 56u);
  EXPECT_EQ(offsetof(tycho_constraint_state, n_object_boxes), 64u);  // appended in 1.3
  EXPECT_EQ(offsetof(tycho_constraint_state, object_boxes), 72u);
  EXPECT_EQ(offsetof(tycho_constraint_state, object_rate_factor), 80u);  // appended in 1.5
  EXPECT_EQ(offsetof(tycho_constraint_state, probe_rate_factor), 88u);
  EXPECT_EQ(sizeof(tycho_constraint_state), 96u);
  EXPECT_EQ(offsetof(tycho_constraint_vtable, create), 8u);
  EXPECT_EQ(offsetof(tycho_constraint_vtable, destroy), 32u);
  EXPECT_EQ(sizeof(tycho_constraint_vtable), 40u);
  // ABI 1.3 appended reads_stored_dtype to the data set's info (sources deliver their stored dtype).
  EXPECT_EQ(offsetof(tycho_dataset_info, description), 112u);
  EXPECT_EQ(offsetof(tycho_dataset_info, reads_stored_dtype), 120u);
  // ... and, still before 0.1.0's release, the far-field geometry and the radiation: from byte
  // 128 on, past the tail padding of the struct as it was, so struct_size tells them apart.
  EXPECT_EQ(offsetof(tycho_dataset_info, detector_distance_m), 128u);
  EXPECT_EQ(offsetof(tycho_dataset_info, detector_pixel_m), 136u);
  EXPECT_EQ(offsetof(tycho_dataset_info, radiation), 152u);
  EXPECT_EQ(sizeof(tycho_dataset_info), 160u);
#endif
  // The vtables and the host table: struct_size then abi_version.
  EXPECT_EQ(offsetof(tycho_source_vtable, abi_version), 4u);
  EXPECT_EQ(offsetof(tycho_loss_vtable, abi_version), 4u);
  EXPECT_EQ(offsetof(tycho_engine_vtable, abi_version), 4u);
  EXPECT_EQ(offsetof(tycho_optimizer_vtable, abi_version), 4u);
  EXPECT_EQ(offsetof(tycho_reducer_vtable, abi_version), 4u);
  EXPECT_EQ(offsetof(tycho_format_vtable, abi_version), 4u);
  EXPECT_EQ(offsetof(tycho_constraint_vtable, abi_version), 4u);
  EXPECT_EQ(offsetof(tycho_host_api, abi_version), 4u);
}

// ---------------------------------------------------------------- built-in plugins

uint32_t expected_vtable_size(tycho_component_kind kind) {
  switch (kind) {
    case TYCHO_COMPONENT_SOURCE: return sizeof(tycho_source_vtable);
    case TYCHO_COMPONENT_ENGINE: return sizeof(tycho_engine_vtable);
    case TYCHO_COMPONENT_LOSS: return sizeof(tycho_loss_vtable);
    case TYCHO_COMPONENT_OPTIMIZER: return sizeof(tycho_optimizer_vtable);
    case TYCHO_COMPONENT_REDUCER: return sizeof(tycho_reducer_vtable);
    case TYCHO_COMPONENT_FORMAT: return sizeof(tycho_format_vtable);
    case TYCHO_COMPONENT_CONSTRAINT: return sizeof(tycho_constraint_vtable);
  }
  return 0;
}

TEST(PluginAbi, LoadsEveryBuiltInPluginThroughHost) {
  tycho::host::registry reg;
  reg.load_directories({tycho::test::plugin_dir()});

  ASSERT_FALSE(reg.reports().empty()) << "no plugin in " << tycho::test::plugin_dir();
  for (const auto& r : reg.reports()) {
    EXPECT_TRUE(r.loaded) << r.path << " refused: " << r.refusal;
    EXPECT_EQ(r.abi_version, uint32_t(TYCHO_ABI_VERSION)) << r.path;
    EXPECT_FALSE(r.name.empty()) << r.path;
    EXPECT_FALSE(r.version.empty()) << r.path;
    EXPECT_FALSE(r.components.empty()) << r.path;
    EXPECT_EQ(fs::path(r.path).parent_path(), fs::path(tycho::test::plugin_dir())) << r.path;
  }

  const std::set<std::pair<tycho_component_kind, std::string>> expected = {
      {TYCHO_COMPONENT_SOURCE, "emd"},        {TYCHO_COMPONENT_ENGINE, "cpu"},
      {TYCHO_COMPONENT_LOSS, "amplitude"},    {TYCHO_COMPONENT_OPTIMIZER, "adam"},
      {TYCHO_COMPONENT_OPTIMIZER, "sgd"},     {TYCHO_COMPONENT_FORMAT, "zip"}};
  for (const auto& [kind, name] : expected) {
    const tycho::host::component_ref* c = nullptr;
    try {
      c = &reg.find(kind, name);
    } catch (const tycho::error& e) {
      ADD_FAILURE() << tycho::host::kind_name(kind) << " '" << name << "' not found: " << e.what();
      continue;
    }
    EXPECT_EQ(c->kind, kind);
    EXPECT_EQ(c->name, name);
    EXPECT_FALSE(c->version.empty()) << name;
    EXPECT_FALSE(c->description.empty()) << name;
    EXPECT_NE(c->devices & TYCHO_DEVICE_BIT(kDLCPU), 0u) << name;
    EXPECT_EQ(fs::path(c->plugin_path).parent_path(), fs::path(tycho::test::plugin_dir())) << name;
  }

  // Every component: its vtable starts with this header's size and ABI version.
  for (const auto& c : reg.components()) {
    SCOPED_TRACE(std::string(tycho::host::kind_name(c.kind)) + " " + c.name + " from " +
                 c.plugin_path);
    ASSERT_NE(c.vtable, nullptr);
    const auto* head = static_cast<const uint32_t*>(c.vtable);
    EXPECT_EQ(head[0], expected_vtable_size(c.kind));
    EXPECT_EQ(head[1], uint32_t(TYCHO_ABI_VERSION));
    // No name clash among built-ins (a clash is logged and the second one dropped).
    int same = 0;
    for (const auto& other : reg.components()) same += other.kind == c.kind && other.name == c.name;
    EXPECT_EQ(same, 1);
  }
  // The format vtable carries its extension right after the header.
  EXPECT_STREQ(reg.find(TYCHO_COMPONENT_FORMAT, "zip").as<tycho_format_vtable>()->extension, ".zip");

  // The test binary reaches plugins only through the host: it links none of them.
  auto ldd = tycho::test::run_command({"ldd", tycho::test::binary_dir() + "/bin/tycho_tests"});
  if (ldd.exited_with(0)) {
    EXPECT_EQ(ldd.out.find("libtycho_plugin_"), std::string::npos) << ldd.out;
  }
  for (const char* exe : {"/bin/tycho", "/lib/libtycho.so"}) {
    auto r = tycho::test::run_command({"ldd", tycho::test::binary_dir() + exe});
    if (r.exited_with(0)) EXPECT_EQ(r.out.find("libtycho_plugin_"), std::string::npos) << exe << "\n" << r.out;
  }
}

// ---------------------------------------------------------------- refusals

const tycho::host::plugin_report* report_for(const tycho::host::registry& reg,
                                              const std::string& path) {
  for (const auto& r : reg.reports())
    if (r.path == path) return &r;
  return nullptr;
}

TEST(PluginAbi, RefusesOtherMajorVersion) {
  const std::string path = test_plugin("abi_major2");
  ASSERT_TRUE(fs::exists(path)) << path << " not built (tests/test_plugins.cmake)";
  tycho::host::registry reg;
  EXPECT_FALSE(reg.load_file(path));
  const auto* r = report_for(reg, path);
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->loaded);
  EXPECT_EQ(r->path, path);
  EXPECT_EQ(r->abi_version, (2u << 16) | 0u);
  EXPECT_NE(r->refusal.find("built for tycho ABI 2.0, this host has ABI " + host_abi()), std::string::npos)
      << r->refusal;
  EXPECT_NE(r->refusal.find("major versions differ"), std::string::npos) << r->refusal;
  EXPECT_TRUE(r->components.empty());
  EXPECT_TRUE(reg.components().empty());  // nothing of a refused plugin is registered
  try {
    reg.find(TYCHO_COMPONENT_ENGINE, "abi2_engine");
    ADD_FAILURE() << "a refused plugin's engine was found";
  } catch (const tycho::error& e) {
    EXPECT_EQ(e.status, TYCHO_ERR_NOT_FOUND) << e.what();
  }
}

TEST(PluginAbi, RefusesNewerMinorVersion) {
  const std::string path = test_plugin("abi_newer_minor");
  ASSERT_TRUE(fs::exists(path)) << path << " not built (tests/test_plugins.cmake)";
  tycho::host::registry reg;
  EXPECT_FALSE(reg.load_file(path));
  const auto* r = report_for(reg, path);
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->loaded);
  EXPECT_EQ(r->abi_version, (1u << 16) | 99u);
  EXPECT_NE(r->refusal.find("built for tycho ABI 1.99, this host has ABI " + host_abi()), std::string::npos)
      << r->refusal;
  EXPECT_NE(r->refusal.find("newer than the host"), std::string::npos) << r->refusal;
  EXPECT_TRUE(reg.components().empty());
}

// Version negotiation: a plugin built against a newer minor (1.99) that requires only what this
// host has (abi_version_required = 1.1) is loaded, its engine registered.
TEST(PluginAbi, AcceptsNewerMinorThatRequiresNoMoreThanTheHost) {
  const std::string path = test_plugin("abi_newer_minor_ok");
  ASSERT_TRUE(fs::exists(path)) << path << " not built (tests/test_plugins.cmake)";
  tycho::host::registry reg;
  EXPECT_TRUE(reg.load_file(path));
  const auto* r = report_for(reg, path);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->loaded) << r->refusal;
  EXPECT_EQ(r->abi_version, (1u << 16) | 99u);
  EXPECT_NO_THROW(reg.find(TYCHO_COMPONENT_ENGINE, "abi_minor99_ok_engine"));
}

TEST(PluginAbi, NewerMinorRefusalNamesTheRequiredMinor) {
  tycho::host::registry reg;
  EXPECT_FALSE(reg.load_file(test_plugin("abi_newer_minor")));
  ASSERT_EQ(reg.reports().size(), 1u);
  EXPECT_NE(reg.reports()[0].refusal.find("the plugin is newer than the host and requires ABI 1.99: update tycho"),
            std::string::npos)
      << reg.reports()[0].refusal;
}

// The DLPack header a plugin was built with is checked at load: 0.5 (50) is refused.
TEST(PluginAbi, RefusesAnotherDlpackLayout) {
  const std::string path = test_plugin("abi_old_dlpack");
  ASSERT_TRUE(fs::exists(path)) << path << " not built (tests/test_plugins.cmake)";
  tycho::host::registry reg;
  EXPECT_FALSE(reg.load_file(path));
  const auto* r = report_for(reg, path);
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->refusal.find("built with dlpack.h version 50, this host accepts 60 (0.6) up to but not including 200"),
            std::string::npos)
      << r->refusal;
  EXPECT_TRUE(reg.components().empty());
  // The built-in plugins record the header they were built with.
  static_assert(TYCHO_DLPACK_VERSION >= 60);
}

TEST(PluginAbi, RefusesLibraryWithoutEntrySymbol) {
  const std::string path = test_plugin("no_entry");
  ASSERT_TRUE(fs::exists(path)) << path << " not built (tests/test_plugins.cmake)";
  tycho::host::registry reg;
  EXPECT_FALSE(reg.load_file(path));
  const auto* r = report_for(reg, path);
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->loaded);
  EXPECT_NE(r->refusal.find("tycho_plugin_entry"), std::string::npos) << r->refusal;
  EXPECT_TRUE(reg.components().empty());
}

TEST(PluginAbi, RefusesFileThatIsNotALibrary) {
  tycho::test::temp_folder tmp;
  const std::string path = tmp.write("libtycho_plugin_text.so", "not an ELF file\n");
  tycho::host::registry reg;
  EXPECT_FALSE(reg.load_file(path));
  const auto* r = report_for(reg, path);
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->loaded);
  EXPECT_NE(r->refusal.find("cannot be loaded"), std::string::npos) << r->refusal;
}

// Refused files in a scanned folder are reported; the good ones beside them still load.
TEST(PluginAbi, RefusalsDoNotStopTheOthers) {
  tycho::host::registry reg;
  reg.load_directories({test_plugin_dir(), tycho::test::plugin_dir()});
  std::map<std::string, const tycho::host::plugin_report*> by_file;
  for (const auto& r : reg.reports()) by_file[fs::path(r.path).filename().string()] = &r;
  for (const char* refused : {"libtycho_plugin_abi_major2.so", "libtycho_plugin_abi_newer_minor.so",
                              "libtycho_plugin_no_entry.so"}) {
    ASSERT_TRUE(by_file.count(refused)) << refused;
    EXPECT_FALSE(by_file[refused]->loaded) << refused;
  }
  for (const char* good : {"libtycho_plugin_emd.so", "libtycho_plugin_cpu.so", "libtycho_plugin_zip.so"}) {
    ASSERT_TRUE(by_file.count(good)) << good;
    EXPECT_TRUE(by_file[good]->loaded) << good << ": " << by_file[good]->refusal;
  }
  EXPECT_NO_THROW(reg.find(TYCHO_COMPONENT_ENGINE, "cpu"));
  EXPECT_THROW(reg.find(TYCHO_COMPONENT_ENGINE, "abi2_engine"), tycho::error);
  EXPECT_THROW(reg.find(TYCHO_COMPONENT_ENGINE, "abi_minor99_engine"), tycho::error);
}

// ---------------------------------------------------------------- the CLI

TEST(PluginAbi, CliListsRefusals) {
  auto r = tycho::test::run_command({tycho::test::tycho_exe(), "plugins"},
                                    {"TYCHO_PLUGIN_PATH=" + test_plugin_dir()});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  // The header, the folders searched (the test folder first), the built-ins and their components.
  EXPECT_NE(r.out.find("(ABI " + host_abi() + ")"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  " + test_plugin_dir() + "\n"), std::string::npos) << r.out;
  for (const char* line : {"source     emd", "engine     cpu", "loss       amplitude",
                           "optimizer  adam", "optimizer  sgd", "format     zip"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  for (const char* plugin : {"libtycho_plugin_emd.so", "libtycho_plugin_cpu.so",
                             "libtycho_plugin_losses.so", "libtycho_plugin_optimizers.so",
                             "libtycho_plugin_zip.so"})
    EXPECT_NE(r.out.find("from " + (fs::canonical(tycho::test::plugin_dir()) / plugin).string()),
              std::string::npos)
        << plugin << "\n" << r.out;

  // One REFUSED line for the major-2 plugin naming its file and both versions.
  const std::string major2 = test_plugin("abi_major2");
  int refused_major2 = 0;
  for (const auto& line : r.out_lines()) {
    if (line.rfind("REFUSED ", 0) != 0 || line.find(major2) == std::string::npos) continue;
    ++refused_major2;
    EXPECT_EQ(line.rfind("REFUSED " + major2 + ": ", 0), 0u) << line;
    EXPECT_NE(line.find("built for tycho ABI 2.0, this host has ABI " + host_abi()), std::string::npos) << line;
  }
  EXPECT_EQ(refused_major2, 1) << r.out;
  // The other refusals of the folder are listed too; the refused engine is not.
  EXPECT_NE(r.out.find("REFUSED " + test_plugin("abi_newer_minor") + ": "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("REFUSED " + test_plugin("no_entry") + ": "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("abi2_engine"), std::string::npos) << r.out;
  // Refusals are also logged as warnings on stderr.
  EXPECT_NE(r.err.find("refused plugin '" + major2 + "'"), std::string::npos) << r.err;
}

// Without TYCHO_PLUGIN_PATH the test plugins are invisible: normal runs never see them.
TEST(PluginAbi, CliWithoutPathSeesOnlyBuiltIns) {
  auto r = tycho::test::run_command({"env", "-u", "TYCHO_PLUGIN_PATH", tycho::test::tycho_exe(),
                                     "plugins"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.out.find("REFUSED"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(test_plugin_dir()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("engine     cpu"), std::string::npos) << r.out;
}

}  // namespace
