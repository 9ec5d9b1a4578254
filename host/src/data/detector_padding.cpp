#include "data/detector_padding.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/fft_size.hpp>
#include <tycho/sdk/checked.hpp>

#include <toml++/toml.h>

#include <algorithm>
#include <optional>

#include "tycho/host/log.hpp"
#include "tycho/host/run_plan.hpp"

namespace tycho::host {

namespace {
void check_window(int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
  if (n0 < 1 || n1 < 1 || m0 < n0 || m1 < n1)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "cannot pad a ", n0, " x ", n1, " detector to ", m0, " x ", m1,
         ": the padded window must be at least as large as the detector on each axis");
}
}  // namespace

detector_padding_request read_detector_padding(const toml::table& pre, const std::string& origin) {
  detector_padding_request r;
  std::optional<bool> pad;
  if (auto node = pre["pad_detector"]) {
    if (!node.is_boolean())
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] pad_detector must be true or false");
    pad = node.value<bool>();
    r.pad = *pad;
  }
  if (auto node = pre["pad_detector_to"]) {
    const toml::array* arr = node.as_array();
    // Bounded before any arithmetic: [2^62, 2^62] overflowed the window's product.
    const auto in_range = [&](std::size_t i) {
      return (*arr)[i].is_integer() && *(*arr)[i].value<int64_t>() >= 1 &&
             *(*arr)[i].value<int64_t>() <= k_most_window_px;
    };
    if (!arr || arr->size() != 2 || !in_range(0) || !in_range(1))
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin, ": [preprocess] pad_detector_to must be two integers [N0, N1] from 1 to ",
           k_most_window_px, ", the padded window in pixels", arr && arr->size() == 2 ? cat(", got ", *arr) : "");
    if (pad && !*pad)
      fail(TYCHO_ERR_INVALID_ARGUMENT, origin,
           ": [preprocess] pad_detector = false contradicts pad_detector_to; remove one of them");
    r.pad = true;
    r.to = {*(*arr)[0].value<int64_t>(), *(*arr)[1].value<int64_t>()};
  }
  return r;
}

std::array<int64_t, 2> centred_padding(int64_t n, int64_t n_padded) {
  check_window(n, 1, n_padded, 1);
  const int64_t before = n_padded / 2 - n / 2;
  return {before, n_padded - n - before};
}

void pad_centred_pattern(const float* in, int64_t n0, int64_t n1, float* out, int64_t m0, int64_t m1) {
  check_window(n0, n1, m0, m1);
  const int64_t b0 = centred_padding(n0, m0)[0], b1 = centred_padding(n1, m1)[0];
  std::fill(out, out + m0 * m1, 0.f);
  for (int64_t i = 0; i < n0; ++i)
    std::copy(in + i * n1, in + (i + 1) * n1, out + (i + b0) * m1 + b1);
}

namespace {
template <class T>
void pad_fft_order(const T* in, int64_t n0, int64_t n1, T* out, int64_t m0, int64_t m1) {
  check_window(n0, n1, m0, m1);
  std::fill(out, out + m0 * m1, T(0));
  for (int64_t i = 0; i < n0; ++i) {
    const T* src = in + i * n1;
    T* dst = out + fft_index(fft_frequency(i, n0), m0) * m1;
    // Non-negative frequencies stay at the front, negative ones move to the back.
    const int64_t positive = (n1 + 1) / 2;
    std::copy(src, src + positive, dst);
    std::copy(src + positive, src + n1, dst + m1 - (n1 - positive));
  }
}
}  // namespace

void pad_fft_order_pattern(const float* in, int64_t n0, int64_t n1, float* out, int64_t m0, int64_t m1) {
  pad_fft_order(in, n0, n1, out, m0, m1);
}

void pad_fft_order_pattern(const uint16_t* in, int64_t n0, int64_t n1, uint16_t* out, int64_t m0, int64_t m1) {
  pad_fft_order(in, n0, n1, out, m0, m1);
}

void pad_fft_order_mask(const uint8_t* in, int64_t n0, int64_t n1, uint8_t* out, int64_t m0, int64_t m1) {
  pad_fft_order(in, n0, n1, out, m0, m1);
}

std::vector<uint8_t> padding_mask_fft_order(int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
  check_window(n0, n1, m0, m1);
  std::vector<uint8_t> mask(std::size_t(m0 * m1), 0);
  for (int64_t i = 0; i < m0; ++i) {
    const int64_t f0 = fft_frequency(i, m0);
    if (!has_frequency(f0, n0)) continue;
    for (int64_t j = 0; j < m1; ++j) {
      const int64_t f1 = fft_frequency(j, m1);
      mask[std::size_t(i * m1 + j)] = uint8_t(has_frequency(f1, n1));
    }
  }
  return mask;
}

