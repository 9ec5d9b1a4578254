#include "fft_plan.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <new>
#include <string>

namespace tycho::cpu {
namespace {
// FFTW's own planner lock (fftw3f_threads, fftw3_threads) serialises every plan made or
// destroyed in the process, by any plugin; installed when this library is loaded, before it
// makes a plan.
[[maybe_unused]] const bool k_planner_thread_safe = [] {
  fftwf_make_planner_thread_safe();
  fftw_make_planner_thread_safe();
  return true;
}();

// Wisdom import and export are not covered by FFTW's planner hook: this plugin's wisdom sessions
// (and the plans made from them) take this lock as well.
std::mutex& planner_mutex() {
  static std::mutex m;
  return m;
}

// The two FFTW interfaces behind one set of names.
void* fft_malloc(float*, std::size_t bytes) { return fftwf_malloc(bytes); }
void* fft_malloc(double*, std::size_t bytes) { return fftw_malloc(bytes); }
fftwf_plan plan_2d(float*, int n0, int n1, std::complex<float>* in, std::complex<float>* out, int sign,
                   unsigned flags) {
  return fftwf_plan_dft_2d(n0, n1, reinterpret_cast<fftwf_complex*>(in), reinterpret_cast<fftwf_complex*>(out),
                           sign, flags);
}
fftw_plan plan_2d(double*, int n0, int n1, std::complex<double>* in, std::complex<double>* out, int sign,
                  unsigned flags) {
  return fftw_plan_dft_2d(n0, n1, reinterpret_cast<fftw_complex*>(in), reinterpret_cast<fftw_complex*>(out),
                          sign, flags);
}
// `howmany` 1-D transforms of length n, element stride `stride`, `dist` apart.
fftwf_plan plan_1d_many(float*, int n, int howmany, int stride, int dist, std::complex<float>* in,
                        std::complex<float>* out, int sign, unsigned flags) {
  return fftwf_plan_many_dft(1, &n, howmany, reinterpret_cast<fftwf_complex*>(in), nullptr, stride, dist,
                             reinterpret_cast<fftwf_complex*>(out), nullptr, stride, dist, sign, flags);
}
fftw_plan plan_1d_many(double*, int n, int howmany, int stride, int dist, std::complex<double>* in,
                       std::complex<double>* out, int sign, unsigned flags) {
  return fftw_plan_many_dft(1, &n, howmany, reinterpret_cast<fftw_complex*>(in), nullptr, stride, dist,
                            reinterpret_cast<fftw_complex*>(out), nullptr, stride, dist, sign, flags);
}
int import_wisdom(float*, const char* path) { return fftwf_import_wisdom_from_filename(path); }
int import_wisdom(double*, const char* path) { return fftw_import_wisdom_from_filename(path); }
int export_wisdom(float*, const char* path) { return fftwf_export_wisdom_to_filename(path); }
int export_wisdom(double*, const char* path) { return fftw_export_wisdom_to_filename(path); }
void destroy_plan(fftwf_plan p) { fftwf_destroy_plan(p); }
void destroy_plan(fftw_plan p) { fftw_destroy_plan(p); }
void execute(fftwf_plan p, std::complex<float>* in, std::complex<float>* out) {
  fftwf_execute_dft(p, reinterpret_cast<fftwf_complex*>(in), reinterpret_cast<fftwf_complex*>(out));
}
void execute(fftw_plan p, std::complex<double>* in, std::complex<double>* out) {
  fftw_execute_dft(p, reinterpret_cast<fftw_complex*>(in), reinterpret_cast<fftw_complex*>(out));
}
// This machine, for the wisdom file's name: the CPU model and a hash of its feature flags (the
// SIMD codelets a plan names), so a home folder shared by different machines keeps one file each.
std::string machine_key() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "cpu", flags;
  while (std::getline(in, line)) {
    auto value = [&] { auto c = line.find(':'); return c == std::string::npos ? std::string() : line.substr(c + 1); };
    if (line.rfind("model name", 0) == 0 && model == "cpu") model = value();
    if (line.rfind("flags", 0) == 0 && flags.empty()) flags = value();
  }
  std::string name;
  for (char c : model)
    if (std::isalnum(static_cast<unsigned char>(c))) name += c;
    else if (!name.empty() && name.back() != '-') name += '-';
  while (!name.empty() && name.back() == '-') name.pop_back();
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : flags) h = (h ^ c) * 16777619u;
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", h);
  return name + "-" + hex;
}
}  // namespace

