// The cuda engine's implementation: device memory, cuFFT plans, the kernels and the batch
// pipeline described in cuda_engine.hpp. Every CUDA and cuFFT call is checked and an error names
// the call and what it was for.
#include "cuda_engine.hpp"

#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <tycho/sdk/fixed_point.hpp>

#include "cuda_math.hpp"

namespace tycho::cuda {

using namespace tycho::sdk;
using cuda_math::c32;

namespace {

constexpr int k_threads = 256;        // element-wise kernels
constexpr int k_staging_slots = 4;    // pinned index buffers in flight
constexpr int k_probe_grad_slices = 8;  // the probe-gradient sum over the batch, split in slices

// ------------------------------------------------------------------ errors

const char* cufft_error_name(cufftResult r) {
  switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_UNALIGNED_DATA: return "CUFFT_UNALIGNED_DATA";
    case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    case CUFFT_MISSING_DEPENDENCY: return "CUFFT_MISSING_DEPENDENCY";
    default: return "cufftResult ?";
  }
}

void check(cudaError_t e, const char* call, const std::string& what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so later calls report their own
  const tycho_status st =
      e == cudaErrorMemoryAllocation ? TYCHO_ERR_OUT_OF_MEMORY : TYCHO_ERR_INTERNAL;
  fail(st, "cuda engine: ", call, " (", what, ") failed: ", cudaGetErrorName(e), ": ",
       cudaGetErrorString(e));
}

void check_fft(cufftResult r, const char* call, const std::string& what) {
  if (r == CUFFT_SUCCESS) return;
  const tycho_status st = r == CUFFT_ALLOC_FAILED ? TYCHO_ERR_OUT_OF_MEMORY : TYCHO_ERR_INTERNAL;
  fail(st, "cuda engine: ", call, " (", what, ") failed: ", cufft_error_name(r));
}

// After a launch: a bad configuration shows at once; faults inside show at the next sync.
void check_launch(const char* kernel) { check(cudaGetLastError(), "kernel launch", kernel); }

double mib(double bytes) { return bytes / double(1u << 20); }

// ------------------------------------------------------------------ kernels
//
// Element-wise kernels run on a grid (⌈M/256⌉, n): blockIdx.y is the batch slot j, the x index
// the pixel e = a·N1 + b of the window; consecutive threads touch consecutive 8-byte complex
// values (coalesced).

// Window origin (row, column of the patch) and the two ramp tables of each batch slot:
// ramp0[j][a] = exp(−2πi f(a) δ0_j / N0), ramp1[j][b] = exp(−2πi f(b) δ1_j / N1), in double and
// rounded to complex64 as the cpu engine does.
__global__ void __launch_bounds__(128)
    batch_geometry_kernel(const double* __restrict__ positions, const int64_t* __restrict__ indices,
                          int64_t n0, int64_t n1, longlong2* __restrict__ origin,
                          c32* __restrict__ ramp0, c32* __restrict__ ramp1) {
  const int64_t j = blockIdx.x;
  const int64_t p = indices[j];
  const auto o0 = cuda_math::origin_of(positions[2 * p], n0);
  const auto o1 = cuda_math::origin_of(positions[2 * p + 1], n1);
  if (threadIdx.x == 0) origin[j] = make_longlong2(o0.index, o1.index);
  for (int64_t a = threadIdx.x; a < n0; a += blockDim.x)
    ramp0[j * n0 + a] = cuda_math::ramp(a, n0, o0.fraction, -1.0);
  for (int64_t b = threadIdx.x; b < n1; b += blockDim.x)
    ramp1[j * n1 + b] = cuda_math::ramp(b, n1, o1.fraction, -1.0);
}

// K1: the shifted probes' spectra, F[P] · (1/M) · ramp0_j(a) · ramp1_j(b) (the cpu engine's
// product order); a batched inverse FFT then gives P_j.
__global__ void __launch_bounds__(k_threads)
    shifted_probe_spectra_kernel(const c32* __restrict__ probe_spectrum, const c32* __restrict__ ramp0,
                                 const c32* __restrict__ ramp1, int64_t n0, int64_t n1, float inv_m,
                                 c32* __restrict__ out) {
  const int64_t m = n0 * n1;
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= m) return;
  const int64_t j = blockIdx.y;
  const int64_t a = e / n1, b = e - a * n1;
  c32 v = cuda_math::scale(probe_spectrum[e], inv_m);
  v = cuda_math::mul(cuda_math::mul(v, ramp0[j * n0 + a]), ramp1[j * n1 + b]);
  out[j * m + e] = v;
}

// K2: exit waves ψ_j = P_j · O[patch_j] (then a batched forward FFT).
__global__ void __launch_bounds__(k_threads)
    exit_wave_kernel(const c32* __restrict__ shifted_probes, const c32* __restrict__ object,
                     const longlong2* __restrict__ origin, int64_t n1, int64_t m, int64_t w,
                     c32* __restrict__ wave) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= m) return;
  const int64_t j = blockIdx.y;
  const int64_t a = e / n1, b = e - a * n1;
  const longlong2 o = origin[j];
  wave[j * m + e] = cuda_math::mul(shifted_probes[j * m + e], object[(o.x + a) * w + o.y + b]);
}

// K3: model intensity I = |Ψ|²/M, and the batch's measured patterns gathered from the targets
// so that the loss sees contiguous (n, N0, N1) float32 tensors. Targets are float32, or uint16
// integer counts (half the device memory) widened exactly right here.
template <class Target>
__global__ void __launch_bounds__(k_threads)
    intensity_kernel(const c32* __restrict__ wave, const Target* __restrict__ targets,
                     const int64_t* __restrict__ indices, int64_t m, float inv_m,
                     float* __restrict__ intensity, float* __restrict__ measured) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= m) return;
  const int64_t j = blockIdx.y;
  intensity[j * m + e] = cuda_math::norm(wave[j * m + e]) * inv_m;
  measured[j * m + e] = float(targets[indices[j] * m + e]);
}

