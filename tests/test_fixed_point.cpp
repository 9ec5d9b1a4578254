// The deterministic sums' arithmetic (tycho/sdk/fixed_point.hpp): the rounding to a grid, the
// exact sum of doubles, the grids chosen before each batch and checked after it, and the header
// every rank reads alike. The engines' use of it is checked in tests/test_deterministic_sums.cpp.
#include <gtest/gtest.h>

#include <tycho/sdk/fixed_point.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

namespace fp = tycho::sdk::fixed_point;

uint64_t bits(double x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

TEST(FixedPoint, QuantiseRoundsToTheNearestIntegerTiesToEven) {
  EXPECT_EQ(fp::quantise(0.0), 0);
  EXPECT_EQ(fp::quantise(-0.0), 0);
  EXPECT_EQ(fp::quantise(2.5), 2);
  EXPECT_EQ(fp::quantise(3.5), 4);
  EXPECT_EQ(fp::quantise(-2.5), -2);
  EXPECT_EQ(fp::quantise(-2.6), -3);
  EXPECT_EQ(fp::quantise(0.49999999999999994), 0);
  // Up to the documented limit, |scaled| < 2^51, the integer is exact.
  const double big = std::ldexp(1.0, 51) - 1.0;
  EXPECT_EQ(fp::quantise(big), (int64_t(1) << 51) - 1);
  EXPECT_EQ(fp::quantise(-big), -((int64_t(1) << 51) - 1));
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const double v = std::uniform_real_distribution<double>(-1e15, 1e15)(rng);
    EXPECT_EQ(fp::quantise(v), int64_t(std::nearbyint(v))) << v;
  }
}

TEST(FixedPoint, ValueBitsLeaveTheSumOfEveryContributionInRange) {
  EXPECT_EQ(fp::value_bits_for(1), 51);
  EXPECT_EQ(fp::value_bits_for(128), 51);    // 128 · 2^51 = 2^58 < 2^62
  EXPECT_EQ(fp::value_bits_for(2048), 51);   // 2^11 · 2^51 = 2^62: the margin's edge
  EXPECT_EQ(fp::value_bits_for(2049), 50);
  EXPECT_EQ(fp::value_bits_for(1 << 20), 42);
  for (int64_t n : {int64_t(1), int64_t(300), int64_t(5000), int64_t(1) << 30})
    EXPECT_LE(std::ldexp(double(n), fp::value_bits_for(n)), std::ldexp(1.0, 62)) << n;
}

// Σ of doubles, exactly: the same bits in any order, and the right value where it is known.
TEST(FixedPoint, ExactSumIsTheSameInAnyOrderAndExact) {
  fp::exact_sum a;
  for (double x : {0.1, 0.2, -0.3}) a.add(x);
  EXPECT_EQ(a.value(), 2.7755575615628914e-17);  // the doubles' exact sum (float addition: 5.55e-17)
  fp::exact_sum b;
  for (double x : {1e300, 1.0, -1e300, 4.9406564584124654e-324}) b.add(x);
  EXPECT_EQ(b.value(), 1.0);
  fp::exact_sum tiny;
  tiny.add(-4.9406564584124654e-324);
  EXPECT_EQ(tiny.value(), -4.9406564584124654e-324);
  fp::exact_sum none;
  EXPECT_EQ(bits(none.value()), bits(0.0));
  // Integers below 2^53 in any order: their exact total, which a long double holds too.
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> v;
    long double exact = 0;
    for (int i = 0; i < 50; ++i) {
      const double x = double(int64_t(rng() % (uint64_t(1) << 40)) - (int64_t(1) << 39)) * std::ldexp(1.0, -20);
      v.push_back(x);
      exact += x;
    }
    fp::exact_sum s;
    for (double x : v) s.add(x);
    EXPECT_EQ(s.value(), double(exact));
  }
  // Any doubles, shuffled and split between two partial sums (two threads or ranks): same bits.
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<double> v;
    for (int i = 0; i < 40; ++i)
      v.push_back(std::ldexp(std::uniform_real_distribution<double>(-1, 1)(rng), int(rng() % 400) - 200));
    fp::exact_sum one;
    for (double x : v) one.add(x);
    std::shuffle(v.begin(), v.end(), rng);
    fp::exact_sum left, right;
    const std::size_t cut = rng() % v.size();
    for (std::size_t i = 0; i < v.size(); ++i) (i < cut ? left : right).add(v[i]);
    left.add(right);
    ASSERT_EQ(bits(one.value()), bits(left.value())) << trial;
  }
  fp::exact_sum nan;
  nan.add(1.0);
  nan.add(std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(std::isnan(nan.value()));
  EXPECT_EQ(nan.non_finite(), 1);
}

// Two ranks' exact sums as a sums tensor holds them, added as int64 by a reducer.
TEST(FixedPoint, ExactSumsAddAsIntegers) {
  fp::exact_sum a, b, both;
  for (double x : {3.25, -1e-9, 7e10}) {
    a.add(x);
    both.add(x);
  }
  for (double x : {-7e10, 2.0 / 3.0}) {
    b.add(x);
    both.add(x);
  }
  std::vector<int64_t> wa(fp::exact_sum::k_words), wb(fp::exact_sum::k_words);
  a.store(wa.data());
  b.store(wb.data());
  for (std::size_t i = 0; i < wa.size(); ++i) wa[i] += wb[i];
  EXPECT_EQ(bits(fp::exact_sum::load(wa.data()).value()), bits(both.value()));
}

std::vector<fp::tensor_report> report(int e0, int e1) {
  std::vector<fp::tensor_report> r(2);
  r[0] = {true, e0, 0};
  r[1] = {true, e1, 0};
  return r;
}

