// The cpu engine's deterministic sums ([reconstruct] deterministic = true; the default is false; the
// scheme: tycho/sdk/fixed_point.hpp) through the engine ABI, as the host drives them: one batch
// cut between two engines (two ranks, each with its share of the patterns, or every pattern) with
// their integer sums added as a reducer adds them, against one engine computing the whole batch:
// the same gradient and loss bits, in every path (grouped shifts by row-offset class, per
// position, slices and modes with the position gradient, float64, the Poisson loss) and for any
// thread count. The same through the whole runtime (ranks as threads, mpirun, engine threads):
// tests/test_local_ranks.cpp and tests/test_parallel.cpp.
#include <gtest/gtest.h>

#include <tycho/core/last_error.hpp>
#include <tycho/core/multislice.hpp>

#include <dlpack/dlpack.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "engine_under_test.hpp"

namespace {

using cd = std::complex<double>;

// A raster of rx × ry positions whose rows share their sub-pixel row offset (so the grouped path
// sums the probe by row-offset class: 3 classes for 12 positions), S slices, M modes.
struct raster_problem {
  static constexpr int64_t n0 = 20, n1 = 16, rx = 3, ry = 4, pad = 3;
  int64_t slices, modes, h = 0, w = 0, patterns = rx * ry;
  std::vector<float> targets;
  std::vector<double> positions;
  std::vector<cd> object, probe, propagator;
  raster_problem(int64_t s, int64_t m) : slices(s), modes(m) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    h = 2 * pad + n0 + 4 * (rx - 1) + 2;
    w = 2 * pad + n1 + 3 * (ry - 1) + 2;
    for (int64_t i = 0; i < rx; ++i)
      for (int64_t j = 0; j < ry; ++j) {
        positions.push_back(double(pad + n0 / 2) + 3.37 * double(i) + 0.25);  // δ0: one per row
        positions.push_back(double(pad + n1 / 2) + 2.91 * double(j) + 0.4 * u(rng));
      }
    std::vector<cd> coherent;
    for (int64_t a = 0; a < n0; ++a)
      for (int64_t b = 0; b < n1; ++b) {
        const double r2 = std::pow(double(a - n0 / 2) / n0, 2) + std::pow(double(b - n1 / 2) / n1, 2);
        coherent.push_back(std::exp(-14.0 * r2) * std::polar(1.0, 7.0 * r2));
      }
    probe = tycho::initial_probe_modes(coherent, n0, n1, modes, 0.3);
    for (int64_t k = 0; k < slices * h * w; ++k) object.push_back(std::polar(0.9 + 0.1 * u(rng), 0.6 * u(rng)));
    for (int64_t k = 0; k < patterns * n0 * n1; ++k) targets.push_back(float(10.0 * u(rng)));
    propagator = tycho::fresnel_propagator(n0, n1, 0.05, 0.06, 0.025, 12.0);
  }
};

