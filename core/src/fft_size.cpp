#include "tycho/core/fft_size.hpp"

#include <tycho/core/error.hpp>

namespace tycho {

bool is_fast_fft_size(int64_t n) {
  if (n < 1) return false;
  for (int64_t p : {2, 3, 5, 7})
    while (n % p == 0) n /= p;
  return n == 1;
}

int64_t next_fast_fft_size(int64_t n) {
  if (n <= 1) return 1;
  if (n > k_max_fft_size_query)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "next_fast_fft_size: ", n, " is larger than 2^62");
  // Every 7^d·5^c·3^b below the current best, completed by the smallest power of two that
  // reaches n. The best starts at the next power of two (≤ 2^62), and each product stays below
  // it before it is multiplied, so nothing overflows.
  int64_t best = 1;
  while (best < n) best *= 2;
  for (int64_t p7 = 1; p7 < best; p7 = p7 > best / 7 ? best : p7 * 7)
    for (int64_t p5 = p7; p5 < best; p5 = p5 > best / 5 ? best : p5 * 5)
      for (int64_t p3 = p5; p3 < best; p3 = p3 > best / 3 ? best : p3 * 3) {
        int64_t v = p3;
        while (v < n) v *= 2;  // v < n ≤ 2^62 before doubling
        if (v < best) best = v;
      }
  return best;
}

}  // namespace tycho
