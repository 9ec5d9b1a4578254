// Sums of doubles that are the same whatever order and grouping adds them (threads, ranks): each
// term rounded to a grid q = 2^k first, so every partial sum is an integer multiple of q below
// 2^53 q, a double exactly. Used where one rank's result must be the bits of several ranks'
// (core/src/position_correction.cpp: the positions' mean step; core/src/scan_refinement.cpp: the
// scan map's slopes).
#pragma once

#include <algorithm>
#include <cmath>

namespace tycho {

// The finest grid on which any sum of at most `terms` values, each of magnitude at most
// 2^top_exponent (std::frexp's exponent of the largest), is exact in a double:
// 2^(top_exponent − 52 + ⌈log2 terms⌉ + 1). A term is then at most 2^(51 − ⌈log2 terms⌉) grid
// steps, and the sum of all of them at most 2^51; the rounding costs a term at most half a step,
// 2^-(52 − ⌈log2 terms⌉) of the largest term.
inline double exact_sum_quantum(int top_exponent, double terms) {
  const int bits = int(std::ceil(std::log2(std::max(terms, 1.0)))) + 1;
  return std::ldexp(1.0, top_exponent - 52 + bits);
}

}  // namespace tycho