// K4: ∂L/∂Ψ* scaled for the inverse transform: Ψ · (dL/dI / M), in place.
__global__ void __launch_bounds__(k_threads)
    far_field_gradient_kernel(c32* __restrict__ wave, const float* __restrict__ dloss, int64_t m,
                              float inv_m) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= m) return;
  const int64_t k = int64_t(blockIdx.y) * m + e;
  wave[k] = cuda_math::scale(wave[k], dloss[k] * inv_m);
}

// K5: with g_j = F⁻¹[...] in `g`: conj(O_patch) · g_j overwrites the shifted probe P_j in place
// (the input of the probe gradient's forward FFT), and with Atomic the object gradient gets
// conj(P_j) · g_j added with float atomics (the deterministic sums round it first, below).
template <bool Atomic>
__global__ void __launch_bounds__(k_threads)
    patch_gradient_kernel(c32* __restrict__ shifted_probes, const c32* __restrict__ g,
                          const c32* __restrict__ object, const longlong2* __restrict__ origin,
                          int64_t n1, int64_t m, int64_t w, c32* __restrict__ object_grad) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= m) return;
  const int64_t j = blockIdx.y;
  const int64_t a = e / n1, b = e - a * n1;
  const longlong2 o = origin[j];
  const int64_t pixel = (o.x + a) * w + o.y + b;
  const c32 gv = g[j * m + e];
  if constexpr (Atomic) {
    const c32 contribution = cuda_math::mul(cuda_math::conj(shifted_probes[j * m + e]), gv);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // One 64-bit vector atomic per complex value (sm_90 and newer).
    atomicAdd(reinterpret_cast<float2*>(&object_grad[pixel]), make_float2(contribution.x, contribution.y));
#else
    atomicAdd(&object_grad[pixel].x, contribution.x);
    atomicAdd(&object_grad[pixel].y, contribution.y);
#endif
  }
  shifted_probes[j * m + e] = cuda_math::mul(cuda_math::conj(object[pixel]), gv);
}

// Deterministic sums (tycho/sdk/fixed_point.hpp): v rounded to an integer on the batch's grid,
// round(v · scale), by the 1.5·2^52 trick of sdk::fixed_point::quantise (exact for |v · scale| <
// 2^51; larger values are caught by the largest |v| kept beside), as the unsigned two's-complement
// integer the atomics add: integer sums are the same in any order.
__device__ inline unsigned long long quantised(float v, double scale) {
  return static_cast<unsigned long long>(__double_as_longlong(double(v) * scale + 6755399441055744.0) -
                                         0x4338000000000000LL);
}
// |v| as its bits: an unsigned max keeps the largest, and any NaN or infinity above it.
__device__ inline unsigned magnitude(float v) { return __float_as_uint(v) & 0x7fffffffu; }
// The warp's largest into *largest, one atomic per warp (every thread of the warp calls it).
__device__ inline void keep_largest(unsigned mine, unsigned* largest) {
  for (int offset = 16; offset > 0; offset >>= 1) mine = max(mine, __shfl_down_sync(0xffffffffu, mine, offset));
  if ((threadIdx.x & 31) == 0) atomicMax(largest, mine);
}

// K5, deterministic: conj(P_j) · g_j rounded and added to the object's integers (two per pixel)
// with 64-bit integer atomics; conj(O_patch) · g_j replaces P_j as in patch_gradient_kernel.
__global__ void __launch_bounds__(k_threads)
    patch_gradient_fixed_kernel(c32* __restrict__ shifted_probes, const c32* __restrict__ g,
                                const c32* __restrict__ object, const longlong2* __restrict__ origin,
                                int64_t n1, int64_t m, int64_t w, double scale,
                                unsigned long long* __restrict__ object_sums, unsigned* __restrict__ largest) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned mine = 0;
  if (e < m) {
    const int64_t j = blockIdx.y;
    const int64_t a = e / n1, b = e - a * n1;
    const longlong2 o = origin[j];
    const int64_t pixel = (o.x + a) * w + o.y + b;
    const c32 gv = g[j * m + e];
    const c32 v = cuda_math::mul(cuda_math::conj(shifted_probes[j * m + e]), gv);
    atomicAdd(object_sums + 2 * pixel, quantised(v.x, scale));
    atomicAdd(object_sums + 2 * pixel + 1, quantised(v.y, scale));
    mine = max(magnitude(v.x), magnitude(v.y));
    shifted_probes[j * m + e] = cuda_math::mul(cuda_math::conj(object[pixel]), gv);
  }
  keep_largest(mine, largest);
}

// K6, deterministic: each pixel of the probe gradient's spectrum sums its slots' rounded
// F[conj(O_patch) g_j] · conj(ramp0_j ramp1_j) (probe_gradient_slices_kernel's products) in
// integers, added to the batch's (later passes add too).
__global__ void __launch_bounds__(k_threads)
    probe_gradient_fixed_kernel(const c32* __restrict__ work, const c32* __restrict__ ramp0,
                                const c32* __restrict__ ramp1, int64_t n, int64_t n0, int64_t n1, double scale,
                                unsigned long long* __restrict__ probe_sums, unsigned* __restrict__ largest) {
  const int64_t m = n0 * n1;
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned mine = 0;
  if (e < m) {
    const int64_t a = e / n1, b = e - a * n1;
    unsigned long long re = 0, im = 0;
    for (int64_t j = 0; j < n; ++j) {
      const c32 r = cuda_math::mul(ramp0[j * n0 + a], ramp1[j * n1 + b]);
      const c32 v = cuda_math::mul(work[j * m + e], cuda_math::conj(r));
      re += quantised(v.x, scale);
      im += quantised(v.y, scale);
      mine = max(mine, max(magnitude(v.x), magnitude(v.y)));
    }
    probe_sums[2 * e] += re;
    probe_sums[2 * e + 1] += im;
  }
  keep_largest(mine, largest);
}

