// How far two complex64 results (object, probe) of one shape lie apart, for the tests that run one
// reconstruction on 1 and on N ranks.
#pragma once

#include <tycho/core/array.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>

namespace tycho::test {

// max_k |a_k − b_k| / max_k |a_k|: the largest difference as a share of a's largest |value| (0
// when a is all zeros and b equals it). Both hold complex64 values; the caller checks the shapes.
inline float largest_relative_difference(const tycho::owned_array& a, const tycho::owned_array& b) {
  const auto* x = reinterpret_cast<const std::complex<float>*>(a.bytes.data());
  const auto* y = reinterpret_cast<const std::complex<float>*>(b.bytes.data());
  float largest = 0, worst = 0;
  for (int64_t k = 0; k < a.count(); ++k) {
    largest = std::max(largest, std::abs(x[k]));
    worst = std::max(worst, std::abs(x[k] - y[k]));
  }
  return largest > 0 ? worst / largest : worst;
}

}  // namespace tycho::test
