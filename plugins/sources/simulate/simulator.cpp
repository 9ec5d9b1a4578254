#include "simulator.hpp"

#include <tycho/sdk/optics.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <new>
#include <string>

#include "npy_phase.hpp"
#include "random.hpp"

namespace tycho::simulate {

using sdk::cat;
using sdk::fail;

namespace {

constexpr double k_pi = 3.14159265358979323846;

// The FFTW planner is not thread-safe: FFTW's own lock (fftw3f_threads) serialises every plan
// made or destroyed in the process, by any plugin; installed when this library is loaded, before
// it makes a plan. The transforms run from many threads through the new-array execute functions.
[[maybe_unused]] const bool k_planner_thread_safe = [] {
  fftwf_make_planner_thread_safe();
  return true;
}();

fft_buffer make_buffer(int64_t n) {
  auto* p = static_cast<cfloat*>(fftwf_malloc(sizeof(cfloat) * std::size_t(n)));
  if (p == nullptr) throw std::bad_alloc();
  return fft_buffer(p);
}

int64_t frequency(int64_t i, int64_t n) { return i < (n + 1) / 2 ? i : i - n; }

// e[k] = exp(−2πi f(k) δ / n) for the n DFT frequencies of natural order: multiplying a
// spectrum by it shifts the image by +δ pixels (the cpu engine's ramp).
void fill_ramp(std::vector<cfloat>& e, int64_t n, double delta) {
  e.resize(std::size_t(n));
  for (int64_t k = 0; k < n; ++k) {
    double phase = -2.0 * k_pi * double(frequency(k, n)) * delta / double(n);
    e[std::size_t(k)] = cfloat(float(std::cos(phase)), float(std::sin(phase)));
  }
}

// Normalised Gaussian taps exp(−x²/2σ²), x = −r..r, r = int(4σ + 0.5).
std::vector<double> gaussian_taps(double sigma) {
  const int64_t r = int64_t(4.0 * sigma + 0.5);
  std::vector<double> t(std::size_t(2 * r + 1));
  double sum = 0;
  for (int64_t x = -r; x <= r; ++x) sum += t[std::size_t(x + r)] = std::exp(-0.5 * double(x * x) / (sigma * sigma));
  for (auto& v : t) v /= sum;
  return t;
}

// Periodic Gaussian filter of an (h, w) image along one axis (stride 1 within a row for axis 1).
void filter_axis(std::vector<double>& img, int64_t h, int64_t w, int axis, double sigma, int threads) {
  const auto taps = gaussian_taps(sigma);
  const int64_t r = int64_t(taps.size() / 2);
  const int64_t lines = axis == 0 ? w : h, n = axis == 0 ? h : w;
  const int64_t step = axis == 0 ? w : 1, line_step = axis == 0 ? 1 : w;
#pragma omp parallel num_threads(threads)
  {
    std::vector<double> line(static_cast<std::size_t>(n));
#pragma omp for schedule(static)
    for (int64_t l = 0; l < lines; ++l) {
      double* p = img.data() + l * line_step;
      for (int64_t k = 0; k < n; ++k) line[std::size_t(k)] = p[k * step];
      for (int64_t k = 0; k < n; ++k) {
        double acc = 0;
        for (int64_t x = -r; x <= r; ++x) {
          int64_t q = (k + x) % n;
          if (q < 0) q += n;
          acc += taps[std::size_t(x + r)] * line[std::size_t(q)];
        }
        p[k * step] = acc;
      }
    }
  }
}

}  // namespace

struct simulator::scratch {
  fft_buffer in, shifted_probe, wave;
  std::vector<cfloat> ramp0, ramp1;
  explicit scratch(int64_t m) : in(make_buffer(m)), shifted_probe(make_buffer(m)), wave(make_buffer(m)) {}
};

simulator::simulator(settings s) : s_(std::move(s)) {
  n0_ = s_.detector[0];
  n1_ = s_.detector[1];
  const int64_t m = n0_ * n1_;
  const sdk::window_sampling sampling{{n0_, n1_}, {s_.pixel_invA, s_.pixel_invA}};
  const sdk::probe_optics optics{s_.energy_eV, s_.semiangle_mrad, s_.C10_A};
  pixel_A_[0] = sampling.dx_A(0);
  pixel_A_[1] = sampling.dx_A(1);

  // The aperture must lie inside the detector (the runtime's own check, named by key here).
  const double lambda = sdk::wavelength_A(s_.energy_eV);
  const double k_aperture = s_.semiangle_mrad * 1e-3 / lambda;
  const double k_nyquist = 0.5 * double(std::min(n0_, n1_)) * s_.pixel_invA;
  if (k_aperture >= k_nyquist)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'semiangle_mrad' in [data]: a ", s_.semiangle_mrad,
         " mrad aperture at ", s_.energy_eV, " eV reaches ", k_aperture,
         " Å⁻¹, beyond the detector's ±", k_nyquist, " Å⁻¹ (detector_shape ", n0_, " x ", n1_,
         ", detector_pixel_invA ", s_.pixel_invA, "); use a smaller semiangle, more or larger pixels");