// The integers of a grid back to floats: out = float(double(n) · scale) · post.
__global__ void __launch_bounds__(k_threads)
    from_fixed_kernel(const long long* __restrict__ n, int64_t count, double scale, float post, float* __restrict__ out) {
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < count) out[k] = float(double(n[k]) * scale) * post;
}

// K6a: the probe gradient's spectrum, Σ_j F[conj(O_patch) g_j] · conj(ramp0_j(a) ramp1_j(b)),
// summed over the slots of one slice of the batch (blockIdx.y) in index order into partial[y].
__global__ void __launch_bounds__(k_threads)
    probe_gradient_slices_kernel(const c32* __restrict__ work, const c32* __restrict__ ramp0,
                                 const c32* __restrict__ ramp1, int64_t n, int64_t n0, int64_t n1,
                                 int64_t slice_len, c32* __restrict__ partial) {
  const int64_t m = n0 * n1;
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= m) return;
  const int64_t a = e / n1, b = e - a * n1;
  const int64_t first = int64_t(blockIdx.y) * slice_len;
  const int64_t last = min(n, first + slice_len);
  c32 acc{0.f, 0.f};
  for (int64_t j = first; j < last; ++j) {
    const c32 r = cuda_math::mul(ramp0[j * n0 + a], ramp1[j * n1 + b]);
    acc = cuda_math::add(acc, cuda_math::mul(work[j * m + e], cuda_math::conj(r)));
  }
  partial[int64_t(blockIdx.y) * m + e] = acc;
}

// K6b: the slices summed in order, times 1/M for the inverse transform that follows; written
// to (or, for later passes, added to) the probe gradient buffer.
__global__ void __launch_bounds__(k_threads)
    probe_gradient_sum_kernel(const c32* __restrict__ partial, int64_t slices, int64_t m, float inv_m,
                              bool accumulate, c32* __restrict__ probe_grad) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= m) return;
  c32 acc{0.f, 0.f};
  for (int64_t s = 0; s < slices; ++s) acc = cuda_math::add(acc, partial[s * m + e]);
  acc = cuda_math::scale(acc, inv_m);
  probe_grad[e] = accumulate ? cuda_math::add(probe_grad[e], acc) : acc;
}

unsigned blocks_for(int64_t count, int threads) { return unsigned((count + threads - 1) / threads); }

}  // namespace

// ------------------------------------------------------------------ the engine

struct cuda_engine::impl {
  int device = 0;
  bool pools = false;  // stream-ordered allocation available
  cudaStream_t stream = nullptr;
  int64_t n0 = 0, n1 = 0, m = 0, h = 0, w = 0, patterns = 0, max_batch = 0, remainder = 0;
  bool deterministic = false;
  double target_scale = 1;
  tycho_loss_binding loss{};
  std::vector<double> positions;  // host copy, for checks

  std::vector<void*> allocations;
  float* targets = nullptr;      // float32 targets, or
  uint16_t* counts = nullptr;    // integer counts (setup->targets uint16)
  uint8_t* mask = nullptr;
  double* positions_d = nullptr;
  c32 *object = nullptr, *probe = nullptr, *object_grad = nullptr, *probe_grad = nullptr;
  c32* probe_spectrum = nullptr;
  c32 *shifted = nullptr, *wave = nullptr, *ramp0 = nullptr, *ramp1 = nullptr, *partial = nullptr;
  float *intensity = nullptr, *measured = nullptr, *dloss = nullptr;
  longlong2* origin = nullptr;
  int64_t* indices_d = nullptr;
  double* loss_d = nullptr;
  void* fft_work = nullptr;

  int64_t* staging = nullptr;  // pinned: k_staging_slots × max_batch indices
  double* loss_h = nullptr;    // pinned
  cudaEvent_t staging_done[k_staging_slots] = {};

  // Deterministic sums (`deterministic = true`; tycho/sdk/fixed_point.hpp): the batch's integers
  // (object 2·H·W, probe spectrum 2·M, then the header the ranks read alike), the largest |v| of
  // each (as bits), the header's host copy, the grids, and the loss of the batches finished.
  bool host_finishes = false;
  long long* sums = nullptr;
  int64_t probe_at = 0, header_at = 0, sums_words = 0;
  unsigned* largest_d = nullptr;
  unsigned* largest_h = nullptr;  // pinned, 2
  int64_t* header_h = nullptr;    // pinned
  sdk::fixed_point::grid_schedule grids;
  int used_grid[2] = {0, 0};
  double finished_loss = 0;
  sdk::tensor_view sums_view;
  int next_slot = 0;

  cufftHandle plan_batch = 0, plan_remainder = 0, plan_one = 0;
  bool have_batch = false, have_remainder = false, have_one = false;

  sdk::tensor_view views[5];

  impl(const tycho_engine_setup& setup, bool finishes) : host_finishes(finishes) {
    try {
      init(setup);
    } catch (...) {
      release();
      throw;
    }
  }
  ~impl() { release(); }

  void set_device() const { check(cudaSetDevice(device), "cudaSetDevice", cat("device ", device)); }

