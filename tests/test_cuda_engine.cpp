// The cuda engine against the cpu engine (the reference), and the device code's shared
// formulas against the host code.
//
// Runs everywhere:
//   CudaMath.*      the host/device helpers (ramps, window origins, the loss pixel, the optimizer
//                   elements) against the cpu engine's formulas and the host loops;
//   CudaHarness.*   the parity harnesses below (one batch, optimizer steps, 10 iterations on the
//                   cropped odd-window data) run with the cpu engine against itself, so they are
//                   checked where no GPU is;
//   CudaEngine.WithoutDeviceFailsCleanly  engine = "cuda" without a GPU: exit code 2 and a clear
//                   message, never a crash (skipped where a GPU is).
// Needs a CUDA device (GTEST_SKIP "no CUDA device" otherwise; with TYCHO_REQUIRE_GPU=1 set, as
// scripts/gpu-check does, a missing device FAILS instead):
//   CudaEngine.GradientsMatchCpu*   one batch from the same state: loss and both gradients, full,
//                   last (remainder), short and over-long batches, atomic and deterministic, even
//                   square and odd non-square windows, with and without a mask;
//   CudaEngine.OptimizersMatchHost  adam and sgd device steps against the host steps on the same
//                   numbers;
//   CudaEngine.MoS2TenIterationsMatchCpu  10 iterations of examples/mos2.toml, see below;
//   CudaEngine.OddWindowTenIterationsMatchCpu  the same on a non-square, odd detector (the MoS2
//                   patterns cropped to 81 x 90);
//   CudaEngine.DeterministicRepeats  deterministic = true: bit-identical objects and probes;
//   CudaEngine.DeterministicSumsOnTwoDevicesGiveOneDevicesBits  a batch cut between two engines,
//                   their int64 sums added: one engine's object and probe gradients, bit for bit;
//   CudaEngine.MoS2AccuracyMatchesCpu  100 iterations: Pearson within 0.005 of the cpu engine's.
//
// Why the 10-iteration comparisons use a yardstick: Adam divides each real by the root of its
// running squared gradient, so components whose gradient is at the level of the FFT's rounding
// still move by about the learning rate, in a direction the rounding picks. Two correct engines
// that round differently then drift apart: the cpu engine with FFTW_MEASURE instead of
// FFTW_ESTIMATE differs from itself by ~1e-2 (object) and ~0.2 (probe, relative norm) after 10
// MoS2 iterations, and by ~1e-2 in the loss history. So the exact check is the one-batch gradient
// parity (1e-4); after 10 iterations the cuda engine must be no further from the cpu engine than
// k_yardstick_factor times the cpu engine's own FFTW_MEASURE-vs-ESTIMATE spread (floor 1e-4).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/host/result_record.hpp>

#include <nlohmann/json.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engines/cuda/cuda_math.hpp"
#include "losses/pixel_loss_loop.hpp"
#include "losses/amplitude_pixel.hpp"
#include "optimizers/optimizers.hpp"
#include "emd_test_file.hpp"
#include "run_command.hpp"
#include "built_in_plugins.hpp"
#include "cuda_runtime.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;
using cfloat = std::complex<float>;
using tycho::test::command_result;
using tycho::test::run_command;

namespace {

constexpr double k_gradient_tolerance = 1e-4;  // relative norm, one batch from the same state
constexpr double k_loss_tolerance = 1e-5;      // relative, one batch
constexpr double k_yardstick_factor = 5.0;     // see the header comment
constexpr double k_yardstick_floor = 1e-4;

// ------------------------------------------------------------------ device detection

// Number of CUDA devices, asked of libcudart loaded at run time (the test binary does not link
// CUDA); 0 when the runtime or a driver is missing.
int cuda_device_count() {
  static const int count = [] {
    void* lib = tycho::test::open_cudart();
    if (lib == nullptr) return 0;
    using fn = int (*)(int*);
    auto get = reinterpret_cast<fn>(dlsym(lib, "cudaGetDeviceCount"));
    int n = 0;
    if (get != nullptr && get(&n) == 0) return n;  // cudaSuccess
    return 0;
  }();
  return count;
}

using tycho::test::gpu_required;

#define REQUIRE_CUDA_DEVICE()                                                                  \
  do {                                                                                         \
    if (!has_engine("cuda")) {                                                                 \
      if (gpu_required()) FAIL() << "TYCHO_REQUIRE_GPU is set but the cuda engine is not built"; \
      GTEST_SKIP() << "the cuda engine is not built (no nvcc)";                               \
    }                                                                                          \
    if (cuda_device_count() == 0) {                                                            \
      if (gpu_required()) FAIL() << "TYCHO_REQUIRE_GPU is set but no CUDA device was found";   \
      GTEST_SKIP() << "no CUDA device";                                                        \
    }                                                                                          \
  } while (0)

// ------------------------------------------------------------------ helpers

using tycho::test::plugins;

bool has_engine(const std::string& name) {
  auto names = plugins().names(TYCHO_COMPONENT_ENGINE);
  return std::find(names.begin(), names.end(), name) != names.end();
}

template <class T>
double relative_difference(const std::vector<T>& a, const std::vector<T>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += std::norm(std::complex<double>(a[i]) - std::complex<double>(b[i]));
    den += std::norm(std::complex<double>(a[i]));
  }
  return a.size() != b.size() ? INFINITY : den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double norm_of(const std::vector<cfloat>& a) {
  double s = 0;
  for (auto v : a) s += std::norm(std::complex<double>(v));
  return std::sqrt(s);
}

// ------------------------------------------------------------------ a synthetic problem

// Everything an engine's set-up needs, for a window of n0 x n1 and an rx x ry scan with
// sub-pixel positions; random but fixed by the seed.
struct synthetic_problem {
  int64_t n0, n1, h, w, patterns;
  std::vector<float> targets;
  std::vector<uint8_t> mask;
  std::vector<double> positions;
  std::vector<cfloat> object, probe;
  double target_scale = 1;
  int64_t target_shape[3], mask_shape[2], position_shape[2], object_shape[3], probe_shape[3];
  DLTensor targets_t{}, mask_t{}, positions_t{}, object_t{}, probe_t{};