  // The probe: the runtime's formula (tycho/sdk/optics.hpp), Σ|P|² = 1, centred in its window.
  auto probe = sdk::make_probe(optics, sampling, 1.0);
  const double edge = sdk::probe_edge_fraction(probe, n0_, n1_, 0.05);
  if (edge > 0.1)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'C10_A' in [data]: the probe does not fit the window: ",
         edge * 100, " % of its intensity lies within 5 % of the window's edge (window ",
         double(n0_) * pixel_A_[0], " x ", double(n1_) * pixel_A_[1], " Å, C10 = ", s_.C10_A,
         " Å, semiangle ", s_.semiangle_mrad, " mrad); reduce the defocus or use a larger detector_shape");

  // The object grid: core's layout_object (core/src/geometry.cpp) with scan_origin_A = 0.
  int64_t shape[2];
  for (int a = 0; a < 2; ++a) {
    const double extent = double(s_.scan[a] - 1) * s_.step_A / pixel_A_[a];
    first_px_[a] = double(s_.padding_px + s_.detector[a] / 2) + 0.0;
    shape[a] = int64_t(std::ceil(extent + 1.0)) + s_.detector[a] + 2 * s_.padding_px + 1;
  }
  h_ = shape[0];
  w_ = shape[1];
  if (double(h_) * double(w_) > 5e8)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "config keys 'scan_shape' and 'scan_step_A' in [data]: the simulated object would be ",
         h_, " x ", w_, " px of ", pixel_A_[0], " Å (scan ", s_.scan[0], " x ", s_.scan[1], " at ", s_.step_A,
         " Å); at most 5e8 pixels are supported");
  make_object();

  // FFTW plans once; then F[P] / M.
  auto a = make_buffer(m), b = make_buffer(m);
  {
    auto* i = reinterpret_cast<fftwf_complex*>(a.get());
    auto* o = reinterpret_cast<fftwf_complex*>(b.get());
    const unsigned flags = FFTW_ESTIMATE | FFTW_DESTROY_INPUT;
    forward_ = fftwf_plan_dft_2d(int(n0_), int(n1_), i, o, FFTW_FORWARD, flags);
    backward_ = fftwf_plan_dft_2d(int(n0_), int(n1_), i, o, FFTW_BACKWARD, flags);
  }
  if (forward_ == nullptr || backward_ == nullptr) {
    if (forward_) fftwf_destroy_plan(forward_);
    if (backward_) fftwf_destroy_plan(backward_);
    fail(TYCHO_ERR_INTERNAL, "simulate: FFTW could not plan a ", n0_, " x ", n1_, " transform");
  }
  std::copy(probe.begin(), probe.end(), a.get());
  probe_spectrum_ = make_buffer(m);
  fftwf_execute_dft(forward_, reinterpret_cast<fftwf_complex*>(a.get()),
                    reinterpret_cast<fftwf_complex*>(probe_spectrum_.get()));
  const float inv_m = 1.0f / float(m);
  for (int64_t k = 0; k < m; ++k) probe_spectrum_[k] *= inv_m;
}

simulator::~simulator() {
  if (forward_) fftwf_destroy_plan(forward_);
  if (backward_) fftwf_destroy_plan(backward_);
}

void simulator::make_object() {
  const int threads = s_.threads > 0 ? s_.threads : omp_get_max_threads();
  std::vector<double> phase(std::size_t(h_ * w_));
  if (s_.object == "npy") {
    phase_map map = read_npy_phase(s_.npy_path);
    const int64_t mh = map.shape[0], mw = map.shape[1];
    if (mh < h_ || mw < w_)
      sdk::log(TYCHO_LOG_INFO, "simulate",
               cat("the phase map '", s_.npy_path, "' (", mh, " x ", mw, ") is smaller than the object (",
                   h_, " x ", w_, " px): tiled periodically"));
    for (int64_t r = 0; r < h_; ++r)
      for (int64_t c = 0; c < w_; ++c)
        phase[std::size_t(r * w_ + c)] = map.phase[std::size_t((r % mh) * mw + c % mw)];
  } else {
    // Smooth random phase: white noise, a periodic Gaussian filter of σ = feature_size_A, then
    // scaled to [0, phase_max_rad].
    rng gen(s_.seed, stream::object, 0);
    for (auto& v : phase) v = gen.normal();
    filter_axis(phase, h_, w_, 0, s_.feature_size_A / pixel_A_[0], threads);
    filter_axis(phase, h_, w_, 1, s_.feature_size_A / pixel_A_[1], threads);
    auto [lo, hi] = std::minmax_element(phase.begin(), phase.end());
    const double mn = *lo, range = *hi - *lo;
    for (auto& v : phase) v = range > 0 ? (v - mn) / range * s_.phase_max_rad : 0.0;
  }
  object_.resize(phase.size());
  for (std::size_t k = 0; k < phase.size(); ++k) object_[k] = cfloat(std::polar(1.0, phase[k]));
}