std::string fft_wisdom_folder() {
  if (const char* d = std::getenv("TYCHO_FFT_WISDOM_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return std::string(x) + "/tycho";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/tycho";
  return {};
}

template <class Real>
std::string fft_wisdom_path(int64_t n0, int64_t n1) {
  std::string folder = fft_wisdom_folder();
  if (folder.empty()) return {};
  return folder + "/fftw-" + (sizeof(Real) == 4 ? "f32-" : "f64-") + std::to_string(n0) + "x" + std::to_string(n1) +
         "-" + machine_key() + ".wisdom";
}

// FFTW_MEASURE plans made once per machine, window and precision and kept as FFTW wisdom, so
// that every later process makes the same plans (bit-identical results), under an exclusive
// lock on the file so that two processes starting at once do not both measure (and pick
// different plans). Without a usable cache folder, FFTW_ESTIMATE: plans measured afresh in every
// process could differ between runs, and bit-identical runs come first.
template <class Real>
class wisdom_session {
 public:
  wisdom_session(bool measure, int64_t n0, int64_t n1) {
    if (!measure) return;
    measure_ = false;  // until the file is locked
    path_ = fft_wisdom_path<Real>(n0, n1);
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
    fd_ = ::open((path_ + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      path_.clear();
      return;
    }
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) {
        close_lock();
        path_.clear();
        return;
      }
    measure_ = true;
    std::lock_guard lock(planner_mutex());
    imported_ = import_wisdom(static_cast<Real*>(nullptr), path_.c_str()) != 0;
  }
  // The planner flag: FFTW_MEASURE when the wisdom file is locked, else FFTW_ESTIMATE.
  unsigned rigor() const { return measure_ ? FFTW_MEASURE : FFTW_ESTIMATE; }
  ~wisdom_session() {
    if (measured_ && !path_.empty()) {
      std::lock_guard lock(planner_mutex());
      const std::string tmp = path_ + ".tmp";
      if (export_wisdom(static_cast<Real*>(nullptr), tmp.c_str()) != 0) std::rename(tmp.c_str(), path_.c_str());
      else std::remove(tmp.c_str());
    }
    close_lock();
  }
  wisdom_session(const wisdom_session&) = delete;
  wisdom_session& operator=(const wisdom_session&) = delete;

  // make(extra_flags) plans; from the file's wisdom alone when it has it, else measured (and saved).
  template <class Make>
  auto plan(Make make) {
    if (!measure_) return make(0u);
    if (imported_) {
      auto p = make(FFTW_WISDOM_ONLY);
      if (p != nullptr) return p;
    }
    measured_ = true;
    return make(0u);
  }

 private:
  void close_lock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock
    fd_ = -1;
  }
  std::string path_;
  int fd_ = -1;
  bool measure_ = false, imported_ = false, measured_ = false;
};

template <>
void fftw_deleter<float>::operator()(std::complex<float>* p) const {
  fftwf_free(p);
}
template <>
void fftw_deleter<double>::operator()(std::complex<double>* p) const {
  fftw_free(p);
}

template <class Real>
fft_buffer<Real> make_fft_buffer(int64_t n) {
  auto* p = static_cast<std::complex<Real>*>(fft_malloc(static_cast<Real*>(nullptr),
                                                        sizeof(std::complex<Real>) * std::size_t(n)));
  if (p == nullptr) throw std::bad_alloc();
  return fft_buffer<Real>(p);
}

template <class Real>
fft_plan_2d<Real>::fft_plan_2d(int64_t n0, int64_t n1, bool measure) {
  auto in = make_fft_buffer<Real>(n0 * n1), out = make_fft_buffer<Real>(n0 * n1);
  // Out-of-place transforms may destroy their input: callers only pass scratch buffers.
  wisdom_session<Real> wisdom(measure, n0, n1);
  unsigned flags = wisdom.rigor() | FFTW_DESTROY_INPUT;
  std::lock_guard lock(planner_mutex());
  Real* tag = nullptr;
  forward_ = wisdom.plan([&](unsigned f) { return plan_2d(tag, int(n0), int(n1), in.get(), out.get(), FFTW_FORWARD, flags | f); });
  backward_ = wisdom.plan([&](unsigned f) { return plan_2d(tag, int(n0), int(n1), in.get(), out.get(), FFTW_BACKWARD, flags | f); });
  if (forward_ == nullptr || backward_ == nullptr) throw std::bad_alloc();
}

template <class Real>
fft_plan_2d<Real>::~fft_plan_2d() {
  if (forward_) destroy_plan(forward_);
  if (backward_) destroy_plan(backward_);
}

template <class Real>
void fft_plan_2d<Real>::forward(std::complex<Real>* in, std::complex<Real>* out) const {
  execute(forward_, in, out);
}

template <class Real>
void fft_plan_2d<Real>::backward(std::complex<Real>* in, std::complex<Real>* out) const {
  execute(backward_, in, out);
}

template <class Real>
fft_plan_axis<Real>::fft_plan_axis(int64_t n0, int64_t n1, int axis, bool measure) {
  auto in = make_fft_buffer<Real>(n0 * n1), out = make_fft_buffer<Real>(n0 * n1);
  // Rows: n1 points, stride 1, n0 of them n1 apart; columns: n0 points, stride n1, n1 of them 1 apart.
  const int n = int(axis == 1 ? n1 : n0), howmany = int(axis == 1 ? n0 : n1);
  const int stride = axis == 1 ? 1 : int(n1), dist = axis == 1 ? int(n1) : 1;
  wisdom_session<Real> wisdom(measure, n0, n1);
  unsigned flags = wisdom.rigor() | FFTW_DESTROY_INPUT;
  std::lock_guard lock(planner_mutex());
  Real* tag = nullptr;
  forward_ = wisdom.plan(
      [&](unsigned f) { return plan_1d_many(tag, n, howmany, stride, dist, in.get(), out.get(), FFTW_FORWARD, flags | f); });
  backward_ = wisdom.plan(
      [&](unsigned f) { return plan_1d_many(tag, n, howmany, stride, dist, in.get(), out.get(), FFTW_BACKWARD, flags | f); });
  if (forward_ == nullptr || backward_ == nullptr) throw std::bad_alloc();
}

template <class Real>
fft_plan_axis<Real>::~fft_plan_axis() {
  std::lock_guard lock(planner_mutex());
  if (forward_) destroy_plan(forward_);
  if (backward_) destroy_plan(backward_);
}

template <class Real>
void fft_plan_axis<Real>::forward(std::complex<Real>* in, std::complex<Real>* out) const {
  execute(forward_, in, out);
}

template <class Real>
void fft_plan_axis<Real>::backward(std::complex<Real>* in, std::complex<Real>* out) const {
  execute(backward_, in, out);
}

template std::string fft_wisdom_path<float>(int64_t, int64_t);
template std::string fft_wisdom_path<double>(int64_t, int64_t);
template fft_buffer<float> make_fft_buffer<float>(int64_t);
template fft_buffer<double> make_fft_buffer<double>(int64_t);
template class fft_plan_2d<float>;
template class fft_plan_2d<double>;
template class fft_plan_axis<float>;
template class fft_plan_axis<double>;
}  // namespace tycho::cpu