  synthetic_problem(int64_t n0_, int64_t n1_, int64_t rx, int64_t ry, bool with_mask, uint32_t seed)
      : n0(n0_), n1(n1_), patterns(rx * ry) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const double step0 = 2.7, step1 = 3.1;
    const int64_t pad = 3;
    h = 2 * pad + n0 + int64_t(std::ceil(double(rx - 1) * step0)) + 2;
    w = 2 * pad + n1 + int64_t(std::ceil(double(ry - 1) * step1)) + 2;
    for (int64_t i = 0; i < rx; ++i)
      for (int64_t j = 0; j < ry; ++j) {
        positions.push_back(double(pad + n0 / 2) + double(i) * step0 + u(rng));
        positions.push_back(double(pad + n1 / 2) + double(j) * step1 + u(rng));
      }
    // A Gaussian probe with a chirp, centred in its window, Σ|P|² = 1.
    probe.resize(size_t(n0 * n1));
    double total = 0;
    for (int64_t a = 0; a < n0; ++a)
      for (int64_t b = 0; b < n1; ++b) {
        const double y = double(a - n0 / 2), x = double(b - n1 / 2);
        const double r2 = y * y / double(n0 * n0) + x * x / double(n1 * n1);
        const std::complex<double> v = std::exp(-r2 * 18.0) * std::polar(1.0, 9.0 * r2);
        probe[size_t(a * n1 + b)] = cfloat(v);
        total += std::norm(v);
      }
    for (auto& p : probe) p /= float(std::sqrt(total));
    // A smooth weak-phase object with some noise.
    object.resize(size_t(h * w));
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const double amp = 0.85 + 0.1 * std::cos(0.3 * double(y)) * std::sin(0.2 * double(x)) + 0.02 * u(rng);
        const double phase = 0.5 * std::sin(0.11 * double(x) + 0.07 * double(y)) + 0.05 * u(rng);
        object[size_t(y * w + x)] = cfloat(std::polar(amp, phase));
      }
    // Measured patterns: random, ~5 % zeros, totals near T; the scale brings them to ~Σ|P|².
    const double T = 2.0e4;
    targets.resize(size_t(patterns * n0 * n1));
    for (auto& d : targets) d = u(rng) < 0.05 ? 0.f : float(2.0 * T / double(n0 * n1) * u(rng));
    target_scale = 1.0 / T;
    if (with_mask) {
      mask.resize(size_t(n0 * n1));
      for (auto& m : mask) m = u(rng) < 0.9 ? 1 : 0;
    }
    int64_t ts[3] = {patterns, n0, n1}, ms[2] = {n0, n1}, ps[2] = {patterns, 2}, os[3] = {1, h, w},
            pr[3] = {1, n0, n1};
    std::copy(ts, ts + 3, target_shape);
    std::copy(ms, ms + 2, mask_shape);
    std::copy(ps, ps + 2, position_shape);
    std::copy(os, os + 3, object_shape);
    std::copy(pr, pr + 3, probe_shape);
    targets_t = {targets.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, target_shape, nullptr, 0};
    mask_t = {mask.data(), {kDLCPU, 0}, 2, {kDLUInt, 8, 1}, mask_shape, nullptr, 0};
    positions_t = {positions.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, position_shape, nullptr, 0};
    object_t = {object.data(), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, object_shape, nullptr, 0};
    probe_t = {probe.data(), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, probe_shape, nullptr, 0};
  }
  synthetic_problem(const synthetic_problem&) = delete;
  synthetic_problem& operator=(const synthetic_problem&) = delete;
};

// An engine component instance (with its loss) on a synthetic problem, driven through the ABI
// exactly as the driver does: compute_batch, then collect_loss where the engine has one.
class engine_run {
 public:
  // host_finishes: the test sums the engines' fixed-point sums and calls finish() (as the driver).
  engine_run(const std::string& engine, const synthetic_problem& p, const std::string& config_toml,
             const char* loss = "amplitude", bool host_finishes = false)
      : doc_(tycho::config_document::parse("[reconstruct]\n" + config_toml, "<test>", "")),
        cfg_{&doc_.table_at("reconstruct"), "[reconstruct]", ""} {
    const auto& e = plugins().find(TYCHO_COMPONENT_ENGINE, engine);
    evt_ = e.as<tycho_engine_vtable>();
    lvt_ = plugins().find(TYCHO_COMPONENT_LOSS, loss).as<tycho_loss_vtable>();
    EXPECT_EQ(lvt_->create(&cfg_, &loss_), TYCHO_OK) << tycho::last_error();
    tycho_engine_setup s{};
    s.struct_size = sizeof(s);
    s.config = &cfg_;
    s.targets = &p.targets_t;
    s.mask = p.mask.empty() ? nullptr : &p.mask_t;
    s.target_scale = p.target_scale;
    s.positions_px = &p.positions_t;
    s.object_init = &p.object_t;
    s.probe_init = &p.probe_t;
    s.loss = {lvt_, loss_};
    s.host_finishes_batches = host_finishes ? 1 : 0;
    const bool cuda_only = (e.devices & TYCHO_DEVICE_BIT(kDLCUDA)) && !(e.devices & TYCHO_DEVICE_BIT(kDLCPU));
    s.device = cuda_only ? DLDevice{kDLCUDA, 0} : DLDevice{kDLCPU, 0};
    status_ = evt_->create(&s, &eng_);
    if (status_ != TYCHO_OK) error_ = tycho::last_error();
  }
  ~engine_run() {
    if (eng_) evt_->destroy(eng_);
    if (loss_) lvt_->destroy(loss_);
  }
  engine_run(const engine_run&) = delete;
  engine_run& operator=(const engine_run&) = delete;

