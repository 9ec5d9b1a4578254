// Fast FFT sizes (core/include/tycho/core/fft_size.hpp): 7-smooth numbers and the next one up.
#include <gtest/gtest.h>

#include <tycho/core/error.hpp>
#include <tycho/core/fft_size.hpp>

#include <cstdint>
#include <vector>

namespace {

// By definition, with nothing shared with the implementation: trial division by every prime.
bool brute_force_fast(int64_t n) {
  if (n < 1) return false;
  for (int64_t p = 2; p * p <= n || n > 1; ++p) {
    if (p > n) break;
    while (n % p == 0) {
      if (p > 7) return false;
      n /= p;
    }
  }
  return n == 1;
}

TEST(FftSize, KnownValues) {
  using tycho::is_fast_fft_size;
  using tycho::next_fast_fft_size;
  EXPECT_TRUE(is_fast_fft_size(1));
  EXPECT_TRUE(is_fast_fft_size(96));    // 2^5·3, the MoS2 detector
  EXPECT_TRUE(is_fast_fft_size(98));    // 2·7^2
  EXPECT_TRUE(is_fast_fft_size(100));   // 2^2·5^2
  EXPECT_TRUE(is_fast_fft_size(125));   // 5^3
  EXPECT_TRUE(is_fast_fft_size(128));
  EXPECT_FALSE(is_fast_fft_size(97));   // prime
  EXPECT_FALSE(is_fast_fft_size(121));  // 11^2
  EXPECT_FALSE(is_fast_fft_size(127));  // prime
  EXPECT_FALSE(is_fast_fft_size(0));
  EXPECT_FALSE(is_fast_fft_size(-8));

  EXPECT_EQ(next_fast_fft_size(96), 96);
  EXPECT_EQ(next_fast_fft_size(97), 98);
  EXPECT_EQ(next_fast_fft_size(127), 128);
  EXPECT_EQ(next_fast_fft_size(121), 125);
  EXPECT_EQ(next_fast_fft_size(1), 1);
  EXPECT_EQ(next_fast_fft_size(0), 1);
  EXPECT_EQ(next_fast_fft_size(-5), 1);
  EXPECT_EQ(next_fast_fft_size(11), 12);
  EXPECT_EQ(next_fast_fft_size(13), 14);
  EXPECT_EQ(next_fast_fft_size(257), 270);     // 2·3^3·5
  EXPECT_EQ(next_fast_fft_size(509), 512);
  EXPECT_EQ(next_fast_fft_size(1021), 1024);
  EXPECT_EQ(next_fast_fft_size(1025), 1029);   // 3·7^3
  // 2^20 + 1: the next fast size, checked against the definition, then by value.
  const int64_t big = (int64_t(1) << 20) + 1;
  const int64_t next = next_fast_fft_size(big);
  EXPECT_GT(next, big);
  EXPECT_LT(next, int64_t(1) << 21);
  EXPECT_TRUE(brute_force_fast(next)) << next;
  for (int64_t m = big; m < next; ++m) ASSERT_FALSE(brute_force_fast(m)) << m << " < " << next;
  EXPECT_EQ(next, 1049760);  // 2^5·3^8·5
}

// Every n up to 10,000: the predicate matches trial division, and the next fast size is the
// first n' ≥ n that trial division calls fast.
TEST(FftSize, AgreesWithBruteForceUpTo10000) {
  constexpr int64_t limit = 10000;
  std::vector<int64_t> next(limit + 2);
  int64_t upcoming = 10080;  // 2^5·3^2·5·7, the first fast size above 10,000
  ASSERT_TRUE(brute_force_fast(upcoming));
  for (int64_t n = limit + 1; n < upcoming; ++n) ASSERT_FALSE(brute_force_fast(n)) << n;
  for (int64_t n = limit + 1; n >= 1; --n) {
    if (brute_force_fast(n)) upcoming = n;
    next[std::size_t(n)] = upcoming;
  }
  int64_t fast_count = 0;
  for (int64_t n = 1; n <= limit; ++n) {
    ASSERT_EQ(tycho::is_fast_fft_size(n), brute_force_fast(n)) << n;
    ASSERT_EQ(tycho::next_fast_fft_size(n), next[std::size_t(n)]) << n;
    fast_count += brute_force_fast(n);
  }
  EXPECT_EQ(fast_count, 338);  // the 7-smooth (humble) numbers ≤ 10^4, OEIS A002473
}

TEST(FftSize, LargeValuesDoNotOverflow) {
  const int64_t top = tycho::k_max_fft_size_query;  // 2^62
  EXPECT_EQ(tycho::next_fast_fft_size(top), top);
  EXPECT_TRUE(tycho::is_fast_fft_size(top));
  EXPECT_FALSE(tycho::is_fast_fft_size(top - 1));  // 2^62 − 1 = 3 · 715827883 · 2147483647
  const int64_t near = (int64_t(1) << 61) + 1;
  const int64_t n = tycho::next_fast_fft_size(near);
  EXPECT_TRUE(tycho::is_fast_fft_size(n));
  EXPECT_GE(n, near);
  EXPECT_LE(n, top);
  EXPECT_THROW(tycho::next_fast_fft_size(top + 1), tycho::error);
}

}  // namespace
