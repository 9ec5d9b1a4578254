// What the component adapters (engine.hpp, optimizer.hpp, reducer.hpp, format.hpp, source.hpp,
// loss.hpp) share: the name a component goes by in messages, the device types it lists, the
// handle-to-instance step, and the detection of a class's optional members.
//
// Each adapter turns a plugin author's C++ class into its kind's vtable through one template;
// every vtable function it makes runs the class inside tycho::sdk::guarded() (sdk.hpp), the one
// exception-to-status barrier: tycho::sdk::error keeps its status, std::bad_alloc becomes
// TYCHO_ERR_OUT_OF_MEMORY, anything else TYCHO_ERR_INTERNAL, and the message becomes the
// thread's last error. C++17, like the rest of the SDK.
#pragma once

#include <tycho/sdk.hpp>

#include <string>
#include <type_traits>
#include <utility>

namespace tycho::sdk {

// Who a component is, for messages and device checks: "cpu" and TYCHO_DEVICE_BIT(kDLCPU) give
// "cpu engine: ...". One per adapted class (see each adapter's *_vtable function).
struct component_identity {
  const char* name = "?";
  const char* kind = "component";  // "engine", "optimizer", "reducer", "source", "format", "loss"
  uint32_t devices = 0;            // TYCHO_DEVICE_BIT(...) of the device types it works on

  // "cpu engine"
  std::string who() const { return cat(name, " ", kind); }
  bool supports(DLDevice d) const {
    return int(d.device_type) >= 0 && int(d.device_type) < 32 && (devices & TYCHO_DEVICE_BIT(d.device_type)) != 0;
  }
};

// "the CPU", "CUDA devices", "the CPU and CUDA devices", "device types 7 and 13": the device
// types of a TYCHO_DEVICE_BIT mask, for messages.
inline std::string device_names(uint32_t devices) {
  std::string out;
  int listed = 0, total = 0;
  for (int t = 0; t < 32; ++t) total += (devices >> t) & 1u;
  for (int t = 0; t < 32; ++t) {
    if (((devices >> t) & 1u) == 0) continue;
    const std::string one = t == kDLCPU ? "the CPU" : t == kDLCUDA ? "CUDA devices" : t == kDLCUDAHost ? "pinned host memory" : cat("device type ", t);
    out += cat(listed == 0 ? "" : listed + 1 == total ? " and " : ", ", one);
    ++listed;
  }
  return listed == 0 ? std::string("no device") : out;
}

namespace detail {

// The instance behind an opaque handle; a NULL handle is an error naming the call.
template <class T, class Handle>
T& instance_of(Handle* handle, const component_identity& id, const char* call) {
  if (handle == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": ", call, "() without an instance");
  return *reinterpret_cast<T*>(handle);
}

// A vtable of kind V with its head filled (this SDK's size and ABI version) and every function
// NULL, for an adapter to fill.
template <class V>
V vtable_head() {
  V vt{};
  vt.struct_size = sizeof(V);
  vt.abi_version = TYCHO_ABI_VERSION;
  return vt;
}

// Whether a host may hand this tensor's memory to plain C++ (kDLCPU, or pinned kDLCUDAHost).
inline bool on_host(const DLTensor& t) {
  return t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost;
}

// Boxes [row0, row1, col0, col1) of a (height, width) plane, n rows of four: each non-empty and
// inside it (the ABI's region calls: tycho_engine_vtable::set_gradient_region, tycho_step_info).
inline void check_boxes(const std::string& who, const int64_t* boxes, int64_t n, int64_t height, int64_t width) {
  if (n < 0) fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": negative box count ", n);
  if (n > 0 && boxes == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": ", n, " boxes but no box list");
  for (int64_t k = 0; k < n; ++k) {
    const int64_t* b = boxes + 4 * k;
    if (!(b[0] >= 0 && b[0] < b[1] && b[1] <= height && b[2] >= 0 && b[2] < b[3] && b[3] <= width))
      fail(TYCHO_ERR_INVALID_ARGUMENT, who, ": box ", k, " [", b[0], ", ", b[1], ") x [", b[2], ", ", b[3],
           ") is empty or outside the ", height, " x ", width, " plane");
  }
}

}  // namespace detail
}  // namespace tycho::sdk

// TYCHO_SDK_DETECT(has_stream, std::declval<T&>().stream()) defines has_stream<T>: true when the
// expression is valid for the class T (an optional member of an adapted class).
#define TYCHO_SDK_DETECT(trait, ...)                                 \
  template <class T, class = void>                                   \
  struct trait : std::false_type {};                                 \
  template <class T>                                                 \
  struct trait<T, std::void_t<decltype(__VA_ARGS__)>> : std::true_type {}