void simulator::pattern(int64_t index, scratch& t, float* out) const {
  const int64_t m = n0_ * n1_;
  const int64_t i = index / s_.scan[1], j = index % s_.scan[1];
  // Probe centre (layout_object), window corner, integer and sub-pixel parts (the cpu engine).
  const double c0 = first_px_[0] + double(i) * s_.step_A / pixel_A_[0];
  const double c1 = first_px_[1] + double(j) * s_.step_A / pixel_A_[1];
  const double t0 = c0 - double(n0_ / 2), t1 = c1 - double(n1_ / 2);
  const int64_t i0 = int64_t(std::floor(t0)), j0 = int64_t(std::floor(t1));
  fill_ramp(t.ramp0, n0_, t0 - double(i0));
  fill_ramp(t.ramp1, n1_, t1 - double(j0));

  cfloat* in = t.in.get();
  cfloat* pj = t.shifted_probe.get();
  cfloat* wave = t.wave.get();
  for (int64_t a = 0; a < n0_; ++a)
    for (int64_t b = 0; b < n1_; ++b)
      in[a * n1_ + b] = probe_spectrum_[a * n1_ + b] * t.ramp0[std::size_t(a)] * t.ramp1[std::size_t(b)];
  fftwf_execute_dft(backward_, reinterpret_cast<fftwf_complex*>(in), reinterpret_cast<fftwf_complex*>(pj));

  const cfloat* obj = object_.data() + i0 * w_ + j0;
  for (int64_t a = 0; a < n0_; ++a)
    for (int64_t b = 0; b < n1_; ++b) in[a * n1_ + b] = pj[a * n1_ + b] * obj[a * w_ + b];
  fftwf_execute_dft(forward_, reinterpret_cast<fftwf_complex*>(in), reinterpret_cast<fftwf_complex*>(wave));

  // |Ψ|² with the unitary DFT, written centred (fftshift: natural index a goes to (a + N/2) % N).
  const float inv_m = 1.0f / float(m);
  for (int64_t a = 0; a < n0_; ++a) {
    float* row = out + ((a + n0_ / 2) % n0_) * n1_;
    for (int64_t b = 0; b < n1_; ++b) row[(b + n1_ / 2) % n1_] = std::norm(wave[a * n1_ + b]) * inv_m;
  }
  if (s_.noisy()) {
    rng gen(s_.seed, stream::noise, uint64_t(index));
    const double counts = s_.counts_per_pattern();
    for (int64_t k = 0; k < m; ++k) out[k] = float(gen.poisson(double(out[k]) * counts));
  }
}

void simulator::read(int64_t first, int64_t count, float* dst) const {
  const int64_t m = n0_ * n1_;
  int threads = s_.threads > 0 ? s_.threads : omp_get_max_threads();
  threads = int(std::max<int64_t>(1, std::min<int64_t>(threads, count)));
  std::string error;
  tycho_status status = TYCHO_OK;
  std::mutex error_mutex;
  auto record = [&](tycho_status st, const std::string& what) {
    std::lock_guard lock(error_mutex);
    if (status == TYCHO_OK) {
      status = st;
      error = what;
    }
  };
  // Every thread reaches the work-sharing loop (its barrier), even one whose buffers failed.
#pragma omp parallel num_threads(threads)
  {
    std::unique_ptr<scratch> t;
    try {
      t = std::make_unique<scratch>(m);
    } catch (const std::exception&) {
      record(TYCHO_ERR_OUT_OF_MEMORY, "simulate: out of host memory for the FFT buffers");
    }
#pragma omp for schedule(static)
    for (int64_t p = 0; p < count; ++p) {
      if (!t) continue;
      try {
        pattern(first + p, *t, dst + p * m);
      } catch (const std::exception& e) {
        record(TYCHO_ERR_INTERNAL, cat("simulate: pattern ", first + p, ": ", e.what()));
      }
    }
  }
  if (status != TYCHO_OK) fail(status, error);
}

}  // namespace tycho::simulate
