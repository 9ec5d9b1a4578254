// Padding the detector to a larger window ([preprocess] pad_detector, pad_detector_to) and the
// warning for window sizes that transform slowly (core/include/tycho/core/fft_size.hpp).
//
// Padding adds pixels at the high frequencies, symmetrically about the zero-frequency pixel,
// so the centred convention still holds afterwards: in a centred pattern of N pixels the zero
// frequency sits at index ⌊N/2⌋ (numpy's fftshift, for odd N too) and the frequencies run from
// −⌊N/2⌋ to ⌈N/2⌉ − 1. Padding N → N' puts
//     before = ⌊N'/2⌋ − ⌊N/2⌋   pixels in front,   after = N' − N − before   behind,
// so the zero frequency lands at ⌊N'/2⌋ and every measured pixel keeps its frequency:
//     97 → 98:  before 1, after 0 (the added pixel is frequency −49, the new Nyquist row)
//     96 → 97:  before 0, after 1 (frequency +48)
//     96 → 100: before 2, after 2;  97 → 100: before 2, after 1.
// The added pixels are masked (mask 0): the loss leaves them out, so the model is free there.
// The detector pixel dk stays the same, so the real-space window grows and its pixel
// dx = 1 / (N' dk) shrinks.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <tycho/core/array.hpp>
#include <tycho/core/fft_size.hpp>

#include "tycho/host/dataset.hpp"

namespace toml {
inline namespace v3 {
class table;
}
}  // namespace toml

namespace tycho::host {

// fft_frequency (FFT-order index → frequency): tycho/core/fft_size.hpp.
using tycho::fft_frequency;
// FFT-order index of frequency f on an n-point axis (f taken modulo n).
inline int64_t fft_index(int64_t f, int64_t n) { return ((f % n) + n) % n; }
// Whether an n-point centred axis has frequency f: −⌊n/2⌋ ≤ f ≤ ⌈n/2⌉ − 1.
inline bool has_frequency(int64_t f, int64_t n) { return f >= -(n / 2) && f <= (n + 1) / 2 - 1; }

// What the [preprocess] table asks for.
struct detector_padding_request {
  bool pad = false;                     // pad_detector = true, or pad_detector_to given
  std::array<int64_t, 2> to{0, 0};      // pad_detector_to; 0: the next fast FFT size
};

// The largest padded window per axis (pad_detector_to): 2^16 px, beyond any detector; checked
// before the window's product is formed.
inline constexpr int64_t k_most_window_px = int64_t(1) << 16;

// Reads `pad_detector` (bool, default false) and `pad_detector_to` ([N0, N1], integers from 1
// to k_most_window_px)
// from [preprocess]; `origin` names the config in errors. pad_detector = false together with
// pad_detector_to is refused as contradictory.
detector_padding_request read_detector_padding(const toml::table& preprocess, const std::string& origin);

// Pixels added in front of and behind a centred axis of n pixels padded to n_padded ≥ n.
std::array<int64_t, 2> centred_padding(int64_t n, int64_t n_padded);

// What was done, for the engine (mask) and the result's manifest.
struct detector_padding {
  std::array<int64_t, 2> detector{0, 0};  // (N0, N1) as measured
  std::array<int64_t, 2> window{0, 0};    // (N0', N1') handed to the engine
  std::array<std::array<int64_t, 2>, 2> before_after{};  // per axis, in centred order
  // The engine's mask: (N0', N1') uint8 in FFT natural order (like the targets): 1 = a valid
  // measured pixel, 0 = padding or a bad pixel (the dataset's detector_mask, padded). Empty when
  // nothing was padded or masked (the engine then gets no mask: all pixels valid).
  std::vector<uint8_t> mask;
  bool padded() const { return window != detector; }
};

// Pads one centred (n0, n1) pattern into a centred (m0, m1) one, zeros outside.
void pad_centred_pattern(const float* in, int64_t n0, int64_t n1, float* out, int64_t m0, int64_t m1);

// Pads one pattern in FFT natural order: every pixel keeps its frequency, i.e. the same as
// ifftshift(pad_centred_pattern(fftshift(in))), exactly, without the shifts.
void pad_fft_order_pattern(const float* in, int64_t n0, int64_t n1, float* out, int64_t m0, int64_t m1);
void pad_fft_order_pattern(const uint16_t* in, int64_t n0, int64_t n1, uint16_t* out, int64_t m0, int64_t m1);

// The (m0, m1) mask, FFT natural order, of an (n0, n1) detector padded as above.
std::vector<uint8_t> padding_mask_fft_order(int64_t n0, int64_t n1, int64_t m0, int64_t m1);

// The same for a uint8 mask (the added pixels 0).
void pad_fft_order_mask(const uint8_t* in, int64_t n0, int64_t n1, uint8_t* out, int64_t m0, int64_t m1);

// Pads the dataset's targets (FFT natural order, as read_dataset leaves them) to `window` and
// sets d.n0, d.n1 to it; d.info.detector_shape keeps the measured shape, and the mean total
// intensity is unchanged (the padding is zero). The mask is the padding's combined with
// d.detector_mask (bad pixels), which is left as it is. Throws for a window smaller than the
// detector.
detector_padding pad_detector(dataset& d, std::array<int64_t, 2> window);

// The result's "mask" member: the engine's mask (N0', N1') uint8 in the centred order, like the
// probe's window (1 = used by the loss, 0 = masked: padding or bad pixel); all ones when the
// engine got no mask.
owned_array result_mask(const detector_padding& p);

// The window the request asks for, for a detector of (n0, n1): the detector itself when no
// padding is asked for, else pad_detector_to or the next fast FFT sizes.
std::array<int64_t, 2> padded_window(const detector_padding_request& r, int64_t n0, int64_t n1);

// One warning line per axis whose window size is not a fast FFT size, naming the axis, the
// size, the next fast size and how to pad (`window_given`: pad_detector_to set the window, so
// the advice names that key only); the texts (empty: nothing to warn about).
std::vector<std::string> slow_fft_size_warnings(int64_t n0, int64_t n1, bool window_given = false);

// read_detector_padding + pad_detector + the warnings, logged as "[preprocess]": the one call
// the session makes after reading the data and before any geometry.
detector_padding apply_detector_padding(dataset& d, const toml::table& preprocess, const std::string& origin);

}  // namespace tycho::host
