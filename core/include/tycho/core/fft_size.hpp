// FFT sizes that transform fast: n = 2^a · 3^b · 5^c · 7^d ("7-smooth").
//
// Why it matters: FFTW and cuFFT build their transforms from codelets for small radices
// (cuFFT documents 2^a·3^b·5^c·7^d as its optimised sizes; FFTW also has 11 and 13). A size with
// a larger prime factor falls back to a generic algorithm — Rader's in FFTW, Bluestein's
// chirp-z (three transforms of a padded length) in cuFFT — that is several times slower per
// point. Measured with FFTW 3 (single precision, FFTW_ESTIMATE as the CPU engine plans, one
// core): a 97 x 97 transform took 306 µs against 45 µs for 98 x 98, and 127 x 127 339 µs
// against 48 µs for 128 x 128; a whole MoS2 iteration (768 patterns, CPU engine, two cores) took
// 1.57 s with a 97 x 97 window and 0.33 s with 98 x 98, 1.91 s with 127 x 127 and 0.43 s with
// 128 x 128. The engine transforms the window several times per pattern and
// iteration, so a detector of a slow size slows the whole reconstruction; padding it to the
// next fast size ([preprocess] pad_detector) costs a few per cent more pixels instead. The
// criterion here is cuFFT's, the stricter one, so a size called fast is fast for both.

#pragma once

#include <cstdint>

namespace tycho {

// The largest n next_fast_fft_size accepts: its answer, at most the next power of two,
// then stays below 2^62.
inline constexpr int64_t k_max_fft_size_query = int64_t(1) << 62;

// True when n ≥ 1 has no prime factor other than 2, 3, 5 and 7 (1 counts as fast: the
// identity transform). False for n ≤ 0.
bool is_fast_fft_size(int64_t n);

// The smallest fast size ≥ n (1 for n ≤ 1): 96 → 96, 97 → 98, 121 → 125, 127 → 128.
// Throws tycho::error (TYCHO_ERR_INVALID_ARGUMENT) for n > k_max_fft_size_query.
int64_t next_fast_fft_size(int64_t n);

// Frequency of FFT-order index i of an n-point axis (the engines' convention): 0, 1, ...,
// ⌈n/2⌉ − 1, then −⌊n/2⌋, ..., −1.
inline constexpr int64_t fft_frequency(int64_t i, int64_t n) { return i < (n + 1) / 2 ? i : i - n; }

}  // namespace tycho