// The grids: fixed before a batch, confirmed or raised by its sums, the same for the same batches.
TEST(FixedPoint, GridsHoldTheirBatchOrAreRaisedAndComputedAgain) {
  fp::grid_schedule g(2, 128);
  EXPECT_TRUE(g.starts_chain());
  // The first batch starts a chain: its grid must be the coarse grid of its own largest value
  // (a multiple of 16, 2^2..2^17 above it): the guess is wrong here, so once more.
  EXPECT_FALSE(g.settle(report(-10, -30), false));
  EXPECT_EQ(g.grid(0) % 16, 0);
  for (int t = 0; t < 2; ++t) {
    const int e = t == 0 ? -10 : -30;
    EXPECT_GE(g.grid(t) + g.value_bits() - (e + 1), 2);
    EXPECT_LE(g.grid(t) + g.value_bits() - (e + 1), 17);
  }
  EXPECT_TRUE(g.settle(report(-10, -30), false));  // the same batch again: it holds
  EXPECT_FALSE(g.starts_chain());
  // Within the chain: 2^3 above the last batch's largest value.
  EXPECT_EQ(g.grid(0), -10 + 1 + 3 - g.value_bits());
  EXPECT_TRUE(g.settle(report(-9, -30), false));   // twice as large: still within the headroom
  EXPECT_EQ(g.grid(0), -9 + 1 + 3 - g.value_bits());
  // A value beyond the grid: the sums are not trusted, the grid fits the value found, again.
  const int before = g.grid(0);
  EXPECT_FALSE(g.settle(report(-9 + 4, -30), false));
  EXPECT_GT(g.grid(0), before);
  EXPECT_LE(-9 + 4 + 1, g.grid(0) + g.value_bits());
  EXPECT_TRUE(g.settle(report(-9 + 4, -30), true));  // the iteration's last batch
  EXPECT_TRUE(g.starts_chain());
  EXPECT_EQ(g.recomputed(), 2);
  // Non-finite values: the batch stands (the engine writes NaN), the grids do not move.
  const int kept = g.grid(0);
  std::vector<fp::tensor_report> bad = report(-5, -30);
  bad[1].non_finite = 3;
  EXPECT_TRUE(g.settle(bad, false));
  EXPECT_EQ(g.grid(0), kept);
}

// What makes a resumed run quantise as one that never stopped: the grid that starts an
// iteration depends on that iteration's first batch alone, whatever came before.
TEST(FixedPoint, TheFirstGridOfAnIterationDependsOnItsBatchAlone) {
  fp::grid_schedule long_run(2, 128), resumed(2, 128);
  for (int e : {-40, -12, -3, -25}) {  // earlier iterations, whose grids a resumed run never saw
    while (!long_run.settle(report(e, e - 5), false)) {
    }
    while (!long_run.settle(report(e + 1, e - 5), true)) {
    }
  }
  while (!long_run.settle(report(-18, -22), false)) {
  }
  while (!resumed.settle(report(-18, -22), false)) {
  }
  // The iteration's first batch settled on the same grids, so every later one follows alike.
  for (int e : {-17, -19, -14})
    for (auto* g : {&long_run, &resumed})
      while (!g->settle(report(e, -22), false)) {
      }
  EXPECT_EQ(long_run.grid(0), resumed.grid(0));
  EXPECT_EQ(long_run.grid(1), resumed.grid(1));
}

// The header: ranks' parts summed as int64 give the largest value over every rank, and a rank
// that quantised on another grid is noticed.
TEST(FixedPoint, HeaderSummedOverRanksGivesTheLargestValue) {
  fp::grid_schedule g(2, 128);
  const std::size_t n = fp::header::words(2);
  std::vector<int64_t> r0(n, 0), r1(n, 0);
  const double scale0 = fp::scale_of(g.grid(0)), scale1 = fp::scale_of(g.grid(1));
  const double largest0[2] = {std::ldexp(1.0, -30) * scale0, 0.0};  // tensor 1: nothing on rank 0
  const double largest1[2] = {std::ldexp(1.0, -28) * scale0, std::ldexp(1.5, -40) * scale1};
  const int64_t none[2] = {0, 0};
  fp::exact_sum l0, l1;
  l0.add(0.25);
  l1.add(0.5);
  fp::header::write(r0.data(), g, largest0, none, l0);
  fp::header::write(r1.data(), g, largest1, none, l1);
  for (std::size_t i = 0; i < n; ++i) r0[i] += r1[i];
  bool same = false;
  const auto reports = fp::header::read(r0.data(), g, same);
  EXPECT_TRUE(same);
  EXPECT_TRUE(reports[0].any);
  EXPECT_EQ(reports[0].max_exponent, -28);
  EXPECT_TRUE(reports[1].any);
  EXPECT_EQ(reports[1].max_exponent, -40);
  EXPECT_EQ(fp::header::loss(r0.data(), 2).value(), 0.75);
  // A rank on another grid: the sum of the grids is not ranks × this one's.
  std::vector<int64_t> other(n, 0);
  fp::grid_schedule g2(2, 128);
  EXPECT_FALSE(g2.settle(report(10, 10), false));  // g2's grids move
  fp::header::write(other.data(), g2, largest0, none, l0);
  std::vector<int64_t> mine(n, 0);
  fp::header::write(mine.data(), g, largest0, none, l0);
  for (std::size_t i = 0; i < n; ++i) mine[i] += other[i];
  (void)fp::header::read(mine.data(), g, same);
  EXPECT_FALSE(same);
}

}  // namespace
