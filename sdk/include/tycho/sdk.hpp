// Header-only helpers for writing a tycho plugin in C++ against the C ABI (abi/tycho/*.h).
//
// - tycho::sdk::host(): the host table handed to this plugin at load (one per library).
// - tycho::sdk::guarded(f): runs f, turns any exception into a status + last-error message, so
//   no exception ever crosses the C boundary.
// - tycho::sdk::config_view: typed config look-ups whose errors name the key.
// - tensor helpers: dtype constants, element counts, shape checks with the array named.
// - TYCHO_PLUGIN(...): defines the exported entry function.
//
// A component is a C++ class turned into its kind's vtable by one template, whose functions
// run the class inside guarded() and check their arguments as the ABI states them:
// tycho/sdk/source.hpp, engine.hpp, loss.hpp, optimizer.hpp, reducer.hpp, format.hpp.
//
// A plugin must be compiled with hidden visibility (tycho_add_plugin does this) so that each
// library keeps its own host pointer.
#pragma once

#include <tycho/sdk/error.hpp>
#include <tycho/tycho_plugin.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tycho::sdk {

inline const tycho_host_api*& host_slot() {
  static const tycho_host_api* h = nullptr;
  return h;
}
inline const tycho_host_api* host() { return host_slot(); }

// Descriptor `init`: keeps the host table; refuses a host table too small for this SDK.
inline tycho_status init_host(const tycho_host_api* h) {
  if (h == nullptr || h->struct_size < sizeof(tycho_host_api)) return TYCHO_ERR_ABI_MISMATCH;
  host_slot() = h;
  return TYCHO_OK;
}

inline tycho_status report(tycho_status status, const std::string& message) {
  if (host() != nullptr) return host()->set_error(status, message.c_str());
  return status;
}