  bool ok() const { return status_ == TYCHO_OK; }
  const std::string& error() const { return error_; }
  tycho_engine* handle() const { return eng_; }
  const tycho_engine_vtable* vtable() const { return evt_; }

  // Σ L of the batch.
  double batch(const std::vector<int64_t>& indices) {
    double loss = 0;
    EXPECT_EQ(evt_->compute_batch(eng_, indices.data(), int64_t(indices.size()), &loss), TYCHO_OK)
        << tycho::last_error();
    if (evt_->collect_loss != nullptr)
      EXPECT_EQ(evt_->collect_loss(eng_, &loss), TYCHO_OK) << tycho::last_error();
    return loss;
  }
  std::vector<cfloat> read(tycho_tensor_id id) {
    DLTensor t{};
    EXPECT_EQ(evt_->get_tensor(eng_, id, &t), TYCHO_OK) << tycho::last_error();
    int64_t n = 1;
    for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
    std::vector<cfloat> out(static_cast<size_t>(n));
    EXPECT_EQ(evt_->read_tensor(eng_, id, out.data(), out.size() * sizeof(cfloat)), TYCHO_OK)
        << tycho::last_error();
    return out;
  }
  // compute_batch alone (the loss stays with the engine), and the step after the host's sum of
  // the fixed-point sums: `again` (1: compute the batch again).
  void compute(const std::vector<int64_t>& indices) {
    double loss = 0;
    EXPECT_EQ(evt_->compute_batch(eng_, indices.data(), int64_t(indices.size()), &loss), TYCHO_OK)
        << tycho::last_error();
  }
  int32_t finish(uint32_t flags) {
    int32_t again = -1;
    double loss = 0;
    EXPECT_EQ(evt_->finish_batch(eng_, flags, &again, &loss, nullptr), TYCHO_OK) << tycho::last_error();
    return again;
  }
  double collect() {
    double loss = 0;
    EXPECT_EQ(evt_->collect_loss(eng_, &loss), TYCHO_OK) << tycho::last_error();
    return loss;
  }
  std::vector<int64_t> read_sums() {
    DLTensor t = tensor(TYCHO_TENSOR_FIXED_POINT_SUMS);
    EXPECT_EQ(t.dtype.code, kDLInt);
    EXPECT_EQ(t.dtype.bits, 64);
    std::vector<int64_t> out(size_t(t.ndim == 1 ? t.shape[0] : 0));
    EXPECT_EQ(evt_->read_tensor(eng_, TYCHO_TENSOR_FIXED_POINT_SUMS, out.data(), out.size() * sizeof(int64_t)),
              TYCHO_OK)
        << tycho::last_error();
    return out;
  }
  DLTensor tensor(tycho_tensor_id id) {
    DLTensor t{};
    EXPECT_EQ(evt_->get_tensor(eng_, id, &t), TYCHO_OK) << tycho::last_error();
    return t;
  }
  void* stream() { return evt_->stream ? evt_->stream(eng_) : nullptr; }

 private:
  tycho::config_document doc_;
  tycho_config cfg_;
  const tycho_engine_vtable* evt_ = nullptr;
  const tycho_loss_vtable* lvt_ = nullptr;
  tycho_loss* loss_ = nullptr;
  tycho_engine* eng_ = nullptr;
  tycho_status status_ = TYCHO_ERR_INTERNAL;
  std::string error_;
};