  template <class T>
  T* allocate(int64_t count, const char* what) {
    const size_t bytes = size_t(count) * sizeof(T);
    void* p = nullptr;
    cudaError_t e = pools ? cudaMallocAsync(&p, bytes, stream) : cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      (void)cudaGetLastError();
      fail(e == cudaErrorMemoryAllocation ? TYCHO_ERR_OUT_OF_MEMORY : TYCHO_ERR_INTERNAL,
           "cuda engine: cannot allocate ", what, " (", mib(double(bytes)), " MiB) on CUDA device ",
           device, " (", mib(double(free_b)), " MiB free of ", mib(double(total_b)), "): ",
           pools ? "cudaMallocAsync" : "cudaMalloc", ": ", cudaGetErrorString(e));
    }
    allocations.push_back(p);
    return static_cast<T*>(p);
  }

  cufftHandle make_plan(int64_t batch, size_t& work_bytes, const char* what) {
    cufftHandle plan = 0;
    check_fft(cufftCreate(&plan), "cufftCreate", what);
    try {
      check_fft(cufftSetAutoAllocation(plan, 0), "cufftSetAutoAllocation", what);
      long long dims[2] = {n0, n1};
      size_t bytes = 0;
      check_fft(cufftMakePlanMany64(plan, 2, dims, nullptr, 1, m, nullptr, 1, m, CUFFT_C2C, batch, &bytes),
                "cufftMakePlanMany64", cat(what, ", ", n0, " x ", n1, " x ", batch));
      check_fft(cufftSetStream(plan, stream), "cufftSetStream", what);
      work_bytes = std::max(work_bytes, bytes);
    } catch (...) {
      cufftDestroy(plan);
      throw;
    }
    return plan;
  }

  void init(const tycho_engine_setup& setup) {
    // The setup's tensors, shapes, loss, device type and windows were checked by the SDK's engine
    // adapter (tycho/sdk/engine.hpp, the capabilities in cuda_description.hpp) before this runs;
    // it refuses streamed targets (ABI 1.3), which this engine does not read yet.
    const bool integer_counts = same_dtype(setup.targets->dtype, dtype_uint16);
    patterns = setup.targets->shape[0];
    n0 = setup.targets->shape[1];
    n1 = setup.targets->shape[2];
    m = n0 * n1;
    h = setup.object_init->shape[1];
    w = setup.object_init->shape[2];
    if (n0 > std::numeric_limits<int>::max() || n1 > std::numeric_limits<int>::max() || m > (int64_t(1) << 31))
      fail(TYCHO_ERR_UNSUPPORTED, "cuda engine: a ", n0, " x ", n1, " window is too large");
    loss = setup.loss;
    target_scale = setup.target_scale;
    const double* pos = data_of<const double>(*setup.positions_px);
    positions.assign(pos, pos + 2 * patterns);

    // Configuration ([reconstruct]); every key is declared in the plugin's config_keys.
    config_view cfg(setup.config);
    const int64_t batch = cfg.get_int("batch_size").value_or(128);
    if (batch <= 0) fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] batch_size must be > 0, got ", batch);
    max_batch_configured = batch;
    // Slots ride on gridDim.y (≤ 65535); larger batches run in passes of this size.
    max_batch = std::min({batch, patterns, int64_t(65535)});
    remainder = patterns % max_batch;
    deterministic = cfg.get_bool("deterministic").value_or(false);
    const int64_t threshold = cfg.get_int("pool_release_threshold_bytes").value_or(-1);
    if (threshold < -1)
      fail(TYCHO_ERR_INVALID_ARGUMENT,
           "config key 'pool_release_threshold_bytes' must be >= 0 (or -1: keep everything), got ", threshold);

    // The device. Nothing touches CUDA before this point (the plugin loads without a GPU).
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      (void)cudaGetLastError();
      fail(TYCHO_ERR_UNSUPPORTED, "cuda engine: no CUDA device is available (cudaGetDeviceCount: ",
           e == cudaSuccess ? "0 devices" : cudaGetErrorString(e),
           "); run on a machine with an NVIDIA GPU and driver, or use engine = \"cpu\"");
    }
    device = setup.device.device_id;
    if (device < 0 || device >= count)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "cuda engine: CUDA device ", device, " was requested but this machine has ",
           count, " (devices 0 to ", count - 1, ")");
    set_device();
    cudaFuncAttributes attr{};
    e = cudaFuncGetAttributes(&attr, batch_geometry_kernel);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      cudaDeviceProp prop{};
      (void)cudaGetDeviceProperties(&prop, device);
      fail(TYCHO_ERR_UNSUPPORTED, "cuda engine: this build has no code for CUDA device ", device, " (", prop.name,
           ", compute capability ", prop.major, ".", prop.minor, "): ", cudaGetErrorString(e),
           "; rebuild with CMAKE_CUDA_ARCHITECTURES including ", prop.major, prop.minor);
    }
    int pools_supported = 0;
    check(cudaDeviceGetAttribute(&pools_supported, cudaDevAttrMemoryPoolsSupported, device),
          "cudaDeviceGetAttribute", "memory pools supported");
    pools = pools_supported != 0;
    if (pools) {
      cudaMemPool_t pool = nullptr;
      check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool", "stream-ordered pool");
      uint64_t keep = threshold < 0 ? std::numeric_limits<uint64_t>::max() : uint64_t(threshold);
      check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute",
            "pool release threshold");
    }
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", "engine stream");

    // Device memory, in the order of the messages a user sees when it runs out.
    const int64_t b = max_batch;
    if (integer_counts)
      counts = allocate<uint16_t>(patterns * m, "targets");
    else
      targets = allocate<float>(patterns * m, "targets");
    if (setup.mask != nullptr) mask = allocate<uint8_t>(m, "mask");
    positions_d = allocate<double>(2 * patterns, "positions");
    object = allocate<c32>(h * w, "object");
    object_grad = allocate<c32>(h * w, "object gradient");
    probe = allocate<c32>(m, "probe");
    probe_grad = allocate<c32>(m, "probe gradient");
    probe_spectrum = allocate<c32>(m, "batch buffers");
    shifted = allocate<c32>(b * m, "batch buffers");
    wave = allocate<c32>(b * m, "batch buffers");
    intensity = allocate<float>(b * m, "batch buffers");
    measured = allocate<float>(b * m, "batch buffers");
    dloss = allocate<float>(b * m, "batch buffers");
    ramp0 = allocate<c32>(b * n0, "batch buffers");
    ramp1 = allocate<c32>(b * n1, "batch buffers");
    partial = allocate<c32>(k_probe_grad_slices * m, "batch buffers");
    origin = allocate<longlong2>(b, "batch buffers");
    indices_d = allocate<int64_t>(b, "batch buffers");
    loss_d = allocate<double>(1, "loss accumulator");
    if (deterministic) {
      probe_at = 2 * h * w;
      header_at = probe_at + 2 * m;
      sums_words = header_at + int64_t(sdk::fixed_point::header::words(2));
      sums = allocate<long long>(sums_words, "deterministic sums");
      largest_d = allocate<unsigned>(2, "deterministic sums");
      grids = sdk::fixed_point::grid_schedule(2, batch);  // one mode: a value per position and element
    }

    check(cudaHostAlloc(reinterpret_cast<void**>(&staging), size_t(k_staging_slots * b) * sizeof(int64_t),
                        cudaHostAllocDefault),
          "cudaHostAlloc", "pinned index staging");
    check(cudaHostAlloc(reinterpret_cast<void**>(&loss_h), sizeof(double), cudaHostAllocDefault), "cudaHostAlloc",
          "pinned loss read-back");
    if (deterministic) {
      check(cudaHostAlloc(reinterpret_cast<void**>(&largest_h), 2 * sizeof(unsigned), cudaHostAllocDefault),
            "cudaHostAlloc", "pinned deterministic sums");
      check(cudaHostAlloc(reinterpret_cast<void**>(&header_h), sdk::fixed_point::header::words(2) * sizeof(int64_t),
                          cudaHostAllocDefault),
            "cudaHostAlloc", "pinned deterministic sums");
    }
    for (auto& ev : staging_done)
      check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags", "index staging");

    // Copies of the inputs (targets once, float32: the host already scaled and shifted them).
    if (integer_counts)
      check(cudaMemcpyAsync(counts, data_of<const uint16_t>(*setup.targets), size_t(patterns * m) * sizeof(uint16_t),
                            cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync", "targets to the device");
    else
      check(cudaMemcpyAsync(targets, data_of<const float>(*setup.targets), size_t(patterns * m) * sizeof(float),
                            cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync", "targets to the device");
    if (mask != nullptr)
      check(cudaMemcpyAsync(mask, data_of<const uint8_t>(*setup.mask), size_t(m), cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync", "mask to the device");
    check(cudaMemcpyAsync(positions_d, positions.data(), size_t(2 * patterns) * sizeof(double),
                          cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync", "positions to the device");
    check(cudaMemcpyAsync(object, data_of<const char>(*setup.object_init), size_t(h * w) * sizeof(c32),
                          cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync", "object to the device");
    check(cudaMemcpyAsync(probe, data_of<const char>(*setup.probe_init), size_t(m) * sizeof(c32),
                          cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync", "probe to the device");
    // Defined contents everywhere: slots past a short batch still go through the batch FFTs.
    check(cudaMemsetAsync(object_grad, 0, size_t(h * w) * sizeof(c32), stream), "cudaMemsetAsync", "object gradient");
    check(cudaMemsetAsync(probe_grad, 0, size_t(m) * sizeof(c32), stream), "cudaMemsetAsync", "probe gradient");
    check(cudaMemsetAsync(shifted, 0, size_t(b * m) * sizeof(c32), stream), "cudaMemsetAsync", "batch buffers");
    check(cudaMemsetAsync(wave, 0, size_t(b * m) * sizeof(c32), stream), "cudaMemsetAsync", "batch buffers");
    check(cudaMemsetAsync(loss_d, 0, sizeof(double), stream), "cudaMemsetAsync", "loss accumulator");

    // cuFFT plans, made once, sharing one work area from the same pool.
    size_t work_bytes = 0;
    plan_batch = make_plan(b, work_bytes, "batch FFT plan");
    have_batch = true;
    if (remainder > 0) {
      plan_remainder = make_plan(remainder, work_bytes, "last-batch FFT plan");
      have_remainder = true;
    }
    plan_one = make_plan(1, work_bytes, "probe FFT plan");
    have_one = true;
    if (work_bytes > 0) {
      fft_work = allocate<char>(int64_t(work_bytes), "FFT work area");
      check_fft(cufftSetWorkArea(plan_batch, fft_work), "cufftSetWorkArea", "batch FFT plan");
      if (have_remainder) check_fft(cufftSetWorkArea(plan_remainder, fft_work), "cufftSetWorkArea", "last-batch FFT plan");
      check_fft(cufftSetWorkArea(plan_one, fft_work), "cufftSetWorkArea", "probe FFT plan");
    }
    // The pageable host inputs must stay valid only until the copies are done.
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "engine set-up");

    const DLDevice dev{kDLCUDA, device};
    views[TYCHO_TENSOR_OBJECT] = tensor_view(object, dtype_complex64, {1, h, w}, dev);
    views[TYCHO_TENSOR_PROBE] = tensor_view(probe, dtype_complex64, {1, n0, n1}, dev);
    views[TYCHO_TENSOR_OBJECT_GRAD] = tensor_view(object_grad, dtype_complex64, {1, h, w}, dev);
    views[TYCHO_TENSOR_PROBE_GRAD] = tensor_view(probe_grad, dtype_complex64, {1, n0, n1}, dev);
    views[TYCHO_TENSOR_POSITIONS] = tensor_view(positions_d, dtype_float64, {patterns, 2}, dev);
    if (deterministic) sums_view = tensor_view(sums, dtype_int64, {sums_words}, dev);

    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", cat("device ", device));
    const double batch_bytes = double(b * m) * (2 * sizeof(c32) + 3 * sizeof(float));
    sdk::log(TYCHO_LOG_INFO, "cuda",
        cat("device ", device, " (", prop.name, ", ", prop.multiProcessorCount, " SMs): targets ",
            mib(double(patterns * m) * 4.0), " MiB, batch buffers ", mib(batch_bytes), " MiB for ", b,
            " positions, FFT work ", mib(double(work_bytes)), " MiB; ",
            deterministic ? "deterministic sums (fixed point)" : "float sums (atomic object gradient)"));
  }

  void release() noexcept {
    if (stream != nullptr) (void)cudaStreamSynchronize(stream);
    if (have_batch) cufftDestroy(plan_batch);
    if (have_remainder) cufftDestroy(plan_remainder);
    if (have_one) cufftDestroy(plan_one);
    have_batch = have_remainder = have_one = false;
    for (void* p : allocations) (void)(pools ? cudaFreeAsync(p, stream) : cudaFree(p));
    allocations.clear();
    for (auto& ev : staging_done)
      if (ev != nullptr) (void)cudaEventDestroy(ev);
    if (staging != nullptr) (void)cudaFreeHost(staging);
    if (loss_h != nullptr) (void)cudaFreeHost(loss_h);
    if (largest_h != nullptr) (void)cudaFreeHost(largest_h);
    if (header_h != nullptr) (void)cudaFreeHost(header_h);
    staging = nullptr;
    loss_h = nullptr;
    largest_h = nullptr;
    header_h = nullptr;
    if (stream != nullptr) {
      (void)cudaStreamSynchronize(stream);
      (void)cudaStreamDestroy(stream);
      stream = nullptr;
      if (pools) {
        cudaMemPool_t pool = nullptr;
        if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) (void)cudaMemPoolTrimTo(pool, 0);
      }
    }
    (void)cudaGetLastError();
  }

  cufftHandle plan_for(int64_t n) const {
    if (n == max_batch) return plan_batch;
    if (have_remainder && n == remainder) return plan_remainder;
    return plan_batch;  // a short batch of another size: all B slots, the extra ones ignored
  }

  // One pass of at most max_batch positions; `first` says whether it starts the batch's sums.
  void pass(const int64_t* indices, int64_t n, bool first) {
    // Indices to the device through a pinned slot, waiting only if that slot's last copy is
    // still queued (the host is then k_staging_slots passes ahead of the device).
    const int slot = next_slot;
    next_slot = (next_slot + 1) % k_staging_slots;
    check(cudaEventSynchronize(staging_done[slot]), "cudaEventSynchronize", "index staging");
    int64_t* host_slot = staging + int64_t(slot) * max_batch;
    std::memcpy(host_slot, indices, size_t(n) * sizeof(int64_t));
    check(cudaMemcpyAsync(indices_d, host_slot, size_t(n) * sizeof(int64_t), cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync", "batch indices");
    check(cudaEventRecord(staging_done[slot], stream), "cudaEventRecord", "index staging");

    const float inv_m = 1.0f / float(m);
    const cufftHandle plan = plan_for(n);
    const dim3 grid(blocks_for(m, k_threads), unsigned(n));

    batch_geometry_kernel<<<unsigned(n), 128, 0, stream>>>(positions_d, indices_d, n0, n1, origin, ramp0, ramp1);
    check_launch("batch geometry");

    // Shifted probes P_j.
    shifted_probe_spectra_kernel<<<grid, k_threads, 0, stream>>>(probe_spectrum, ramp0, ramp1, n0, n1, inv_m, shifted);
    check_launch("shifted probe spectra");
    check_fft(cufftExecC2C(plan, reinterpret_cast<cufftComplex*>(shifted), reinterpret_cast<cufftComplex*>(shifted),
                           CUFFT_INVERSE),
              "cufftExecC2C", "shifted probes, inverse");

    // Exit waves and far fields.
    exit_wave_kernel<<<grid, k_threads, 0, stream>>>(shifted, object, origin, n1, m, w, wave);
    check_launch("exit waves");
    check_fft(cufftExecC2C(plan, reinterpret_cast<cufftComplex*>(wave), reinterpret_cast<cufftComplex*>(wave),
                           CUFFT_FORWARD),
              "cufftExecC2C", "exit waves, forward");

    // Model intensity, measured patterns, and the loss component on the device.
    if (counts != nullptr)
      intensity_kernel<<<grid, k_threads, 0, stream>>>(wave, counts, indices_d, m, inv_m, intensity, measured);
    else
      intensity_kernel<<<grid, k_threads, 0, stream>>>(wave, targets, indices_d, m, inv_m, intensity, measured);
    check_launch("intensity");
    const DLDevice dev{kDLCUDA, device};
    tensor_view model(intensity, dtype_float32, {n, n0, n1}, dev);
    tensor_view meas(measured, dtype_float32, {n, n0, n1}, dev);
    tensor_view grad(dloss, dtype_float32, {n, n0, n1}, dev);
    tensor_view mask_view(mask, dtype_uint8, {n0, n1}, dev);
    tycho_status st = loss.vtable->evaluate(loss.instance, model.get(), meas.get(),
                                            mask != nullptr ? mask_view.get() : nullptr, target_scale,
                                            grad.get(), loss_d, stream);
    if (st != TYCHO_OK) {
      const char* why = host() != nullptr ? host()->last_error() : nullptr;
      fail(st, "cuda engine: the loss component failed on device tensors: ", why != nullptr ? why : "(no message)");
    }

    // g_j = F⁻¹[dL/dI · Ψ_j] / M.
    far_field_gradient_kernel<<<grid, k_threads, 0, stream>>>(wave, dloss, m, inv_m);
    check_launch("far-field gradient");
    check_fft(cufftExecC2C(plan, reinterpret_cast<cufftComplex*>(wave), reinterpret_cast<cufftComplex*>(wave),
                           CUFFT_INVERSE),
              "cufftExecC2C", "exit-wave gradients, inverse");

    // Object gradient; conj(O_patch) g_j replaces P_j.
    if (deterministic) {
      patch_gradient_fixed_kernel<<<grid, k_threads, 0, stream>>>(
          shifted, wave, object, origin, n1, m, w, sdk::fixed_point::scale_of(used_grid[0]),
          reinterpret_cast<unsigned long long*>(sums), largest_d);
    } else {
      patch_gradient_kernel<true><<<grid, k_threads, 0, stream>>>(shifted, wave, object, origin, n1, m, w, object_grad);
    }
    check_launch("patch gradients");

    // Probe gradient spectrum: forward FFT, undo each shift, sum over the batch in order.
    check_fft(cufftExecC2C(plan, reinterpret_cast<cufftComplex*>(shifted), reinterpret_cast<cufftComplex*>(shifted),
                           CUFFT_FORWARD),
              "cufftExecC2C", "probe gradients, forward");
    if (deterministic) {
      probe_gradient_fixed_kernel<<<blocks_for(m, k_threads), k_threads, 0, stream>>>(
          shifted, ramp0, ramp1, n, n0, n1, sdk::fixed_point::scale_of(used_grid[1]),
          reinterpret_cast<unsigned long long*>(sums + probe_at), largest_d + 1);
      check_launch("probe gradient (deterministic)");
      return;
    }
    const int64_t slices = std::min<int64_t>(k_probe_grad_slices, n);
    const int64_t slice_len = (n + slices - 1) / slices;
    const int64_t used = (n + slice_len - 1) / slice_len;
    probe_gradient_slices_kernel<<<dim3(blocks_for(m, k_threads), unsigned(used)), k_threads, 0, stream>>>(
        shifted, ramp0, ramp1, n, n0, n1, slice_len, partial);
    check_launch("probe gradient slices");
    probe_gradient_sum_kernel<<<blocks_for(m, k_threads), k_threads, 0, stream>>>(partial, used, m, inv_m, !first,
                                                                                 probe_grad);
    check_launch("probe gradient sum");
  }

  // The adapter has checked count and the indices.
  void compute_batch(const int64_t* indices, int64_t count) {
    if (!deterministic) return compute_float(indices, count);
    if (host_finishes) {
      if (count > grids_batch())
        fail(TYCHO_ERR_INVALID_ARGUMENT, "cuda engine: a batch of ", count, " positions, more than [reconstruct] ",
             "batch_size, for which the deterministic sums' grids are sized");
      return compute_fixed(indices, count);
    }
    // No host sums these (one device, an engine driven directly): settle each batch here, on
    // grids sized for it when it is longer than batch_size.
    if (count > grids_batch()) grids = sdk::fixed_point::grid_schedule(2, count);
    for (int attempt = 0;; ++attempt) {
      compute_fixed(indices, count);
      if (!finish_batch(false)) return;
      if (attempt >= 3) fail(TYCHO_ERR_INTERNAL, "cuda engine: the deterministic sums' grids did not settle");
    }
  }
  int64_t grids_batch() const { return std::max<int64_t>(max_batch_configured, 1); }
  int64_t max_batch_configured = 0;

  // The batch into the integers, then this rank's header (its grids, its largest values, its
  // loss) from what the device found: one wait per batch, for 16 bytes.
  void compute_fixed(const int64_t* indices, int64_t count) {
    namespace fp = sdk::fixed_point;
    set_device();
    for (int t = 0; t < 2; ++t) used_grid[t] = grids.grid(t);
    check(cudaMemsetAsync(sums, 0, size_t(header_at) * sizeof(long long), stream), "cudaMemsetAsync",
          "deterministic sums");
    check(cudaMemsetAsync(largest_d, 0, 2 * sizeof(unsigned), stream), "cudaMemsetAsync", "deterministic sums");
    if (count > 0) {
      check(cudaMemcpyAsync(probe_spectrum, probe, size_t(m) * sizeof(c32), cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpyAsync", "probe spectrum");
      check_fft(cufftExecC2C(plan_one, reinterpret_cast<cufftComplex*>(probe_spectrum),
                             reinterpret_cast<cufftComplex*>(probe_spectrum), CUFFT_FORWARD),
                "cufftExecC2C", "probe, forward");
      for (int64_t start = 0; start < count; start += max_batch)
        pass(indices + start, std::min(max_batch, count - start), start == 0);
    }
    check(cudaMemcpyAsync(largest_h, largest_d, 2 * sizeof(unsigned), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync", "deterministic sums");
    check(cudaMemcpyAsync(loss_h, loss_d, sizeof(double), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync",
          "loss read-back");
    check(cudaMemsetAsync(loss_d, 0, sizeof(double), stream), "cudaMemsetAsync", "loss accumulator");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "the batch's largest values");
    double largest[2];
    int64_t non_finite[2];
    for (int t = 0; t < 2; ++t) {
      non_finite[t] = largest_h[t] >= 0x7f800000u ? 1 : 0;  // a NaN or infinity
      float v = 0;
      std::memcpy(&v, &largest_h[t], sizeof v);
      largest[t] = non_finite[t] ? 0.0 : double(v) * fp::scale_of(used_grid[t]);
    }
    // The loss component sums its pixels with double atomics: this rank's loss is added exactly
    // over the ranks, its own last bits may differ between runs.
    fp::exact_sum loss;
    loss.add(*loss_h);
    std::fill(header_h, header_h + fp::header::words(2), 0);
    fp::header::write(header_h, grids, largest, non_finite, loss);
    check(cudaMemcpyAsync(sums + header_at, header_h, fp::header::words(2) * sizeof(int64_t), cudaMemcpyHostToDevice,
                          stream),
          "cudaMemcpyAsync", "deterministic sums' header");
  }

  // After the host's sum over the ranks: true when the batch must be computed again; else the
  // gradients are the sums' floats and the batch's loss waits for collect_loss.
  bool finish_batch(bool ends_iteration) {
    namespace fp = sdk::fixed_point;
    set_device();
    check(cudaMemcpyAsync(header_h, sums + header_at, fp::header::words(2) * sizeof(int64_t), cudaMemcpyDeviceToHost,
                          stream),
          "cudaMemcpyAsync", "deterministic sums' header");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "the summed header");
    bool same_grids = false;
    const std::vector<fp::tensor_report> reports = fp::header::read(header_h, grids, same_grids);
    if (!same_grids)
      fail(TYCHO_ERR_INTERNAL, "cuda engine: the ranks' deterministic sums were quantised on different grids");
    if (!grids.settle(reports, ends_iteration)) return true;
    const double batch_loss = fp::header::loss(header_h, 2).value();
    if (reports[0].non_finite > 0 || reports[1].non_finite > 0 || !std::isfinite(batch_loss)) {
      // What float sums would have carried: NaN (all bits set is a NaN); the run stops on its loss.
      check(cudaMemsetAsync(object_grad, 0xff, size_t(h * w) * sizeof(c32), stream), "cudaMemsetAsync", "NaN");
      check(cudaMemsetAsync(probe_grad, 0xff, size_t(m) * sizeof(c32), stream), "cudaMemsetAsync", "NaN");
      finished_loss += std::numeric_limits<double>::quiet_NaN();
      return false;
    }
    from_fixed_kernel<<<blocks_for(2 * h * w, k_threads), k_threads, 0, stream>>>(
        sums, 2 * h * w, std::ldexp(1.0, used_grid[0]), 1.0f, reinterpret_cast<float*>(object_grad));
    check_launch("object gradient from the sums");
    // The spectrum, times 1/M for the inverse transform (probe_gradient_sum_kernel's order).
    from_fixed_kernel<<<blocks_for(2 * m, k_threads), k_threads, 0, stream>>>(
        sums + probe_at, 2 * m, std::ldexp(1.0, used_grid[1]), 1.0f / float(m), reinterpret_cast<float*>(probe_grad));
    check_launch("probe gradient from the sums");
    check_fft(cufftExecC2C(plan_one, reinterpret_cast<cufftComplex*>(probe_grad),
                           reinterpret_cast<cufftComplex*>(probe_grad), CUFFT_INVERSE),
              "cufftExecC2C", "probe gradient, inverse");
    finished_loss += batch_loss;
    return false;
  }

  void compute_float(const int64_t* indices, int64_t count) {
    if (count == 0) {  // a rank that holds none of this batch's patterns contributes zeros
      set_device();
      check(cudaMemsetAsync(object_grad, 0, size_t(h * w) * sizeof(c32), stream), "cudaMemsetAsync", "object gradient");
      check(cudaMemsetAsync(probe_grad, 0, size_t(m) * sizeof(c32), stream), "cudaMemsetAsync", "probe gradient");
      return;
    }
    set_device();

    // F[P] once per batch (the probe changes between batches).
    check(cudaMemcpyAsync(probe_spectrum, probe, size_t(m) * sizeof(c32), cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync", "probe spectrum");
    check_fft(cufftExecC2C(plan_one, reinterpret_cast<cufftComplex*>(probe_spectrum),
                           reinterpret_cast<cufftComplex*>(probe_spectrum), CUFFT_FORWARD),
              "cufftExecC2C", "probe, forward");
    check(cudaMemsetAsync(object_grad, 0, size_t(h * w) * sizeof(c32), stream), "cudaMemsetAsync", "object gradient");

    for (int64_t start = 0; start < count; start += max_batch)
      pass(indices + start, std::min(max_batch, count - start), start == 0);

    // ∂L/∂P* = F⁻¹[accumulated spectrum] (the 1/M is already in).
    check_fft(cufftExecC2C(plan_one, reinterpret_cast<cufftComplex*>(probe_grad),
                           reinterpret_cast<cufftComplex*>(probe_grad), CUFFT_INVERSE),
              "cufftExecC2C", "probe gradient, inverse");
  }

  // The adapter has checked the id (no position gradient: the setup cannot ask for one here)
  // and read_tensor's size.
  DLTensor* tensor(tycho_tensor_id id) {
    if (id == TYCHO_TENSOR_FIXED_POINT_SUMS) return deterministic ? sums_view.get() : nullptr;
    return int(id) >= 0 && int(id) < 5 ? views[id].get() : nullptr;
  }

  void read_tensor(tycho_tensor_id id, void* dst, size_t size) {
    const DLTensor& t = *tensor(id);
    set_device();
    check(cudaMemcpyAsync(dst, t.data, size, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync",
          cat("reading tensor ", int(id)));
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", cat("reading tensor ", int(id)));
  }

  double collect_loss() {
    set_device();
    if (deterministic) {  // the finished batches' loss, every rank's (finish_batch has waited for each)
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "the iteration's batches");
      return std::exchange(finished_loss, 0.0);
    }
    check(cudaMemcpyAsync(loss_h, loss_d, sizeof(double), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync",
          "loss read-back");
    check(cudaMemsetAsync(loss_d, 0, sizeof(double), stream), "cudaMemsetAsync", "loss accumulator");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "the iteration's batches");
    return *loss_h;
  }
};

cuda_engine::cuda_engine(const tycho_engine_setup& setup, bool host_finishes)
    : p_(std::make_unique<impl>(setup, host_finishes)) {}
cuda_engine::~cuda_engine() = default;
void cuda_engine::compute_batch(const int64_t* indices, int64_t count) { p_->compute_batch(indices, count); }
DLTensor* cuda_engine::tensor(tycho_tensor_id id) { return p_->tensor(id); }
void cuda_engine::read_tensor(tycho_tensor_id id, void* dst, size_t bytes) { p_->read_tensor(id, dst, bytes); }
void* cuda_engine::stream() const { return p_->stream; }
double cuda_engine::collect_loss() { return p_->collect_loss(); }
DLTensor* cuda_engine::fixed_point_sums() { return p_->deterministic ? p_->sums_view.get() : nullptr; }
bool cuda_engine::finish_batch(bool ends_iteration) { return p_->finish_batch(ends_iteration); }

}  // namespace tycho::cuda