// The tensors of one engine's share: patterns [first, first + count) of `p`, with every rank's
// positions beside them (tycho_engine_setup::scan_positions_px).
struct share {
  int64_t first, count;
  int64_t target_shape[3], position_shape[2], scan_shape[2], object_shape[3], probe_shape[3],
      propagator_shape[2] = {raster_problem::n0, raster_problem::n1};
  DLTensor targets{}, positions{}, scan{}, object{}, probe{}, propagator{};
  share(raster_problem& p, int64_t first_, int64_t count_) : first(first_), count(count_) {
    const int64_t m = p.n0 * p.n1;
    int64_t ts[3] = {count, p.n0, p.n1}, ps[2] = {count, 2}, ss[2] = {p.patterns, 2}, os[3] = {p.slices, p.h, p.w},
            pr[3] = {p.modes, p.n0, p.n1};
    std::copy(ts, ts + 3, target_shape);
    std::copy(ps, ps + 2, position_shape);
    std::copy(ss, ss + 2, scan_shape);
    std::copy(os, os + 3, object_shape);
    std::copy(pr, pr + 3, probe_shape);
    targets = {p.targets.data() + first * m, {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, target_shape, nullptr, 0};
    positions = {p.positions.data() + 2 * first, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, position_shape, nullptr, 0};
    scan = {p.positions.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, scan_shape, nullptr, 0};
    object = {p.object.data(), {kDLCPU, 0}, 3, {kDLComplex, 128, 1}, object_shape, nullptr, 0};
    probe = {p.probe.data(), {kDLCPU, 0}, 3, {kDLComplex, 128, 1}, probe_shape, nullptr, 0};
    propagator = {p.propagator.data(), {kDLCPU, 0}, 2, {kDLComplex, 128, 1}, propagator_shape, nullptr, 0};
  }
  tycho_engine_setup setup(const raster_problem& p, bool position_gradient, bool host_finishes) const {
    tycho_engine_setup s{};
    s.targets = &targets;
    s.target_scale = 1.0 / (5.0 * double(p.n0 * p.n1));
    s.positions_px = &positions;
    s.object_init = &object;
    s.probe_init = &probe;
    s.slice_propagator = p.slices > 1 ? &propagator : nullptr;
    s.slice_thickness_A = p.slices > 1 ? 12.0 : 0.0;
    s.position_gradient = position_gradient ? 1 : 0;
    s.host_finishes_batches = host_finishes ? 1 : 0;
    s.scan_positions_px = &scan;
    s.scan_first = first;
    return s;
  }
};

struct variant {
  const char* name;
  int64_t slices, modes;
  std::string reconstruct;  // besides threads and batch_size
  bool position_gradient = false;
  const char* loss = "amplitude";
};

std::vector<variant> variants() {
  return {{"grouped, by class", 1, 1, ""},
          {"grouped, 2 modes", 1, 2, ""},
          {"per position", 1, 1, "shift_groups = false\n"},
          {"2 slices, 2 modes, position gradient", 2, 2, "", true},
          {"float64", 1, 1, "precision = \"float64\"\n"},
          {"poisson", 1, 1, "", false, "poisson"}};
}

using engine = tycho::test::engine_under_test;

std::unique_ptr<engine> make(const variant& v, const share& sh, const raster_problem& p, int threads,
                             bool host_finishes) {
  const std::string cfg =
      v.reconstruct + "deterministic = true\nthreads = " + std::to_string(threads) + "\nbatch_size = 12\n";
  return std::make_unique<engine>("cpu", cfg, sh.setup(p, v.position_gradient, host_finishes), v.loss);
}

// Two "ranks" finish a batch as the driver does: each computes its share, their sums are added
// (an int64 all-reduce), both finish; again until the sums settle. Returns the batch's loss.
double two_ranks(engine& a, engine& b, const std::vector<int64_t>& mine_a, const std::vector<int64_t>& mine_b,
                 uint32_t flags) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    a.batch(mine_a);
    b.batch(mine_b);
    DLTensor sa = a.tensor(TYCHO_TENSOR_FIXED_POINT_SUMS), sb = b.tensor(TYCHO_TENSOR_FIXED_POINT_SUMS);
    EXPECT_EQ(sa.dtype.code, kDLInt);
    EXPECT_EQ(sa.dtype.bits, 64);
    EXPECT_EQ(sa.shape[0], sb.shape[0]) << "the ranks' sums must be laid out alike";
    auto* xa = static_cast<int64_t*>(sa.data);
    auto* xb = static_cast<int64_t*>(sb.data);
    for (int64_t k = 0; k < sa.shape[0]; ++k) {  // as the reducer: two's complement, exact
      const int64_t total = int64_t(uint64_t(xa[k]) + uint64_t(xb[k]));
      xa[k] = total;
      xb[k] = total;
    }
    double la = 0, lb = 0;
    const int32_t again_a = a.finish(flags, la), again_b = b.finish(flags, lb);
    EXPECT_EQ(again_a, again_b) << "the ranks must decide alike";
    if (again_a == 0) {
      EXPECT_EQ(la, lb);
      return la;
    }
  }
  ADD_FAILURE() << "the sums did not settle";
  return 0;
}

TEST(DeterministicSums, ABatchCutBetweenTwoRanksGivesOneRanksBits) {
  for (const variant& v : variants()) {
    SCOPED_TRACE(v.name);
    raster_problem p(v.slices, v.modes);
    const share whole(p, 0, p.patterns), left(p, 0, 5), right(p, 5, p.patterns - 5);
    auto one = make(v, whole, p, 1, false);  // one rank, finishing its batches itself
    auto a = make(v, left, p, 2, true), b = make(v, right, p, 3, true);
    ASSERT_TRUE(one->ok() && a->ok() && b->ok()) << tycho::last_error();
    EXPECT_EQ(one->get_status(TYCHO_TENSOR_FIXED_POINT_SUMS), TYCHO_OK);
    // Two batches of an iteration, in a shuffled order, as the driver cuts them.
    const std::vector<std::vector<int64_t>> batches = {{7, 2, 11, 0, 5, 9}, {3, 10, 1, 8, 4, 6}};
    for (std::size_t k = 0; k < batches.size(); ++k) {
      const double l1 = one->batch(batches[k]);
      std::vector<int64_t> mine_a, mine_b;
      for (int64_t j : batches[k]) (j < 5 ? mine_a : mine_b).push_back(j < 5 ? j : j - 5);
      const double l2 = two_ranks(*a, *b, mine_a, mine_b, k + 1 == batches.size() ? TYCHO_FINISH_ENDS_ITERATION : 0);
      EXPECT_EQ(l1, l2) << "batch " << k;
      for (engine* r : {a.get(), b.get()})
        for (auto id : {TYCHO_TENSOR_OBJECT_GRAD, TYCHO_TENSOR_PROBE_GRAD})
          EXPECT_TRUE(one->bytes(id) == r->bytes(id)) << "batch " << k << ", tensor " << int(id);
      if (v.position_gradient) {  // each rank's own patterns' rows
        const auto g1 = one->bytes(TYCHO_TENSOR_POSITIONS_GRAD), ga = a->bytes(TYCHO_TENSOR_POSITIONS_GRAD),
                   gb = b->bytes(TYCHO_TENSOR_POSITIONS_GRAD);
        EXPECT_TRUE(std::equal(ga.begin(), ga.end(), g1.begin()));
        EXPECT_TRUE(std::equal(gb.begin(), gb.end(), g1.begin() + ga.size()));
      }
    }
  }
}