// Runs the same batches on `reference` and `candidate` from the same state and compares the
// losses and gradients. Batch sizes exercise the plans: B (16), the remainder of 40 (8), a
// short batch of another size (5), one longer than B (37: passes of 16, 16, 5), all (40).
void expect_same_gradients(const std::string& reference, const std::string& candidate, int64_t n0, int64_t n1,
                           bool with_mask, bool deterministic, const char* loss = "amplitude") {
  synthetic_problem p(n0, n1, 5, 8, with_mask, 1234u + uint32_t(n0 * 7 + n1));
  // The cpu engine as the candidate: its grouped shifts at the exact offsets (no grid,
  // shift_group_grid_px = 0), which differ from the reference path by rounding only.
  const std::string cfg = std::string("batch_size = 16\n") +
                          (candidate == "cuda" ? (deterministic ? "deterministic = true\n" : "deterministic = false\n")
                                               : "shift_group_grid_px = 0\n");
  // The cuda engine makes the four 2-D transforms per position of the cpu engine's reference path:
  // compare like with like (the grouped shifts, the cpu default, differ by rounding only).
  engine_run ref(reference, p, reference == "cpu" ? "batch_size = 16\nshift_groups = false\n" : "batch_size = 16\n",
                 loss);
  engine_run cand(candidate, p, cfg, loss);
  ASSERT_TRUE(ref.ok()) << ref.error();
  ASSERT_TRUE(cand.ok()) << cand.error();
  std::vector<int64_t> order(size_t(p.patterns));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  for (int64_t count : {16, 8, 5, 37, 40}) {
    SCOPED_TRACE(testing::Message() << candidate << " vs " << reference << ", window " << n0 << " x " << n1
                                    << (with_mask ? ", mask" : "") << (deterministic ? ", deterministic" : "")
                                    << ", " << loss << " loss"
                                    << ", batch of " << count);
    std::vector<int64_t> idx(order.begin(), order.begin() + count);
    std::rotate(order.begin(), order.begin() + 3, order.end());
    const double loss_ref = ref.batch(idx), loss_cand = cand.batch(idx);
    EXPECT_GT(loss_ref, 0);
    EXPECT_NEAR(loss_cand, loss_ref, k_loss_tolerance * std::abs(loss_ref));
    for (auto id : {TYCHO_TENSOR_OBJECT_GRAD, TYCHO_TENSOR_PROBE_GRAD}) {
      auto a = ref.read(id), b = cand.read(id);
      EXPECT_GT(norm_of(a), 0) << "gradient " << int(id) << " is zero";
      const double rel = relative_difference(a, b);
      EXPECT_LT(rel, k_gradient_tolerance) << "gradient " << int(id) << " differs by " << rel;
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// Two steps of an optimizer on `engine`'s object (on the engine's device, through its stream)
// against the host implementation on host copies of the same numbers.
void expect_optimizer_matches_host(const std::string& engine, const std::string& optimizer, const std::string& table) {
  synthetic_problem p(24, 20, 4, 4, false, 99u);
  engine_run run(engine, p, "batch_size = 16\n");
  ASSERT_TRUE(run.ok()) << run.error();
  std::vector<int64_t> idx(16);
  std::iota(idx.begin(), idx.end(), 0);
  run.batch(idx);
  auto host_param = run.read(TYCHO_TENSOR_OBJECT);
  const auto host_grad = run.read(TYCHO_TENSOR_OBJECT_GRAD);

  auto doc = tycho::config_document::parse("[reconstruct.object]\n" + table, "<test>", "");
  tycho_config cfg{&doc.table_at("reconstruct.object"), "[reconstruct.object]", ""};
  const auto* vt = plugins().find(TYCHO_COMPONENT_OPTIMIZER, optimizer).as<tycho_optimizer_vtable>();
  DLTensor dev_param = run.tensor(TYCHO_TENSOR_OBJECT), dev_grad = run.tensor(TYCHO_TENSOR_OBJECT_GRAD);
  int64_t shape[3] = {1, p.h, p.w};
  DLTensor hp{host_param.data(), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, shape, nullptr, 0};
  DLTensor hg{const_cast<cfloat*>(host_grad.data()), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, shape, nullptr, 0};
  tycho_optimizer *on_device = nullptr, *on_host = nullptr;
  ASSERT_EQ(vt->create(&cfg, &dev_param, &on_device), TYCHO_OK) << tycho::last_error();
  ASSERT_EQ(vt->create(&cfg, &hp, &on_host), TYCHO_OK) << tycho::last_error();
  for (int64_t it = 1; it <= 2; ++it) {
    tycho_step_info info{sizeof(tycho_step_info), 1.0 / 16.0, 0.7, it};
    EXPECT_EQ(vt->step(on_device, &dev_param, &dev_grad, &info, run.stream()), TYCHO_OK) << tycho::last_error();
    EXPECT_EQ(vt->step(on_host, &hp, &hg, &info, nullptr), TYCHO_OK) << tycho::last_error();
  }
  const auto device_result = run.read(TYCHO_TENSOR_OBJECT);
  EXPECT_LT(relative_difference(host_param, device_result), 1e-6) << optimizer;
  EXPECT_GT(relative_difference(p.object, device_result), 1e-6) << optimizer << " did not move the object";
  vt->destroy(on_device);
  vt->destroy(on_host);
}

// ------------------------------------------------------------------ end-to-end helpers

std::string example_config() { return tycho::test::source_dir() + "/examples/mos2.toml"; }

using tycho::test::load_result;

struct run_figures {
  double object = 0, probe = 0, loss = 0;  // relative differences
};

run_figures compare_results(const std::string& a, const std::string& b) {
  auto ra = load_result(a), rb = load_result(b);
  auto values = [](const tycho::host::loaded_record& r, const char* name, const std::string& path) {
    const auto& arr = r.array(name, path);
    std::vector<std::complex<double>> v;
    if (arr.dtype.code == kDLComplex)
      for (int64_t i = 0; i < arr.count(); ++i) v.emplace_back(arr.as<cfloat>()[i]);
    else
      for (int64_t i = 0; i < arr.count(); ++i) v.emplace_back(arr.as<double>()[i]);
    return v;
  };
  run_figures f;
  f.object = relative_difference(values(ra, "object", a), values(rb, "object", b));
  f.probe = relative_difference(values(ra, "probe", a), values(rb, "probe", b));
  f.loss = relative_difference(values(ra, "loss_history", a), values(rb, "loss_history", b));
  return f;
}

command_result reconstruct(const std::string& config, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", config, "-q",
                                   "--set", "output.previews=false"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_command(argv);
}

// 10 iterations on `config` with the cpu engine (FFTW estimate and measure) and the candidate
// engine; the candidate's result must lie within the yardstick of the cpu one.
void expect_ten_iterations_match(const std::string& config, const std::vector<std::string>& extra,
                                 const tycho::test::temp_folder& tmp, const std::string& candidate = "cuda") {
  auto run = [&](const std::string& name, std::vector<std::string> sets) {
    sets.insert(sets.begin(), extra.begin(), extra.end());
    sets.insert(sets.end(), {"--iterations", "10", "-o", tmp / name});
    auto r = reconstruct(config, sets);
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    return r.exited_with(0);
  };
  // The cpu engine's four-transform reference path, the algorithm the cuda engine implements.
  ASSERT_TRUE(run("cpu.zip", {"--set", "reconstruct.engine=\"cpu\"", "--set", "reconstruct.fft_planning=\"estimate\"",
                              "--set", "reconstruct.shift_groups=false"}));
  ASSERT_TRUE(run("cpu_measure.zip", {"--set", "reconstruct.engine=\"cpu\"", "--set",
                                      "reconstruct.fft_planning=\"measure\"", "--set",
                                      "reconstruct.shift_groups=false"}));
  ASSERT_TRUE(run("cuda.zip", {"--set", "reconstruct.engine=\"" + candidate + "\""}));
  const run_figures spread = compare_results(tmp / "cpu.zip", tmp / "cpu_measure.zip");
  const run_figures cuda = compare_results(tmp / "cpu.zip", tmp / "cuda.zip");
  auto limit = [](double s) { return std::max(k_yardstick_floor, k_yardstick_factor * s); };
  std::cout << candidate << " vs cpu after 10 iterations (relative): object " << cuda.object << ", probe " << cuda.probe
            << ", loss history " << cuda.loss << "; cpu measure vs estimate: object " << spread.object << ", probe "
            << spread.probe << ", loss history " << spread.loss << "\n";
  ::testing::Test::RecordProperty("object_rel", std::to_string(cuda.object));
  ::testing::Test::RecordProperty("probe_rel", std::to_string(cuda.probe));
  ::testing::Test::RecordProperty("loss_rel", std::to_string(cuda.loss));
  EXPECT_LT(cuda.object, limit(spread.object));
  EXPECT_LT(cuda.probe, limit(spread.probe));
  EXPECT_LT(cuda.loss, limit(spread.loss));
}

// Writes the MoS2 counts with every pattern cropped (about its centre, index N/2) to 81 x 90:
// an odd, non-square detector with the same calibrations. Returns false if it cannot.
bool write_cropped_mos2(const std::string& dst, std::string& why) {
  const std::string src = tycho::test::example_data("mos2_80kV_32x24_counts.h5");
  hid_t in = H5Fopen(src.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (in < 0) {
    why = "cannot open " + src;
    return false;
  }
  hid_t d = H5Dopen2(in, "/datacube_root/datacube/data", H5P_DEFAULT);
  hid_t space = H5Dget_space(d);
  hsize_t dims[4] = {};
  H5Sget_simple_extent_dims(space, dims, nullptr);
  std::vector<uint16_t> all(dims[0] * dims[1] * dims[2] * dims[3]);
  herr_t rc = H5Dread(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data());
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(in);
  if (rc < 0 || dims[2] != 96 || dims[3] != 96) {
    why = "unexpected MoS2 data";
    return false;
  }
  const hsize_t q0 = 81, q1 = 90, o0 = 48 - q0 / 2, o1 = 48 - q1 / 2;  // centre 48 → q/2
  std::vector<uint16_t> crop(dims[0] * dims[1] * q0 * q1);
  for (hsize_t p = 0; p < dims[0] * dims[1]; ++p)
    for (hsize_t a = 0; a < q0; ++a)
      for (hsize_t b = 0; b < q1; ++b) crop[(p * q0 + a) * q1 + b] = all[(p * 96 + a + o0) * 96 + b + o1];

  tycho::test::emd_file_spec spec{{dims[0], dims[1], q0, q1}, tycho::test::emd_element::uint16, crop.data()};
  spec.mark_file = true;
  spec.calibration = tycho::test::emd_calibration{0.5, "A", 0.06, "A^-1"};
  spec.microscope = tycho::test::emd_microscope{80e3, 25.0, -150.0};
  return tycho::test::write_emd_file(dst, spec, &why);
}

double pearson_of(const std::string& result) {
  auto r = run_command({tycho::test::tycho_exe(), "evaluate", result, "--truth",
                        tycho::test::example_data("mos2_ground_truth.npz")});
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  try {
    return nlohmann::json::parse(r.out).at("pearson").get<double>();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "evaluate did not print a pearson figure: " << e.what() << "\n" << r.describe();
    return NAN;
  }
}

// ================================================================== tests: everywhere

TEST(CudaMath, FrequencyAndWindowOrigin) {
  using tycho::cuda_math::frequency;
  const int64_t even[6] = {0, 1, 2, -3, -2, -1}, odd[5] = {0, 1, 2, -2, -1};  // numpy fftfreq · n
  for (int64_t k = 0; k < 6; ++k) EXPECT_EQ(frequency(k, 6), even[k]);
  for (int64_t k = 0; k < 5; ++k) EXPECT_EQ(frequency(k, 5), odd[k]);
  for (double c : {48.0, 48.25, 60.999, 47.5, 100.0 + 1e-9}) {
    for (int64_t n : {96, 95, 81, 90}) {
      const auto o = tycho::cuda_math::origin_of(c, n);
      const double t = c - double(n / 2);  // the cpu engine: centre − N/2, integer division
      EXPECT_EQ(o.index, int64_t(std::floor(t))) << c << " " << n;
      EXPECT_EQ(o.fraction, t - std::floor(t)) << c << " " << n;
      EXPECT_GE(o.fraction, 0.0);
      EXPECT_LT(o.fraction, 1.0);
    }
  }
}

// The ramp equals the cpu engine's fill_ramp (plugins/engines/cpu/cpu_engine.cpp), and multiplying a
// spectrum by it with δ = 1 moves the signal one pixel towards higher indices: P(r − δ).
TEST(CudaMath, RampMatchesCpuEngineAndShiftsForward) {
  for (int64_t n : {8, 9, 96, 81}) {
    for (double delta : {0.0, 0.3, 0.999}) {
      for (int64_t k = 0; k < n; ++k) {
        const int64_t f = k < (n + 1) / 2 ? k : k - n;
        const double phase = -1.0 * 2.0 * M_PI * double(f) * delta / double(n);
        const cfloat cpu(float(std::cos(phase)), float(std::sin(phase)));
        const auto r = tycho::cuda_math::ramp(k, n, delta, -1.0);
        EXPECT_EQ(r.x, cpu.real()) << n << " " << delta << " " << k;
        EXPECT_EQ(r.y, cpu.imag()) << n << " " << delta << " " << k;
      }
    }
  }
  const int64_t n = 9;
  std::vector<std::complex<double>> x(n), spec(n), back(n);
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = {double(i * i % 7), double(i % 3)};
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = 0; i < n; ++i) spec[size_t(k)] += x[size_t(i)] * std::polar(1.0, -2 * M_PI * double(k * i) / double(n));
  for (int64_t k = 0; k < n; ++k) {
    const auto r = tycho::cuda_math::ramp(k, n, 1.0, -1.0);
    spec[size_t(k)] *= std::complex<double>(r.x, r.y);
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < n; ++k) back[size_t(i)] += spec[size_t(k)] * std::polar(1.0, 2 * M_PI * double(k * i) / double(n));
    back[size_t(i)] /= double(n);
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(std::abs(back[size_t((i + 1) % n)] - x[size_t(i)]), 0.0, 1e-5) << i;
}

TEST(CudaMath, ComplexProductsAsStdComplex) {
  const cfloat a(0.3f, -1.7f), b(-2.5f, 0.25f);
  const tycho::cuda_math::c32 ca{a.real(), a.imag()}, cb{b.real(), b.imag()};
  const auto p = tycho::cuda_math::mul(ca, cb);
  EXPECT_FLOAT_EQ(p.x, (a * b).real());
  EXPECT_FLOAT_EQ(p.y, (a * b).imag());
  const auto q = tycho::cuda_math::mul(tycho::cuda_math::conj(ca), cb);
  EXPECT_FLOAT_EQ(q.x, (std::conj(a) * b).real());
  EXPECT_FLOAT_EQ(q.y, (std::conj(a) * b).imag());
  EXPECT_FLOAT_EQ(tycho::cuda_math::norm(ca), std::norm(a));
}

// The per-pixel function the device kernel calls (amplitude_pixel.hpp), pixel by pixel, against
// the host loop (pixel_loss_loop.hpp): its masks, periods and per-pattern sums.
TEST(CudaMath, AmplitudePixelMatchesHostLoss) {
  const int64_t period = 37, patterns = 5, n = period * patterns;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.f, 2.f);
  std::vector<float> model(static_cast<size_t>(n)), measured(static_cast<size_t>(n)), host_grad(static_cast<size_t>(n));
  std::vector<uint8_t> mask(static_cast<size_t>(period));
  for (int64_t k = 0; k < n; ++k) {
    model[size_t(k)] = k % 11 == 0 ? 0.f : u(rng);
    measured[size_t(k)] = k % 13 == 0 ? 0.f : (k % period) % 17 == 0 ? INFINITY : 100.f * u(rng);
  }
  for (int64_t k = 0; k < period; ++k) mask[size_t(k)] = k % 17 == 0 ? 0 : 1;  // masked pixels hold inf
  const auto pixel = tycho::losses::amplitude_pixel<float>::for_patterns(0.013, period, 1e-2);
  const double host = tycho::losses::pixel_loss_sum(pixel, model.data(), measured.data(), mask.data(), period, n,
                                                    host_grad.data());
  double device_style = 0;
  for (int64_t k = 0; k < n; ++k) {
    const auto r = pixel(model[size_t(k)], measured[size_t(k)], mask[size_t(k % period)] != 0);
    EXPECT_EQ(r.dloss_dI, host_grad[size_t(k)]) << k;
    device_style += r.loss;
  }
  EXPECT_TRUE(std::isfinite(host));
  EXPECT_NEAR(device_style, host, 1e-5 * host);
}

// The device optimizers' element functions with the host's coefficients against the host steps.
TEST(CudaMath, OptimizerElementsMatchHostSteps) {
  const int64_t n = 101;
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> param(static_cast<size_t>(n)), grad(static_cast<size_t>(n));
  for (auto& v : param) v = g(rng);
  for (auto& v : grad) v = 1e-3f * g(rng);

  tycho::optimizers::adam_state host, coeffs_only;
  std::vector<float> host_param = param, dev_param = param, m(size_t(n), 0.f), v(size_t(n), 0.f);
  for (int step = 0; step < 3; ++step) {
    host.step(host_param.data(), grad.data(), n, 0.25f, 0.8);
    const auto c = coeffs_only.begin_step(0.25f, 0.8);
    for (int64_t i = 0; i < n; ++i)
      tycho::optimizers::adam_element(dev_param[size_t(i)], m[size_t(i)], v[size_t(i)], grad[size_t(i)], c);
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(dev_param[size_t(i)], host_param[size_t(i)]) << i;

  tycho::optimizers::sgd_state sgd;
  sgd.momentum = 0.9;
  std::vector<float> sgd_host = param, sgd_dev = param, velocity(size_t(n), 0.f);
  for (int step = 0; step < 3; ++step) {
    sgd.step(sgd_host.data(), grad.data(), n, 0.25f, 0.8);
    const auto c = sgd.coefficients(0.25f, 0.8);
    for (int64_t i = 0; i < n; ++i) tycho::optimizers::sgd_element(sgd_dev[size_t(i)], velocity[size_t(i)], grad[size_t(i)], c);
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(sgd_dev[size_t(i)], sgd_host[size_t(i)]) << i;
}

// The parity harness of the GPU tests, run with the cpu engine on both sides: checks the harness
// itself (set-up, batches, read-back, comparisons) on machines without a GPU.
TEST(CudaHarness, CpuAgainstItself) {
  expect_same_gradients("cpu", "cpu", 24, 24, false, false);
  expect_same_gradients("cpu", "cpu", 23, 18, true, false);
}

TEST(CudaHarness, HostOptimizersAgainstThemselves) {
  expect_optimizer_matches_host("cpu", "adam", "learning_rate = 0.01\n");
  expect_optimizer_matches_host("cpu", "sgd", "learning_rate = 0.5\nmomentum = 0.9\n");
}

// The 10-iteration comparison and the cropped odd-window data set, with the cpu engine as the
// candidate: checks both where no GPU is.
TEST(CudaHarness, TenIterationsOnOddWindowCpuAgainstItself) {
  tycho::test::temp_folder tmp;
  std::string why;
  const std::string data = tmp / "mos2_81x90.h5";
  ASSERT_TRUE(write_cropped_mos2(data, why)) << why;
  expect_ten_iterations_match(example_config(),
                              {"--set", "data.path=\"" + data + "\"", "--set", "data.scan_step_A=0.5", "--set",
                               "data.detector_pixel_invA=0.06"},
                              tmp, "cpu");
  auto rec = load_result(tmp / "cuda.zip");
  const auto& probe = rec.array("probe", "cuda.zip");
  ASSERT_EQ(probe.shape.size(), 3u);
  EXPECT_GE(probe.shape[1], 81);  // the host may pad the detector to a faster FFT size
  EXPECT_GE(probe.shape[2], 90);
  std::cout << "odd-window case: window " << probe.shape[1] << " x " << probe.shape[2] << "\n";
}

TEST(CudaEngine, WithoutDeviceFailsCleanly) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  tycho::test::temp_folder tmp;
  auto r = reconstruct(example_config(), {"--set", "reconstruct.engine=\"cuda\"", "--iterations", "1", "-o",
                                          tmp / "result.zip"});
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_FALSE(r.signalled) << r.describe();
  if (has_engine("cuda")) {
    EXPECT_NE(r.err.find("no CUDA device"), std::string::npos) << r.describe();
  } else {
    EXPECT_NE(r.err.find("'cuda'"), std::string::npos) << r.describe();  // unknown engine, named
  }
  EXPECT_FALSE(fs::exists(tmp / "result.zip"));
}

// Two GPUs in one process run as two ranks (threads); where two are not visible the request is
// refused, naming the reducer and the device, before any data is read, never run on one device.
TEST(CudaEngine, SeveralDevicesThatAreNotThereAreRefused) {
  tycho::test::temp_folder tmp;
  auto r = reconstruct(example_config(), {"--set", "reconstruct.engine=\"cuda\"", "--set", "reconstruct.devices=[0, 1]",
                                          "--iterations", "1", "-o", tmp / "result.zip"});
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  if (has_engine("cuda")) {
    EXPECT_NE(r.err.find("nccl reducer rank"), std::string::npos) << r.describe();
    EXPECT_NE(r.err.find("CUDA device"), std::string::npos) << r.describe();
    EXPECT_FALSE(fs::exists(tmp / "result.zip"));
  } else {
    EXPECT_NE(r.err.find("'cuda'"), std::string::npos) << r.describe();
  }
  // And a CPU engine asked for GPUs is refused too, naming the engine.
  auto c = reconstruct(example_config(), {"--set", "reconstruct.devices=[0, 1]", "--iterations", "1", "-o",
                                          tmp / "result.zip"});
  EXPECT_TRUE(c.exited_with(2)) << c.describe();
  EXPECT_NE(c.err.find("engine = \"cpu\" computes on the host"), std::string::npos) << c.describe();
}

// ================================================================== tests: need a GPU

TEST(CudaEngine, GradientsMatchCpuSquareEven) {
  REQUIRE_CUDA_DEVICE();
  expect_same_gradients("cpu", "cuda", 32, 32, false, false);
  expect_same_gradients("cpu", "cuda", 32, 32, false, true);
}

TEST(CudaEngine, GradientsMatchCpuOddNonSquareMasked) {
  REQUIRE_CUDA_DEVICE();
  expect_same_gradients("cpu", "cuda", 45, 38, true, false);
  expect_same_gradients("cpu", "cuda", 45, 38, true, true);
  expect_same_gradients("cpu", "cuda", 31, 47, false, true);
}

// The noise-model losses' kernels (plugins/losses/pixel_losses.cu) inside the engine: one
// batch's loss and gradients as the cpu engine's with the host loops, then 10 iterations.
TEST(CudaEngine, NoiseLossesMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  for (const char* loss : {"intensity", "poisson"}) {
    expect_same_gradients("cpu", "cuda", 45, 38, true, true, loss);
    tycho::test::temp_folder tmp;
    expect_ten_iterations_match(example_config(), {"--set", std::string("reconstruct.loss=") + loss}, tmp);
  }
}

TEST(CudaEngine, OptimizersMatchHost) {
  REQUIRE_CUDA_DEVICE();
  expect_optimizer_matches_host("cuda", "adam", "learning_rate = 0.01\n");
  expect_optimizer_matches_host("cuda", "sgd", "learning_rate = 0.5\nmomentum = 0.9\n");
}

TEST(CudaEngine, MoS2TenIterationsMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  tycho::test::temp_folder tmp;
  expect_ten_iterations_match(example_config(), {}, tmp);
}

TEST(CudaEngine, OddWindowTenIterationsMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  tycho::test::temp_folder tmp;
  std::string why;
  const std::string data = tmp / "mos2_81x90.h5";
  ASSERT_TRUE(write_cropped_mos2(data, why)) << why;
  expect_ten_iterations_match(example_config(),
                              {"--set", "data.path=\"" + data + "\"", "--set", "data.scan_step_A=0.5", "--set",
                               "data.detector_pixel_invA=0.06"},
                              tmp);
}

TEST(CudaEngine, DeterministicRepeats) {
  REQUIRE_CUDA_DEVICE();
  tycho::test::temp_folder tmp;
  std::vector<tycho::host::loaded_record> runs;
  for (const char* name : {"a.zip", "b.zip"}) {
    auto r = reconstruct(example_config(), {"--set", "reconstruct.engine=\"cuda\"", "--set",
                                            "reconstruct.deterministic=true", "--iterations", "3", "-o", tmp / name});
    ASSERT_TRUE(r.exited_with(0)) << r.describe();
    runs.push_back(load_result(tmp / name));
  }
  for (const char* name : {"object", "probe"}) {
    const auto& a = runs[0].array(name, "a.zip");
    const auto& b = runs[1].array(name, "b.zip");
    EXPECT_EQ(a.shape, b.shape) << name;
    EXPECT_TRUE(a.bytes == b.bytes) << name << " differs between two deterministic runs";
  }
}

// cudaMemcpy from libcudart loaded at run time (kind 4, cudaMemcpyDefault: unified addressing).
void copy_to_device(void* dst, const void* src, size_t bytes) {
  using fn = int (*)(void*, const void*, size_t, int);
  static const auto copy = reinterpret_cast<fn>(dlsym(tycho::test::open_cudart(), "cudaMemcpy"));
  ASSERT_NE(copy, nullptr);
  ASSERT_EQ(copy(dst, src, bytes, 4), 0) << "cudaMemcpy";
  // From pageable memory cudaMemcpy may return before the copy lands; the engine's stream is its own.
  using sync_fn = int (*)();
  static const auto sync = reinterpret_cast<sync_fn>(dlsym(tycho::test::open_cudart(), "cudaDeviceSynchronize"));
  ASSERT_NE(sync, nullptr);
  ASSERT_EQ(sync(), 0) << "cudaDeviceSynchronize";
}

// deterministic = true across devices: two engines (two devices' ranks; on a machine with one GPU
// both on it) each compute part of every batch, their int64 sums are added as ncclInt64 adds them
// and both finish the batch; object and probe gradients are then one engine's bits. The loss
// comes from the loss component's double atomics: equal to rounding only.
TEST(CudaEngine, DeterministicSumsOnTwoDevicesGiveOneDevicesBits) {
  REQUIRE_CUDA_DEVICE();
  synthetic_problem p(24, 20, 5, 8, false, 4321u);
  const std::string cfg = "batch_size = 16\ndeterministic = true\n";
  engine_run one("cuda", p, cfg), a("cuda", p, cfg, "amplitude", true), b("cuda", p, cfg, "amplitude", true);
  ASSERT_TRUE(one.ok() && a.ok() && b.ok()) << one.error() << a.error() << b.error();
  std::vector<int64_t> order(size_t(p.patterns));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  for (int k = 0; k < 2; ++k) {
    const std::vector<int64_t> batch(order.begin() + 16 * k, order.begin() + 16 * (k + 1));
    const double l1 = one.batch(batch);
    const std::vector<int64_t> mine_a(batch.begin(), batch.begin() + 7), mine_b(batch.begin() + 7, batch.end());
    int32_t again = 1;
    for (int attempt = 0; attempt < 4 && again == 1; ++attempt) {
      a.compute(mine_a);
      b.compute(mine_b);
      std::vector<int64_t> sa = a.read_sums(), sb = b.read_sums();
      ASSERT_EQ(sa.size(), sb.size());
      for (size_t i = 0; i < sa.size(); ++i) sa[i] = int64_t(uint64_t(sa[i]) + uint64_t(sb[i]));
      for (engine_run* r : {&a, &b})
        copy_to_device(r->tensor(TYCHO_TENSOR_FIXED_POINT_SUMS).data, sa.data(), sa.size() * sizeof(int64_t));
      const uint32_t flags = k == 1 ? TYCHO_FINISH_ENDS_ITERATION : 0u;
      again = a.finish(flags);
      EXPECT_EQ(b.finish(flags), again) << "the devices must decide alike";
    }
    ASSERT_EQ(again, 0) << "the sums did not settle";
    const double la = a.collect(), lb = b.collect();
    EXPECT_EQ(la, lb) << "batch " << k;
    EXPECT_NEAR(la, l1, 1e-9 * std::abs(l1)) << "batch " << k;
    for (auto id : {TYCHO_TENSOR_OBJECT_GRAD, TYCHO_TENSOR_PROBE_GRAD}) {
      const auto g1 = one.read(id), ga = a.read(id), gb = b.read(id);
      EXPECT_GT(norm_of(g1), 0);
      EXPECT_TRUE(std::memcmp(g1.data(), ga.data(), g1.size() * sizeof(cfloat)) == 0 && ga.size() == g1.size())
          << "batch " << k << ", tensor " << int(id) << ": two devices differ from one";
      EXPECT_TRUE(ga == gb) << "batch " << k << ", tensor " << int(id);
    }
  }
}

TEST(CudaEngine, MoS2AccuracyMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  tycho::test::temp_folder tmp;
  for (const char* engine : {"cpu", "cuda"}) {
    auto r = reconstruct(example_config(), {"--set", std::string("reconstruct.engine=\"") + engine + "\"", "-o",
                                            tmp / (std::string(engine) + ".zip")});
    ASSERT_TRUE(r.exited_with(0)) << r.describe();
  }
  const double cpu = pearson_of(tmp / "cpu.zip"), cuda = pearson_of(tmp / "cuda.zip");
  std::cout << "pearson after 100 iterations: cpu " << cpu << ", cuda " << cuda << "\n";
  ::testing::Test::RecordProperty("pearson_cuda", std::to_string(cuda));
  EXPECT_NEAR(cuda, cpu, 0.005);
  EXPECT_GE(cuda, 0.90);
}

}  // namespace
