// The built-in optimizers on device parameters (built with CUDA only). State lives on the
// parameter's device, allocated stream-ordered on the first step; every update is queued on the
// engine's stream without synchronising.
#pragma once

#include <cstdint>

#include "optimizer_elements.hpp"

namespace tycho::optimizers {

// Device moments of one parameter: Adam uses a and b (m, v), SGD only a (the velocity).
class device_state {
 public:
  device_state() = default;
  ~device_state();  // waits for the device, then frees
  device_state(const device_state&) = delete;
  device_state& operator=(const device_state&) = delete;

  // Throws tycho::sdk::error naming the failed CUDA call (OUT_OF_MEMORY for allocations).
  void adam_step(float* param, const float* grad, int64_t n, const adam_coefficients& c, void* stream,
                 int device);
  void sgd_step(float* param, const float* grad, int64_t n, const sgd_coefficients& c, void* stream,
                int device);

  // Saving and resuming (the optimizer vtable's state functions). Buffer `which` (0: a, 1: b)
  // into host memory after waiting for the device; zeros when it was never allocated.
  void read(int which, float* host, int64_t n, int device);
  // Buffer `which` from host memory (allocating `buffers` buffers of n floats if needed),
  // complete before it returns.
  void write(int which, const float* host, int64_t n, int buffers, int device);

 private:
  void ensure(int64_t n, int buffers, void* stream, int device);
  float* a_ = nullptr;
  float* b_ = nullptr;
  int64_t n_ = 0;
  int device_ = -1;
};

}  // namespace tycho::optimizers