// Runs `f`; exceptions become a status and the thread's last-error message.
template <class F>
tycho_status guarded(F&& f) noexcept {
  try {
    f();
    return TYCHO_OK;
  } catch (const error& e) {
    return report(e.status, e.what());
  } catch (const std::bad_alloc&) {
    return report(TYCHO_ERR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return report(TYCHO_ERR_INTERNAL, e.what());
  } catch (...) {
    return report(TYCHO_ERR_INTERNAL, "unknown exception in plugin");
  }
}

inline void log(tycho_log_level level, const char* component, const std::string& message) {
  if (host() != nullptr) host()->log(level, component, message.c_str());
}

// Typed look-ups in one config table; a wrong type throws an error that names the key.
class config_view {
 public:
  explicit config_view(const tycho_config* cfg) : cfg_(cfg) {}

  std::optional<std::string> get_string(const char* key) const {
    const char* v = nullptr;
    if (!check(host()->config_get_string(cfg_, key, &v), key, "a string")) return std::nullopt;
    return std::string(v);
  }
  std::optional<double> get_double(const char* key) const {
    double v = 0;
    if (!check(host()->config_get_double(cfg_, key, &v), key, "a number")) return std::nullopt;
    return v;
  }
  std::optional<int64_t> get_int(const char* key) const {
    int64_t v = 0;
    if (!check(host()->config_get_int(cfg_, key, &v), key, "an integer")) return std::nullopt;
    return v;
  }
  std::optional<bool> get_bool(const char* key) const {
    int v = 0;
    if (!check(host()->config_get_bool(cfg_, key, &v), key, "true or false")) return std::nullopt;
    return v != 0;
  }
  std::string require_string(const char* key) const {
    auto v = get_string(key);
    if (!v) fail(TYCHO_ERR_INVALID_ARGUMENT, "missing config key '", key, "' in ", table_name(), " (a string)");
    return *v;
  }
  std::string base_dir() const { return cfg_ ? host()->config_base_dir(cfg_) : ""; }
  std::string table_name() const { return cfg_ ? host()->config_table_name(cfg_) : "(no table)"; }
  const tycho_config* raw() const { return cfg_; }

 private:
  bool check(tycho_status s, const char* key, const char* expected) const {
    if (cfg_ == nullptr || s == TYCHO_ERR_NOT_FOUND) return false;
    // The host's message names the table and says what is wrong (e.g. a non-finite number); keep it.
    if (s != TYCHO_OK) {
      const char* why = host()->last_error ? host()->last_error() : nullptr;
      if (why != nullptr && *why != '\0') fail(s, why);
      fail(s, "config key '", key, "' in ", table_name(), " must be ", expected);
    }
    return true;
  }
  const tycho_config* cfg_;
};

// ---- tensors

constexpr DLDataType dtype_float32{kDLFloat, 32, 1};
constexpr DLDataType dtype_float64{kDLFloat, 64, 1};
constexpr DLDataType dtype_complex64{kDLComplex, 64, 1};
constexpr DLDataType dtype_complex128{kDLComplex, 128, 1};
constexpr DLDataType dtype_uint8{kDLUInt, 8, 1};
constexpr DLDataType dtype_uint16{kDLUInt, 16, 1};
constexpr DLDataType dtype_int64{kDLInt, 64, 1};

inline bool same_dtype(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

inline std::string dtype_name(DLDataType t) {
  const char* base = t.code == kDLFloat     ? "float"
                     : t.code == kDLInt     ? "int"
                     : t.code == kDLUInt    ? "uint"
                     : t.code == kDLComplex ? "complex"
                     : t.code == kDLBfloat  ? "bfloat"
                                            : "?";
  return cat(base, int(t.bits));
}

inline int64_t element_count(const DLTensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

inline std::string shape_string(const DLTensor& t) {
  std::string s = "(";
  for (int i = 0; i < t.ndim; ++i) s += cat(i ? ", " : "", t.shape[i]);
  return s + ")";
}

inline bool is_contiguous(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expect = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expect) return false;
    expect *= t.shape[i];
  }
  return true;
}

// Throws unless `t` is a C-contiguous host tensor of `dtype` with `ndim` dimensions;
// `name` says which array in the message.
inline void expect_tensor(const DLTensor* t, const char* name, DLDataType dtype, int ndim) {
  if (t == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, "array '", name, "' is missing");
  if (!same_dtype(t->dtype, dtype))
    fail(TYCHO_ERR_BAD_DATA, "array '", name, "' has dtype ", dtype_name(t->dtype), ", expected ",
         dtype_name(dtype));
  if (t->ndim != ndim)
    fail(TYCHO_ERR_BAD_DATA, "array '", name, "' has shape ", shape_string(*t), " (", t->ndim,
         "-D), expected ", ndim, "-D");
  if (!is_contiguous(*t)) fail(TYCHO_ERR_BAD_DATA, "array '", name, "' is not C-contiguous");
}

template <class T>
T* data_of(const DLTensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
}

// A DLTensor view with its own shape storage.
struct tensor_view {
  std::vector<int64_t> shape;
  DLTensor t{};
  tensor_view() = default;
  tensor_view(void* data, DLDataType dtype, std::vector<int64_t> s,
              DLDevice dev = DLDevice{kDLCPU, 0})
      : shape(std::move(s)) {
    t.data = data;
    t.device = dev;
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
  }
  tensor_view(const tensor_view& o) : tensor_view(o.t.data, o.t.dtype, o.shape, o.t.device) {}
  tensor_view& operator=(const tensor_view& o) {
    shape = o.shape;
    t = o.t;
    t.shape = shape.data();
    return *this;
  }
  DLTensor* get() { return &t; }
  const DLTensor* get() const { return &t; }
};

// Fills a component record with this SDK's struct size and ABI version.
inline tycho_component component(tycho_component_kind kind, const char* name,
                                 const char* version, const char* description, uint32_t devices,
                                 const char* const* config_keys, const void* vtable) {
  return tycho_component{sizeof(tycho_component), TYCHO_ABI_VERSION, kind, name, version,
                         description, devices, config_keys, vtable, 0, nullptr};
}

// Typed key declarations (ABI 1.1), for a static array ended by end_of_settings():
//   const tycho_setting k_settings[] = {
//       setting("threads", TYCHO_SETTING_INTEGER, "0", "OpenMP threads; 0: all").at_least(0),
//       setting("fft_planning", TYCHO_SETTING_STRING, "\"estimate\"", "FFTW planning").one_of(k_planning),
//       end_of_settings()};
//   component(...).with_settings(k_settings) is spelled with_settings(component(...), k_settings).
struct setting : tycho_setting {
  constexpr setting(const char* key_, tycho_setting_type type_, const char* default_text_, const char* doc_,
                    const char* unit_ = nullptr)
      : tycho_setting{sizeof(tycho_setting), key_, type_, default_text_, 0u, 0.0, 0.0, nullptr, unit_, doc_} {}
  constexpr setting at_least(double v) const { return bound(TYCHO_SETTING_HAS_MIN, v, max); }
  constexpr setting above(double v) const { return bound(TYCHO_SETTING_HAS_MIN | TYCHO_SETTING_MIN_EXCLUSIVE, v, max); }
  constexpr setting at_most(double v) const { return bound(TYCHO_SETTING_HAS_MAX, min, v); }
  constexpr setting below(double v) const { return bound(TYCHO_SETTING_HAS_MAX | TYCHO_SETTING_MAX_EXCLUSIVE, min, v); }
  constexpr setting one_of(const char* const* values) const {
    setting s = *this;
    s.allowed = values;
    return s;
  }

 private:
  constexpr setting bound(uint32_t bits, double lo, double hi) const {
    setting s = *this;
    s.bounds |= bits;
    s.min = lo;
    s.max = hi;
    return s;
  }
};
constexpr tycho_setting end_of_settings() {
  return tycho_setting{sizeof(tycho_setting), nullptr, TYCHO_SETTING_STRING, nullptr, 0u, 0.0, 0.0, nullptr, nullptr, nullptr};
}
// The component with its typed key declarations (settings must outlive the plugin's use: static).
inline tycho_component with_settings(tycho_component c, const tycho_setting* settings) {
  c.settings = settings;
  return c;
}

}  // namespace tycho::sdk

// The oldest host ABI the plugin works with (tycho_plugin_descriptor::abi_version_required):
// by default the ABI it is built against. A plugin that uses nothing a later minor added may
// define it lower before including this header, e.g. ((1u << 16) | 0u), to load into older hosts
// of ABI 1.1 and later.
#ifndef TYCHO_PLUGIN_ABI_REQUIRED
#define TYCHO_PLUGIN_ABI_REQUIRED TYCHO_ABI_VERSION
#endif

// Defines the plugin's exported entry function over a static array of components.
#define TYCHO_PLUGIN(plugin_name, plugin_version, components_array)                          \
  extern "C" TYCHO_PLUGIN_EXPORT const tycho_plugin_descriptor* tycho_plugin_entry(void) {   \
    static const tycho_plugin_descriptor descriptor = {                                      \
        sizeof(tycho_plugin_descriptor),                                                     \
        TYCHO_ABI_VERSION,                                                                   \
        plugin_name,                                                                         \
        plugin_version,                                                                      \
        &tycho::sdk::init_host,                                                              \
        static_cast<int64_t>(sizeof(components_array) / sizeof(components_array[0])),        \
        components_array,                                                                    \
        TYCHO_PLUGIN_ABI_REQUIRED,                                                           \
        TYCHO_DLPACK_VERSION};                                                               \
    return &descriptor;                                                                      \
  }