detector_padding pad_detector(dataset& d, std::array<int64_t, 2> window) {
  detector_padding p;
  p.detector = {d.n0, d.n1};
  p.window = window;
  check_window(d.n0, d.n1, window[0], window[1]);
  p.before_after = {centred_padding(d.n0, window[0]), centred_padding(d.n1, window[1])};
  if (!p.padded()) {
    p.mask = d.detector_mask;  // bad pixels only (empty: none)
    return p;
  }

  const int64_t n = d.n0 * d.n1, m = window[0] * window[1];
  if (!d.streamed) {
    // The padded copy of this rank's patterns, bounded by this machine's memory before it is
    // asked for (a window of 1e5 x 1e5 asked the allocator for 30 TB).
    const int64_t bytes = sdk::checked_size_or_fail({d.patterns, window[0], window[1], d.counts.empty() ? 4 : 2},
                                                    "[preprocess] pad_detector_to: the padded patterns",
                                                    TYCHO_ERR_INVALID_ARGUMENT);
    if (const uint64_t have = physical_memory_bytes(); have > 0 && uint64_t(bytes) > have)
      fail(TYCHO_ERR_OUT_OF_MEMORY, "[preprocess] pad_detector_to = [", window[0], ", ", window[1], "]: the ",
           d.patterns, " patterns padded to ", window[0], " x ", window[1], " pixels need ",
           human_bytes(uint64_t(bytes)), ", more than this machine's ", human_bytes(have),
           " of memory; pad to a smaller window (the detector is ", d.n0, " x ", d.n1, ")");
  }
  if (!d.streamed && !d.counts.empty()) {  // uint16 counts (read_dataset's as_counts)
    std::vector<uint16_t> padded(std::size_t(d.patterns * m));
    for (int64_t j = 0; j < d.patterns; ++j)
      pad_fft_order(d.counts.data() + j * n, d.n0, d.n1, padded.data() + j * m, window[0], window[1]);
    d.counts = std::move(padded);
  } else if (!d.streamed) {  // streamed targets are padded as they are read (target_stream)
    std::vector<float> padded(std::size_t(d.patterns * m));
    for (int64_t j = 0; j < d.patterns; ++j)
      pad_fft_order_pattern(d.targets.data() + j * n, d.n0, d.n1, padded.data() + j * m, window[0], window[1]);
    d.targets = std::move(padded);
  }
  if (d.detector_mask.empty()) {
    p.mask = padding_mask_fft_order(d.n0, d.n1, window[0], window[1]);
  } else {
    p.mask.resize(std::size_t(m));
    pad_fft_order_mask(d.detector_mask.data(), d.n0, d.n1, p.mask.data(), window[0], window[1]);
  }
  d.n0 = window[0];
  d.n1 = window[1];
  return p;
}

owned_array result_mask(const detector_padding& p) {
  const int64_t m0 = p.window[0], m1 = p.window[1];
  std::vector<uint8_t> centred(std::size_t(m0 * m1), 1);
  if (!p.mask.empty())
    for (int64_t i = 0; i < m0; ++i)  // fftshift: FFT index i goes to (i + ⌊m/2⌋) mod m
      for (int64_t j = 0; j < m1; ++j)
        centred[std::size_t(((i + m0 / 2) % m0) * m1 + (j + m1 / 2) % m1)] = p.mask[std::size_t(i * m1 + j)];
  return owned_array::from_vector("mask", DLDataType{kDLUInt, 8, 1}, {m0, m1}, centred);
}

std::array<int64_t, 2> padded_window(const detector_padding_request& r, int64_t n0, int64_t n1) {
  if (!r.pad) return {n0, n1};
  std::array<int64_t, 2> w{r.to[0] > 0 ? r.to[0] : next_fast_fft_size(n0),
                           r.to[1] > 0 ? r.to[1] : next_fast_fft_size(n1)};
  if (w[0] < n0 || w[1] < n1)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "[preprocess] pad_detector_to = [", w[0], ", ", w[1],
         "] is smaller than the ", n0, " x ", n1,
         " detector; padding only enlarges the window (give sizes >= the detector)");
  return w;
}

std::vector<std::string> slow_fft_size_warnings(int64_t n0, int64_t n1, bool window_given) {
  std::vector<std::string> lines;
  const int64_t n[2] = {n0, n1};
  for (int axis = 0; axis < 2; ++axis) {
    if (is_fast_fft_size(n[axis])) continue;
    const int64_t fast0 = is_fast_fft_size(n0) ? n0 : next_fast_fft_size(n0);
    const int64_t fast1 = is_fast_fft_size(n1) ? n1 : next_fast_fft_size(n1);
    lines.push_back(cat("detector axis ", axis, " has ", n[axis], " pixels", window_given ? " after padding" : "",
                        ", not a fast FFT size (2^a 3^b 5^c 7^d; other sizes transform several times slower): ",
                        "the next fast size is ", next_fast_fft_size(n[axis]), "; set [preprocess] ",
                        window_given ? "" : "pad_detector = true (or ", "pad_detector_to = [", fast0, ", ",
                        fast1, "]", window_given ? "" : ")", " to pad the patterns with masked pixels"));
  }
  return lines;
}

detector_padding apply_detector_padding(dataset& d, const toml::table& preprocess, const std::string& origin) {
  const detector_padding_request request = read_detector_padding(preprocess, origin);
  detector_padding p = pad_detector(d, padded_window(request, d.n0, d.n1));
  if (p.padded())
    log_info("preprocess", cat("detector ", p.detector[0], " x ", p.detector[1], " padded to ", p.window[0],
                               " x ", p.window[1], " (axis 0: ", p.before_after[0][0], " + ",
                               p.before_after[0][1], ", axis 1: ", p.before_after[1][0], " + ",
                               p.before_after[1][1], " masked pixels)"));
  for (const auto& line : slow_fft_size_warnings(d.n0, d.n1, request.to[0] > 0)) log_warning("preprocess", line);
  return p;
}

}  // namespace tycho::host
