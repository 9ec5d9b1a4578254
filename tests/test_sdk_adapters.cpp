// The SDK's component adapters (sdk/include/tycho/sdk/{source,engine,optimizer,reducer,format}.hpp):
// the one exception barrier, for a class written here, and the argument checks each kind's
// adapter makes before the class sees a call, through the built-in components that use them,
// with the exact messages that name the component.
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/sdk/format.hpp>
#include <tycho/sdk/reducer.hpp>

#include <complex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"

namespace {

using tycho::test::plugins;

std::string last_error() { return tycho::last_error(); }

// A format whose calls throw: what the barrier makes of each exception.
struct throwing_format {
  static inline int kind = 0;
  static void save(const tycho_record&, const char*, tycho_save_mode) { throw std::bad_alloc(); }
  static tycho_record* load(const char*) {
    if (kind == 0) throw std::runtime_error("a plain exception");
    if (kind == 1) tycho::sdk::fail(TYCHO_ERR_IO, "cannot read ", 42);
    throw 7;
  }
};

TEST(SdkAdapters, OneBarrierTurnsEveryExceptionIntoAStatusAndMessage) {
  ASSERT_EQ(tycho::sdk::init_host(tycho::host::host_api()), TYCHO_OK);
  const tycho_format_vtable* vt = tycho::sdk::format_vtable<throwing_format>("thrower", ".thr");
  EXPECT_STREQ(vt->extension, ".thr");
  tycho_record rec{sizeof(tycho_record), 0, nullptr, nullptr, nullptr};
  EXPECT_EQ(vt->save(&rec, "x.thr", TYCHO_SAVE_NEW), TYCHO_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(last_error(), "out of host memory");
  tycho_record* out = &rec;
  EXPECT_EQ(vt->load("x.thr", &out), TYCHO_ERR_INTERNAL);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(last_error(), "a plain exception");
  throwing_format::kind = 1;
  EXPECT_EQ(vt->load("x.thr", &out), TYCHO_ERR_IO);
  EXPECT_EQ(last_error(), "cannot read 42");
  throwing_format::kind = 2;
  EXPECT_EQ(vt->load("x.thr", &out), TYCHO_ERR_INTERNAL);
  EXPECT_EQ(last_error(), "unknown exception in plugin");
  // The adapter's own checks, before the class.
  EXPECT_EQ(vt->save(nullptr, "x.thr", TYCHO_SAVE_NEW), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "thrower format: cannot save x.thr: no record");
  EXPECT_EQ(vt->load("", &out), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "thrower format: load: empty file path");
}

// A small single-slice problem for the cpu engine: P = 4 patterns of 16 x 16, a 40 x 40 object.
struct cpu_problem {
  tycho::config_document doc = tycho::config_document::parse("[reconstruct]\nfft_planning = \"estimate\"\n", "<test>", "");
  tycho_config cfg{&doc.table_at("reconstruct"), "[reconstruct]", ""};
  std::vector<float> targets = std::vector<float>(4 * 16 * 16, 1.0f);
  std::vector<double> positions = {12, 12, 12, 20, 20, 12, 20, 20};
  std::vector<std::complex<float>> object = std::vector<std::complex<float>>(40 * 40, 1.0f);
  std::vector<std::complex<float>> probe = std::vector<std::complex<float>>(16 * 16, 0.1f);
  tycho::sdk::tensor_view t{targets.data(), tycho::sdk::dtype_float32, {4, 16, 16}};
  tycho::sdk::tensor_view p{positions.data(), tycho::sdk::dtype_float64, {4, 2}};
  tycho::sdk::tensor_view o{object.data(), tycho::sdk::dtype_complex64, {1, 40, 40}};
  tycho::sdk::tensor_view pr{probe.data(), tycho::sdk::dtype_complex64, {1, 16, 16}};
  const tycho_loss_vtable* lvt = plugins().find(TYCHO_COMPONENT_LOSS, "amplitude").as<tycho_loss_vtable>();
  tycho_loss* loss = nullptr;

  cpu_problem() { EXPECT_EQ(lvt->create(&cfg, &loss), TYCHO_OK); }
  ~cpu_problem() { lvt->destroy(loss); }
  tycho_engine_setup setup() {
    tycho_engine_setup s{};
    s.struct_size = sizeof s;
    s.config = &cfg;
    s.targets = t.get();
    s.target_scale = 1.0;
    s.positions_px = p.get();
    s.object_init = o.get();
    s.probe_init = pr.get();
    s.loss = {lvt, loss};
    s.num_threads = 1;
    s.device = {kDLCPU, 0};
    return s;
  }
};

TEST(SdkAdapters, EngineSetupIsCheckedOnceNamingTheEngine) {
  const auto* vt = plugins().find(TYCHO_COMPONENT_ENGINE, "cpu").as<tycho_engine_vtable>();
  cpu_problem pb;
  auto refused = [&](tycho_engine_setup s, tycho_status status, const std::string& message) {
    tycho_engine* eng = reinterpret_cast<tycho_engine*>(&pb);
    EXPECT_EQ(vt->create(&s, &eng), status) << last_error();
    EXPECT_EQ(eng, nullptr);
    EXPECT_EQ(last_error(), message);
  };
  tycho::sdk::tensor_view small_probe{pb.probe.data(), tycho::sdk::dtype_complex64, {1, 8, 8}};
  auto s = pb.setup();
  s.probe_init = small_probe.get();
  refused(s, TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: probe (1, 8, 8) does not match the patterns (4, 16, 16)");
  s = pb.setup();
  s.device = {kDLCUDA, 0};
  refused(s, TYCHO_ERR_UNSUPPORTED, "cpu engine: runs on the CPU only, device type 2 was requested");
  std::vector<double> outside = {12, 12, 12, 20, 20, 12, 35, 20};
  tycho::sdk::tensor_view far{outside.data(), tycho::sdk::dtype_float64, {4, 2}};
  s = pb.setup();
  s.positions_px = far.get();
  refused(s, TYCHO_ERR_INVALID_ARGUMENT,
          "cpu engine: the window of position 3 (centre 35, 20 px) does not lie inside the object (40 x 40 px)");
  s = pb.setup();
  s.loss = {nullptr, nullptr};
  refused(s, TYCHO_ERR_INVALID_ARGUMENT, "cpu engine: no loss component given");
  s = pb.setup();
  s.struct_size = 8;
  refused(s, TYCHO_ERR_ABI_MISMATCH, "cpu engine: engine setup struct is too small");
}

TEST(SdkAdapters, EngineCallsAreCheckedNamingTheEngine) {
  const auto* vt = plugins().find(TYCHO_COMPONENT_ENGINE, "cpu").as<tycho_engine_vtable>();
  cpu_problem pb;
  auto s = pb.setup();
  tycho_engine* eng = nullptr;
  ASSERT_EQ(vt->create(&s, &eng), TYCHO_OK) << last_error();
  const int64_t bad[] = {0, 9};
  double loss = 0;
  EXPECT_EQ(vt->compute_batch(eng, bad, 2, &loss), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "cpu engine: pattern index 9 outside [0, 4)");
  EXPECT_EQ(vt->compute_batch(eng, nullptr, -1, &loss), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "cpu engine: negative batch size -1");
  const int64_t good[] = {0, 3};
  EXPECT_EQ(vt->compute_batch(eng, good, 2, &loss), TYCHO_OK) << last_error();
  EXPECT_GT(loss, 0.0);
  DLTensor t{};
  EXPECT_EQ(vt->get_tensor(eng, TYCHO_TENSOR_POSITIONS_GRAD, &t), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "cpu engine: no position gradient: the setup did not ask for one");
  EXPECT_EQ(vt->get_tensor(eng, tycho_tensor_id(9), &t), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "cpu engine: unknown tensor id 9");
  std::vector<std::complex<float>> probe(16 * 16);
  EXPECT_EQ(vt->read_tensor(eng, TYCHO_TENSOR_PROBE, probe.data(), 8), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "cpu engine: read_tensor of (1, 16, 16) needs 2048 bytes, got 8");
  ASSERT_EQ(vt->read_tensor(eng, TYCHO_TENSOR_PROBE, probe.data(), probe.size() * 8), TYCHO_OK);
  EXPECT_EQ(probe[17], std::complex<float>(0.1f));  // the host copy of the adapter: the values as given
  EXPECT_EQ(vt->stream(eng), nullptr);
  EXPECT_EQ(vt->collect_loss, nullptr);  // a host engine
  vt->destroy(eng);
}

TEST(SdkAdapters, OptimizerCallsAreCheckedNamingTheOptimizer) {
  const auto* vt = plugins().find(TYCHO_COMPONENT_OPTIMIZER, "adam").as<tycho_optimizer_vtable>();
  auto doc = tycho::config_document::parse("[reconstruct.object]\n", "<test>", "");
  tycho_config cfg{&doc.table_at("reconstruct.object"), "[reconstruct.object]", ""};
  std::vector<float> param = {1, 2, 3, 4}, grad = {1, 1, 1};
  tycho::sdk::tensor_view pv{param.data(), tycho::sdk::dtype_float32, {4}};
  tycho::sdk::tensor_view gv{grad.data(), tycho::sdk::dtype_float32, {3}};
  tycho_optimizer* opt = nullptr;
  ASSERT_EQ(vt->create(&cfg, pv.get(), &opt), TYCHO_OK) << last_error();
  tycho_step_info info{sizeof(tycho_step_info), 1.0, 1.0, 1};
  EXPECT_EQ(vt->step(opt, pv.get(), gv.get(), &info, nullptr), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "adam optimizer: gradient (3) does not match parameter (4)");
  EXPECT_EQ(vt->state_count(opt), 2);
  const char* name = nullptr;
  EXPECT_EQ(vt->state_array(opt, 2, &name, nullptr), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "adam optimizer: state array 2 does not exist (there are 2)");
  DLTensor view{};
  ASSERT_EQ(vt->state_array(opt, 1, &name, &view), TYCHO_OK);
  EXPECT_STREQ(name, "v");
  EXPECT_EQ(tycho::sdk::shape_string(view), "(4)");
  EXPECT_EQ(tycho::sdk::data_of<float>(view)[3], 0.0f);  // zeros before the first step
  std::vector<double> wrong(4, 0.0);
  tycho::sdk::tensor_view wv{wrong.data(), tycho::sdk::dtype_float64, {4}};
  EXPECT_EQ(vt->set_state(opt, 0, wv.get(), 3), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "adam optimizer: state 'm' (4) float64 does not match the parameter's shape and dtype");
  tycho::sdk::tensor_view elsewhere{param.data(), tycho::sdk::dtype_float32, {4}, DLDevice{kDLOpenCL, 0}};
  EXPECT_EQ(vt->step(opt, elsewhere.get(), elsewhere.get(), &info, nullptr), TYCHO_ERR_UNSUPPORTED);
  EXPECT_EQ(last_error().rfind("adam optimizer: 'param' is on device type 4; this build of it runs on the CPU", 0), 0u)
      << last_error();
  vt->destroy(opt);
}

TEST(SdkAdapters, ReducerSetupIsCheckedBeforeTheRuntimeStarts) {
  const tycho::host::component_ref* mpi = nullptr;
  for (const auto& c : plugins().components())
    if (c.kind == TYCHO_COMPONENT_REDUCER && c.name == "mpi") mpi = &c;
  if (mpi == nullptr) GTEST_SKIP() << "the mpi reducer is not built here";
  const auto* vt = mpi->as<tycho_reducer_vtable>();
  tycho_reducer_setup s{};
  s.struct_size = sizeof s;
  s.rank = s.world_size = s.local_rank = -1;
  s.device = {kDLCUDA, 0};
  tycho_reducer* red = nullptr;
  EXPECT_EQ(vt->create(&s, &red), TYCHO_ERR_UNSUPPORTED);  // refused before MPI is started
  EXPECT_EQ(red, nullptr);
  EXPECT_EQ(last_error(), "mpi reducer: the engine's tensors live on device type 2; this reducer sums tensors on the "
                          "CPU only (reducer = \"auto\" picks one that sums them where the engine keeps them)");
}

// A one-rank reducer that records what the adapter hands it.
template <bool Bytes>
struct recording_reducer {
  static constexpr bool broadcasts_bytes = Bytes;
  static inline tycho::sdk::collective_buffer last{nullptr, 0, 0};
  explicit recording_reducer(const tycho_reducer_setup&) {}
  int32_t rank() const { return 0; }
  int32_t world_size() const { return 1; }
  void allreduce_sum(const tycho::sdk::collective_buffer& b, void*) { last = b; }
  void broadcast(const tycho::sdk::collective_buffer& b, int32_t, void*) { last = b; }
  void barrier() {}
  void abort(int32_t) noexcept {}
};

TEST(SdkAdapters, ReducerTensorsAreHandedOverAsValuesOrBytes) {
  ASSERT_EQ(tycho::sdk::init_host(tycho::host::host_api()), TYCHO_OK);
  using bytes_reducer = recording_reducer<true>;
  using reals_reducer = recording_reducer<false>;
  const auto* host = tycho::sdk::reducer_vtable<bytes_reducer>("bytes", TYCHO_DEVICE_BIT(kDLCPU));
  const auto* device = tycho::sdk::reducer_vtable<reals_reducer>("reals", TYCHO_DEVICE_BIT(kDLCPU));
  EXPECT_EQ(host->shutdown, nullptr);
  tycho_reducer_setup s{};
  s.struct_size = sizeof s;
  s.device = {kDLCPU, 0};
  tycho_reducer* a = nullptr;
  tycho_reducer* b = nullptr;
  ASSERT_EQ(host->create(&s, &a), TYCHO_OK);
  ASSERT_EQ(device->create(&s, &b), TYCHO_OK);
  std::vector<std::complex<double>> z(3);
  tycho::sdk::tensor_view zv{z.data(), tycho::sdk::dtype_complex128, {3}};
  ASSERT_EQ(device->allreduce_sum(b, zv.get(), nullptr), TYCHO_OK);
  EXPECT_EQ(reals_reducer::last.count, 6);  // pairs of reals
  EXPECT_EQ(reals_reducer::last.value_bytes, 8);
  std::vector<uint8_t> text(5);
  tycho::sdk::tensor_view tv{text.data(), tycho::sdk::dtype_uint8, {5}};
  ASSERT_EQ(host->broadcast(a, tv.get(), 0, nullptr), TYCHO_OK) << last_error();
  EXPECT_EQ(bytes_reducer::last.count, 5);
  EXPECT_EQ(bytes_reducer::last.value_bytes, 1);
  EXPECT_EQ(host->allreduce_sum(a, tv.get(), nullptr), TYCHO_ERR_UNSUPPORTED);  // a sum of bytes: no
  EXPECT_EQ(last_error(), "bytes reducer: allreduce_sum of a uint8 tensor; expected float32, float64, complex64 or "
                          "complex128");
  EXPECT_EQ(device->broadcast(b, tv.get(), 0, nullptr), TYCHO_ERR_UNSUPPORTED);
  EXPECT_EQ(device->broadcast(b, zv.get(), 1, nullptr), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "reals reducer: broadcast root 1 outside [0, 1)");
  host->destroy(a);
  device->destroy(b);
}

TEST(SdkAdapters, SourceRequestsAreCheckedNamingTheDataSet) {
  const auto* vt = plugins().find(TYCHO_COMPONENT_SOURCE, "simulate").as<tycho_source_vtable>();
  EXPECT_EQ(vt->read_positions, nullptr);  // a raster: no positions listed
  auto doc = tycho::config_document::parse("[data]\nscan_shape = [2, 2]\ndetector_shape = [96, 96]\n", "<test>", "");
  tycho_config cfg{&doc.table_at("data"), "[data]", ""};
  tycho_source* src = nullptr;
  ASSERT_EQ(vt->open(&cfg, &src), TYCHO_OK) << last_error();
  std::vector<float> patterns(2 * 96 * 96);
  tycho::sdk::tensor_view dst{patterns.data(), tycho::sdk::dtype_float32, {2, 96, 96}};
  EXPECT_EQ(vt->read(src, 3, 2, dst.get()), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "patterns [3, 5) are out of range: 'simulate:2x2x96x96' holds 4 patterns (2 x 2)");
  EXPECT_EQ(vt->read(src, 2, 2, dst.get()), TYCHO_OK) << last_error();
  double total = 0;
  for (int k = 0; k < 96 * 96; ++k) total += patterns[std::size_t(k)];
  EXPECT_NEAR(total, 1.0, 1e-5);  // noise-free patterns are fractions of the beam
  EXPECT_EQ(vt->info(src, nullptr), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "simulate source: info() needs an output");
  vt->close(src);
}

}  // namespace
