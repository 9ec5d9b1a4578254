// The `nccl` reducer plugin (plugins/reducers/nccl), loaded through the registry like the host does.
//
// Runs wherever the plugin is built (CUDA and NCCL found), GPU or not:
//   NcclReducer.DeclaresTimeoutKey   the component and its config keys;
//   NcclReducer.RefusesBadSetups     unknown rank/world size, no bootstrap and no communicator,
//       a CPU device, a bad timeout_s, and (where no GPU is) no visible CUDA device: clear errors.
// Needs a CUDA device (GTEST_SKIP otherwise; with TYCHO_REQUIRE_GPU=1 a missing device, or a
// plugin that is built but refused at load, FAILS instead):
//   CudaNccl.WorldOfOneIsIdentity    all-reduce and broadcast of float32, float64, complex64 and
//       complex128 with one rank leave the values bit for bit; barrier; unsupported dtypes and
//       non-contiguous tensors are refused naming the dtype;
//   CudaNccl.InProcessRanksSumExactly  one thread per visible device, NCCL's id shared through the
//       host's in-process bootstrap channel: sums of rank-dependent integers (exact in floating
//       point) and broadcasts from the last rank, on every rank, for every dtype; barrier.
// The test binary does not link CUDA: libcudart is loaded at run time (dlopen), as in
// test_cuda_engine.cpp.
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/host/registry.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../host/src/parallel/bootstrap_channels.hpp"
#include "built_in_plugins.hpp"
#include "cuda_runtime.hpp"

namespace {

using tycho::test::plugins;

// ------------------------------------------------------------------ libcudart at run time

struct cudart {
  using err = int;  // cudaError_t; 0 = cudaSuccess
  err (*get_device_count)(int*) = nullptr;
  err (*set_device)(int) = nullptr;
  err (*malloc)(void**, size_t) = nullptr;
  err (*free)(void*) = nullptr;
  err (*memcpy)(void*, const void*, size_t, int) = nullptr;  // kind 1: to device, 2: to host
  err (*stream_create)(void**) = nullptr;
  err (*stream_synchronize)(void*) = nullptr;
  err (*stream_destroy)(void*) = nullptr;
  const char* (*error_string)(err) = nullptr;
  int devices = 0;
};

const cudart& runtime() {
  static const cudart rt = [] {
    cudart r;
    void* lib = tycho::test::open_cudart();
    if (lib == nullptr) return r;
    auto get = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      return fn != nullptr;
    };
    bool ok = get(r.get_device_count, "cudaGetDeviceCount") && get(r.set_device, "cudaSetDevice") &&
              get(r.malloc, "cudaMalloc") && get(r.free, "cudaFree") && get(r.memcpy, "cudaMemcpy") &&
              get(r.stream_create, "cudaStreamCreate") &&
              get(r.stream_synchronize, "cudaStreamSynchronize") &&
              get(r.stream_destroy, "cudaStreamDestroy") && get(r.error_string, "cudaGetErrorString");
    int n = 0;
    if (ok && r.get_device_count(&n) == 0) r.devices = n;
    return r;
  }();
  return rt;
}

using tycho::test::gpu_required;

// The nccl reducer's vtable, or NULL; *why says why not.
const tycho_reducer_vtable* nccl_vtable(std::string* why) {
  auto names = plugins().names(TYCHO_COMPONENT_REDUCER);
  if (std::find(names.begin(), names.end(), "nccl") != names.end())
    return plugins().find(TYCHO_COMPONENT_REDUCER, "nccl").as<tycho_reducer_vtable>();
  *why = "the nccl reducer is not built (no CUDA or no NCCL)";
  for (const auto& report : plugins().reports())
    if (report.path.find("libtycho_plugin_nccl.so") != std::string::npos && !report.loaded)
      *why = "the nccl reducer is built but was refused: " + report.refusal;
  return nullptr;
}