// The same batch with 1, 2 and 4 threads, and cut anywhere between two ranks that each hold every
// pattern ([parallel] sharding = "replicated"): the same bits.
TEST(DeterministicSums, ThreadsAndReplicatedRanksGiveTheSameBits) {
  const variant v = variants()[0];
  raster_problem p(v.slices, v.modes);
  const share whole(p, 0, p.patterns);
  const std::vector<int64_t> batch = {4, 9, 1, 11, 6, 0, 8, 3};
  auto reference = make(v, whole, p, 1, false);
  ASSERT_TRUE(reference->ok()) << tycho::last_error();
  const double l1 = reference->batch(batch);
  for (int threads : {2, 4}) {
    auto e = make(v, whole, p, threads, false);
    EXPECT_EQ(e->batch(batch), l1) << threads << " threads";
    for (auto id : {TYCHO_TENSOR_OBJECT_GRAD, TYCHO_TENSOR_PROBE_GRAD})
      EXPECT_TRUE(e->bytes(id) == reference->bytes(id)) << threads << " threads, tensor " << int(id);
  }
  for (std::size_t cut : {std::size_t(1), std::size_t(3), std::size_t(7)}) {
    auto a = make(v, whole, p, 2, true), b = make(v, whole, p, 1, true);
    const std::vector<int64_t> mine_a(batch.begin(), batch.begin() + long(cut)), mine_b(batch.begin() + long(cut), batch.end());
    EXPECT_EQ(two_ranks(*a, *b, mine_a, mine_b, 0), l1) << "cut at " << cut;
    for (auto id : {TYCHO_TENSOR_OBJECT_GRAD, TYCHO_TENSOR_PROBE_GRAD})
      EXPECT_TRUE(a->bytes(id) == reference->bytes(id)) << "cut at " << cut << ", tensor " << int(id);
  }
}

// deterministic = false, and the default (the float sums cost less: bench/RESULTS.md, issue 31):
// float sums, no integer tensor, no finish_batch to call.
TEST(DeterministicSums, FloatSumsKeepNoIntegers) {
  raster_problem p(1, 1);
  const share whole(p, 0, p.patterns);
  for (const char* cfg : {"deterministic = false\n", ""}) {
    SCOPED_TRACE(cfg);
    engine e("cpu", cfg, whole.setup(p, false, true));
    ASSERT_TRUE(e.ok()) << tycho::last_error();
    EXPECT_EQ(e.get_status(TYCHO_TENSOR_FIXED_POINT_SUMS), TYCHO_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(tycho::last_error()).find("keeps no fixed-point sums"), std::string::npos)
        << tycho::last_error();
    EXPECT_GT(e.batch({0, 1, 2}), 0);  // the loss comes with the batch, as before
  }
}

// A host that hands the engine a batch larger than the batch_size its grids were sized for is
// refused, naming the key, rather than risking a sum past int64's range.
TEST(DeterministicSums, ABatchBeyondBatchSizeIsRefused) {
  raster_problem p(1, 1);
  const share whole(p, 0, p.patterns);
  engine e("cpu", "deterministic = true\nbatch_size = 4\n", whole.setup(p, false, true));
  ASSERT_TRUE(e.ok()) << tycho::last_error();
  EXPECT_EQ(e.try_batch({0, 1, 2, 3, 4}), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("batch_size = 4"), std::string::npos) << tycho::last_error();
  EXPECT_EQ(e.try_batch({0, 1, 2, 3}), TYCHO_OK) << tycho::last_error();
}

}  // namespace