#define REQUIRE_NCCL_PLUGIN(vt)                                                                \
  std::string why_##vt;                                                                        \
  const tycho_reducer_vtable* vt = nccl_vtable(&why_##vt);                                     \
  if (vt == nullptr) {                                                                         \
    if (gpu_required() && why_##vt.find("refused") != std::string::npos) FAIL() << why_##vt;   \
    GTEST_SKIP() << why_##vt;                                                                  \
  }

#define REQUIRE_CUDA_DEVICES()                                                                 \
  do {                                                                                         \
    if (runtime().devices == 0) {                                                              \
      if (gpu_required()) FAIL() << "TYCHO_REQUIRE_GPU is set but no CUDA device was found";   \
      GTEST_SKIP() << "no CUDA device";                                                        \
    }                                                                                          \
  } while (0)

void cuda_ok(cudart::err e, const char* what) {
  if (e != 0) throw std::runtime_error(std::string(what) + ": " + runtime().error_string(e));
}

tycho_reducer_setup make_setup(int32_t rank, int32_t world, int device, tycho_bootstrap bootstrap,
                               const tycho_config* cfg = nullptr) {
  tycho_reducer_setup s{};
  s.struct_size = sizeof s;
  s.config = cfg;
  s.rank = rank;
  s.world_size = world;
  s.local_rank = rank;
  s.device = DLDevice{kDLCUDA, device};
  s.bootstrap = bootstrap;
  s.communicator = nullptr;
  return s;
}

// A device array of `reals` reals (float or double) viewed as a tensor of `dtype`.
struct device_tensor {
  void* data = nullptr;
  int64_t shape[2] = {0, 0};
  int64_t strides[2] = {0, 0};
  DLTensor t{};
  size_t bytes = 0;
  device_tensor(DLDataType dtype, int64_t rows, int64_t cols, int device) {
    bytes = size_t(rows * cols) * dtype.bits / 8;
    cuda_ok(runtime().malloc(&data, bytes), "cudaMalloc");
    shape[0] = rows;
    shape[1] = cols;
    t.data = data;
    t.device = DLDevice{kDLCUDA, device};
    t.ndim = 2;
    t.dtype = dtype;
    t.shape = shape;
    t.strides = nullptr;
  }
  ~device_tensor() { runtime().free(data); }
  device_tensor(const device_tensor&) = delete;
  device_tensor& operator=(const device_tensor&) = delete;
  void upload(const void* host) { cuda_ok(runtime().memcpy(data, host, bytes, 1), "cudaMemcpy to device"); }
  void download(void* host) const { cuda_ok(runtime().memcpy(host, data, bytes, 2), "cudaMemcpy to host"); }
};

struct dtype_case {
  const char* name;
  DLDataType dtype;
  bool double_precision;
  int reals_per_element;
};
const dtype_case k_dtypes[] = {
    {"float32", {kDLFloat, 32, 1}, false, 1},
    {"float64", {kDLFloat, 64, 1}, true, 1},
    {"complex64", {kDLComplex, 64, 1}, false, 2},
    {"complex128", {kDLComplex, 128, 1}, true, 2},
};

// Host values of `reals` reals as bytes, each value(i) in float or double.
std::vector<unsigned char> host_values(const dtype_case& c, size_t reals, const std::function<double(size_t)>& value) {
  std::vector<unsigned char> out(reals * (c.double_precision ? 8 : 4));
  for (size_t i = 0; i < reals; ++i) {
    if (c.double_precision) {
      const double v = value(i);
      std::memcpy(out.data() + 8 * i, &v, 8);
    } else {
      const float v = float(value(i));
      std::memcpy(out.data() + 4 * i, &v, 4);
    }
  }
  return out;
}

// Status plus the thread's last error, for messages.
std::string status_text(tycho_status s) {
  return s == TYCHO_OK ? "ok" : std::string("status ") + std::to_string(int(s)) + ": " + tycho::last_error();
}

}  // namespace

// ------------------------------------------------------------------ anywhere the plugin is built

TEST(NcclReducer, DeclaresTimeoutKey) {
  REQUIRE_NCCL_PLUGIN(vt);
  const auto& ref = plugins().find(TYCHO_COMPONENT_REDUCER, "nccl");
  EXPECT_NE(std::find(ref.config_keys.begin(), ref.config_keys.end(), "timeout_s"), ref.config_keys.end());
  EXPECT_EQ(vt->struct_size, sizeof(tycho_reducer_vtable));
  EXPECT_NE(ref.devices & TYCHO_DEVICE_BIT(kDLCUDA), 0u);
}

TEST(NcclReducer, RefusesBadSetups) {
  REQUIRE_NCCL_PLUGIN(vt);
  auto channel = tycho::host::make_thread_channel(2, 1.0);
  tycho_reducer* red = nullptr;
  auto refused = [&](tycho_reducer_setup s, const std::string& expected) {
    red = nullptr;
    const tycho_status st = vt->create(&s, &red);
    EXPECT_NE(st, TYCHO_OK);
    EXPECT_EQ(red, nullptr);
    EXPECT_NE(std::string(tycho::last_error()).find(expected), std::string::npos)
        << "expected '" << expected << "' in: " << tycho::last_error();
    if (red != nullptr) vt->destroy(red);
  };
  refused(make_setup(-1, -1, 0, channel->bootstrap(0)), "rank and world size are unknown");
  refused(make_setup(0, 2, 0, tycho_bootstrap{nullptr, nullptr}), "no bootstrap channel");
  refused(make_setup(2, 2, 0, channel->bootstrap(0)), "rank 2 is not in [0, 2)");
  auto cpu = make_setup(0, 2, 0, channel->bootstrap(0));
  cpu.device = DLDevice{kDLCPU, 0};
  refused(cpu, "CUDA devices only");

  auto doc = tycho::config_document::parse("[parallel]\ntimeout_s = -1\n", "<test>", ".");
  tycho_config cfg{&doc.table_at("parallel"), "[parallel]", "."};
  refused(make_setup(0, 1, 0, tycho_bootstrap{nullptr, nullptr}, &cfg), "'timeout_s' in [parallel]");
  auto text = tycho::config_document::parse("[parallel]\ntimeout_s = \"soon\"\n", "<test>", ".");
  tycho_config text_cfg{&text.table_at("parallel"), "[parallel]", "."};
  refused(make_setup(0, 1, 0, tycho_bootstrap{nullptr, nullptr}, &text_cfg), "timeout_s");

  if (runtime().devices == 0)
    refused(make_setup(0, 1, 0, tycho_bootstrap{nullptr, nullptr}), "no CUDA device is visible");
  else
    refused(make_setup(0, 1, runtime().devices, tycho_bootstrap{nullptr, nullptr}), "was requested but");
}

// ------------------------------------------------------------------ needs a GPU

TEST(CudaNccl, WorldOfOneIsIdentity) {
  REQUIRE_NCCL_PLUGIN(vt);
  REQUIRE_CUDA_DEVICES();
  cuda_ok(runtime().set_device(0), "cudaSetDevice");
  auto channel = tycho::host::make_thread_channel(1, 30.0);
  auto setup = make_setup(0, 1, 0, channel->bootstrap(0));
  tycho_reducer* red = nullptr;
  ASSERT_EQ(vt->create(&setup, &red), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(vt->rank(red), 0);
  EXPECT_EQ(vt->world_size(red), 1);
  void* stream = nullptr;
  cuda_ok(runtime().stream_create(&stream), "cudaStreamCreate");

  for (const auto& c : k_dtypes) {
    SCOPED_TRACE(c.name);
    const int64_t rows = 37, cols = 129;  // odd sizes
    const size_t reals = size_t(rows * cols) * size_t(c.reals_per_element);
    const auto values = host_values(c, reals, [](size_t i) { return std::sin(0.37 * double(i)) * 1e3 + 1.0 / 3.0; });
    device_tensor t(c.dtype, rows, cols, 0);
    t.upload(values.data());
    EXPECT_EQ(vt->allreduce_sum(red, &t.t, stream), TYCHO_OK) << tycho::last_error();
    EXPECT_EQ(vt->broadcast(red, &t.t, 0, stream), TYCHO_OK) << tycho::last_error();
    cuda_ok(runtime().stream_synchronize(stream), "cudaStreamSynchronize");
    std::vector<unsigned char> back(values.size());
    t.download(back.data());
    EXPECT_TRUE(back == values) << "values changed";
  }
  EXPECT_EQ(vt->barrier(red), TYCHO_OK) << tycho::last_error();

  // Refusals name the dtype or the layout.
  device_tensor ints(DLDataType{kDLInt, 64, 1}, 4, 4, 0);
  EXPECT_EQ(vt->allreduce_sum(red, &ints.t, stream), TYCHO_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(tycho::last_error()).find("int64"), std::string::npos) << tycho::last_error();
  device_tensor halves(DLDataType{kDLFloat, 16, 1}, 4, 4, 0);
  EXPECT_EQ(vt->broadcast(red, &halves.t, 0, stream), TYCHO_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(tycho::last_error()).find("float16"), std::string::npos) << tycho::last_error();
  device_tensor strided(DLDataType{kDLFloat, 32, 1}, 4, 4, 0);
  strided.strides[0] = 1;
  strided.strides[1] = 4;  // column-major
  strided.t.strides = strided.strides;
  EXPECT_EQ(vt->allreduce_sum(red, &strided.t, stream), TYCHO_ERR_BAD_DATA);
  EXPECT_NE(std::string(tycho::last_error()).find("not C-contiguous"), std::string::npos) << tycho::last_error();
  EXPECT_EQ(vt->broadcast(red, &strided.t, 1, stream), TYCHO_ERR_INVALID_ARGUMENT);  // root 1 of 1

  runtime().stream_destroy(stream);
  vt->destroy(red);
}

TEST(CudaNccl, InProcessRanksSumExactly) {
  REQUIRE_NCCL_PLUGIN(vt);
  REQUIRE_CUDA_DEVICES();
  const int32_t world = runtime().devices;
  auto channel = tycho::host::make_thread_channel(world, 120.0);
  auto doc = tycho::config_document::parse("[parallel]\ntimeout_s = 120\n", "<test>", ".");
  tycho_config cfg{&doc.table_at("parallel"), "[parallel]", "."};
  std::vector<std::string> errors(static_cast<size_t>(world));

  std::vector<std::thread> threads;
  for (int32_t r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      std::string& error = errors[size_t(r)];
      try {
        cuda_ok(runtime().set_device(r), "cudaSetDevice");
        auto setup = make_setup(r, world, r, channel->bootstrap(r), &cfg);
        tycho_reducer* red = nullptr;
        if (tycho_status s = vt->create(&setup, &red); s != TYCHO_OK) {
          error = "create: " + status_text(s);
          return;
        }
        if (vt->rank(red) != r || vt->world_size(red) != world) error = "rank/world size";
        void* stream = nullptr;
        cuda_ok(runtime().stream_create(&stream), "cudaStreamCreate");
        const double ranks_sum = double(world) * double(world + 1) / 2;  // Σ (r + 1)
        for (const auto& c : k_dtypes) {
          const int64_t rows = 3, cols = 1001;
          const size_t reals = size_t(rows * cols) * size_t(c.reals_per_element);
          // Small integers: every partial sum is exact, whatever order NCCL adds in.
          auto mine = [&](size_t i) { return double(r + 1) * double(i % 7 + 1) * (i % 2 ? -1.0 : 1.0); };
          auto summed = [&](size_t i) { return ranks_sum * double(i % 7 + 1) * (i % 2 ? -1.0 : 1.0); };
          auto root_values = [&](size_t i) { return double(world) * 1000.0 + double(i % 13); };  // root = world - 1
          device_tensor t(c.dtype, rows, cols, r);
          t.upload(host_values(c, reals, mine).data());
          if (tycho_status s = vt->allreduce_sum(red, &t.t, stream); s != TYCHO_OK) {
            error = std::string(c.name) + " allreduce_sum: " + status_text(s);
            break;
          }
          cuda_ok(runtime().stream_synchronize(stream), "cudaStreamSynchronize");
          std::vector<unsigned char> back(host_values(c, reals, summed).size());
          t.download(back.data());
          if (back != host_values(c, reals, summed)) error += std::string(c.name) + ": wrong sums; ";

          const auto before = host_values(c, reals, r == world - 1 ? std::function<double(size_t)>(root_values)
                                                                   : std::function<double(size_t)>(mine));
          t.upload(before.data());
          if (tycho_status s = vt->broadcast(red, &t.t, world - 1, stream); s != TYCHO_OK) {
            error = std::string(c.name) + " broadcast: " + status_text(s);
            break;
          }
          cuda_ok(runtime().stream_synchronize(stream), "cudaStreamSynchronize");
          t.download(back.data());
          if (back != host_values(c, reals, root_values)) error += std::string(c.name) + ": wrong broadcast; ";
        }
        if (tycho_status s = vt->barrier(red); s != TYCHO_OK) error += "barrier: " + status_text(s);
        runtime().stream_destroy(stream);
        vt->destroy(red);
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int32_t r = 0; r < world; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r << " of " << world;
}
