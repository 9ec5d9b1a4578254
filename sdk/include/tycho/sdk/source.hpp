// A source component from a C++ class: the tycho_source_vtable, its one exception barrier and
// the checks every source makes of a request, written once; and the helpers sources share
// (resolving a config path, handing out the append-only tycho_dataset_info).
//
//   struct my_source {
//     explicit my_source(const tycho::sdk::config_view& cfg);  // open(): cfg is the [data] table
//     const tycho_dataset_info& info() const;                  // shapes, dtype, calibrations
//     // Patterns [first, first + count) in scan order into (count, Qx, Qy) float32 host memory;
//     // the request is checked against info() and count > 0.
//     void read(int64_t first, int64_t count, float* dst);
//     // Optional: the same patterns in the stored dtype, unconverted: count·Qx·Qy elements of
//     // info().stored_dtype at `dst`. Offered to the host (tycho_dataset_info::reads_stored_dtype)
//     // only when the stored dtype is uint8, uint16 or float16, so integer counts reach the host
//     // as integers, without a float32 copy of the scan (docs/plugin-guide.md).
//     void read_stored(int64_t first, int64_t count, void* dst);
//     // Optional, with read_stored: false when this data set cannot be delivered as stored, e.g.
//     // because the source marks pixels it inserts or masks as NaN (only float32 can say so).
//     bool delivers_stored() const;
//     // Optional: a data set that lists its positions: (P, 2) Å in scan order (empty: a raster,
//     // whose read_positions answers TYCHO_ERR_UNSUPPORTED).
//     const std::vector<double>& positions_A() const;
//     // Optional: the detector's own mask, (Qx, Qy) in the frame read() delivers, nonzero = a
//     // bad pixel (empty: the data set has none; read_detector_mask answers TYCHO_ERR_UNSUPPORTED).
//     const std::vector<uint8_t>& detector_mask() const;
//     // Optional: a type whose object is held around every call (open, info, read, close), e.g.
//     // tycho::h5::h5_session (the HDF5 lock) for the sources that read HDF5.
//     using call_scope = ...;
//   };
//   component(TYCHO_COMPONENT_SOURCE, "mine", "1.0.0", "...", TYCHO_DEVICE_BIT(kDLCPU), keys,
//             tycho::sdk::source_vtable<my_source>("mine"))
//
// Errors name "<name> source" and the data set (info().description).
#pragma once

#include <tycho/sdk.hpp>
#include <tycho/sdk/adapter.hpp>
#include <tycho/sdk/checked.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tycho::sdk {

// `path` from a config table, made absolute against the config file's folder (unless it is
// absolute already, or the config came from text with no folder).
inline std::string resolve_path(const std::string& base_dir, const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_absolute() || base_dir.empty()) return p.string();
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

// Copies `info` into the caller's struct, append-only style: only the bytes both sides know.
// A zeroed struct_size means the caller's build matches this one (a value-initialised struct).
inline void copy_dataset_info(const tycho_dataset_info& info, tycho_dataset_info* out) {
  std::size_t n = out->struct_size == 0
                      ? sizeof(tycho_dataset_info)
                      : std::min<std::size_t>(out->struct_size, sizeof(tycho_dataset_info));
  tycho_dataset_info copy = info;
  copy.struct_size = static_cast<uint32_t>(n);
  std::memcpy(out, &copy, n);
}

// The stored dtypes a source may deliver unconverted (tycho_dataset_info::reads_stored_dtype):
// uint8 and uint16 counts, float16. (float32 is what read() always delivers.)
inline bool deliverable_stored_dtype(DLDataType t) {
  return t.lanes == 1 && ((t.code == kDLUInt && (t.bits == 8 || t.bits == 16)) || (t.code == kDLFloat && t.bits == 16));
}

// Throws unless patterns [first, first+count) exist in a (scan[0] x scan[1]) data set and `dst`
// is a host (count, detector[0], detector[1]) array of float32, or of `stored` when given (a
// source whose info() sets reads_stored_dtype). `source` names the component.
inline void check_read_request(const char* source, const std::string& description,
                               const int64_t scan[2], const int64_t detector[2], int64_t first,
                               int64_t count, const DLTensor* dst, const DLDataType* stored = nullptr) {
  const int64_t total = checked_mul(scan[0], scan[1]).value_or(-1);
  if (total < 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "'", description, "' declares ", scan[0], " x ", scan[1],
         " patterns, which is not a valid count");
  if (first < 0 || count < 0 || first > total || count > total - first)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "patterns [", first, ", ", first + count,
         ") are out of range: '", description, "' holds ", total, " patterns (", scan[0], " x ",
         scan[1], ")");
  if (stored != nullptr && dst != nullptr && dst->dtype.code == stored->code && dst->dtype.bits == stored->bits &&
      dst->dtype.lanes == stored->lanes) {
    expect_tensor(dst, "patterns", *stored, 3);
  } else if (dst != nullptr && !(dst->dtype.code == kDLFloat && dst->dtype.bits == 32 && dst->dtype.lanes == 1)) {
    fail(TYCHO_ERR_INVALID_ARGUMENT, source, " source: the patterns array is ", dtype_name(dst->dtype), ", expected float32",
         stored != nullptr ? cat(" or the stored ", dtype_name(*stored)) : std::string(), " to read '", description,
         "' (a host asks for the stored dtype only when info() sets reads_stored_dtype)");
  } else {
    expect_tensor(dst, "patterns", dtype_float32, 3);
  }
  if (dst->device.device_type != kDLCPU && dst->device.device_type != kDLCUDAHost)
    fail(TYCHO_ERR_INVALID_ARGUMENT, source, " source: the patterns array must be in host memory");
  if (dst->shape[0] != count || dst->shape[1] != detector[0] || dst->shape[2] != detector[1])
    fail(TYCHO_ERR_INVALID_ARGUMENT, "the patterns array has shape ", shape_string(*dst),
         ", expected (", count, ", ", detector[0], ", ", detector[1], ") to read ", count,
         " patterns of '", description, "'");
}

// Throws unless `dst` is a host uint8 (Qx, Qy) array, as read_detector_mask() takes.
inline void check_detector_mask_request(const char* source, const std::string& description,
                                        const int64_t detector[2], const DLTensor* dst) {
  expect_tensor(dst, "detector mask", dtype_uint8, 2);
  if (dst->device.device_type != kDLCPU && dst->device.device_type != kDLCUDAHost)
    fail(TYCHO_ERR_INVALID_ARGUMENT, source, " source: the detector mask array must be in host memory");
  if (dst->shape[0] != detector[0] || dst->shape[1] != detector[1])
    fail(TYCHO_ERR_INVALID_ARGUMENT, "the detector mask array has shape ", shape_string(*dst), ", expected (",
         detector[0], ", ", detector[1], ") for the detector of '", description, "'");
}

// Throws unless `dst` is a host float64 (scan[0]·scan[1], 2) array, as read_positions() takes.
inline void check_positions_request(const char* source, const std::string& description,
                                    const int64_t scan[2], const DLTensor* dst) {
  expect_tensor(dst, "positions", dtype_float64, 2);
  const int64_t total = checked_mul(scan[0], scan[1]).value_or(-1);
  if (dst->device.device_type != kDLCPU && dst->device.device_type != kDLCUDAHost)
    fail(TYCHO_ERR_INVALID_ARGUMENT, source, " source: the positions array must be in host memory");
  if (total < 0 || dst->shape[0] != total || dst->shape[1] != 2)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "the positions array has shape ", shape_string(*dst),
         ", expected (", total, ", 2) for the positions of '", description, "'");
}

namespace detail {
TYCHO_SDK_DETECT(source_has_positions, std::declval<const T&>().positions_A());
TYCHO_SDK_DETECT(source_has_scope, typename T::call_scope{});
TYCHO_SDK_DETECT(source_has_detector_mask, std::declval<const T&>().detector_mask());
TYCHO_SDK_DETECT(source_has_read_stored, std::declval<T&>().read_stored(int64_t{}, int64_t{}, static_cast<void*>(nullptr)));
TYCHO_SDK_DETECT(source_has_delivers_stored, bool(std::declval<const T&>().delivers_stored()));
struct no_scope {};
template <class S, bool = source_has_scope<S>::value>
struct scope_of {
  using type = no_scope;
};
template <class S>
struct scope_of<S, true> {
  using type = typename S::call_scope;
};
}  // namespace detail

// The trampolines of source class S: each vtable function inside guarded(), inside S's
// call_scope when it has one.
template <class S>
struct source_adapter {
  static inline component_identity id{"?", "source", TYCHO_DEVICE_BIT(kDLCPU)};
  using scope = typename detail::scope_of<S>::type;

  static S& self(tycho_source* src, const char* call) { return detail::instance_of<S>(src, id, call); }

  static tycho_status open(const tycho_config* cfg, tycho_source** out) {
    if (out != nullptr) *out = nullptr;
    return guarded([&] {
      if (out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": open() needs an output");
      [[maybe_unused]] scope held;  // constructed first: a failed open closes inside it
      auto s = std::make_unique<S>(config_view(cfg));
      *out = reinterpret_cast<tycho_source*>(s.release());
    });
  }
  static tycho_status info(tycho_source* src, tycho_dataset_info* out) {
    return guarded([&] {
      const S& s = self(src, "info");
      if (out == nullptr) fail(TYCHO_ERR_INVALID_ARGUMENT, id.who(), ": info() needs an output");
      tycho_dataset_info i = s.info();
      i.reads_stored_dtype = reads_stored(s, i) ? 1 : 0;
      copy_dataset_info(i, out);
    });
  }
  // Whether S delivers `i`'s stored dtype unconverted: it has read_stored, the dtype is one a
  // host may ask for, and S does not decline (delivers_stored).
  static bool reads_stored(const S& s, const tycho_dataset_info& i) {
    if constexpr (detail::source_has_read_stored<S>::value) {
      if constexpr (detail::source_has_delivers_stored<S>::value) {
        if (!s.delivers_stored()) return false;
      }
      return deliverable_stored_dtype(i.stored_dtype);
    } else {
      (void)s;
      return false;
    }
  }
  static tycho_status read(tycho_source* src, int64_t first, int64_t count, DLTensor* dst) {
    return guarded([&] {
      S& s = self(src, "read");
      const tycho_dataset_info& i = s.info();
      const bool stored = reads_stored(s, i);
      check_read_request(id.name, i.description != nullptr ? i.description : id.name, i.scan_shape,
                         i.detector_shape, first, count, dst, stored ? &i.stored_dtype : nullptr);
      if (count == 0) return;
      [[maybe_unused]] scope held;
      if (dst->dtype.code == kDLFloat && dst->dtype.bits == 32) {
        s.read(first, count, data_of<float>(*dst));
      } else if constexpr (detail::source_has_read_stored<S>::value) {
        s.read_stored(first, count, static_cast<unsigned char*>(dst->data) + dst->byte_offset);
      }
    });
  }
  static tycho_status read_positions(tycho_source* src, DLTensor* dst) {
    return guarded([&] {
      const S& s = self(src, "read_positions");
      const tycho_dataset_info& i = s.info();
      const std::string description = i.description != nullptr ? i.description : id.name;
      const std::vector<double>& positions = s.positions_A();
      if (positions.empty())
        fail(TYCHO_ERR_UNSUPPORTED, "'", description, "' is a raster: its positions follow from [data] scan_step_A");
      check_positions_request(id.name, description, i.scan_shape, dst);
      if (int64_t(positions.size()) != element_count(*dst))
        fail(TYCHO_ERR_INTERNAL, id.who(), ": holds ", positions.size() / 2, " positions for ", dst->shape[0],
             " patterns");
      std::memcpy(data_of<double>(*dst), positions.data(), positions.size() * sizeof(double));
    });
  }
  static tycho_status read_detector_mask(tycho_source* src, DLTensor* dst) {
    return guarded([&] {
      const S& s = self(src, "read_detector_mask");
      const tycho_dataset_info& i = s.info();
      const std::string description = i.description != nullptr ? i.description : id.name;
      const std::vector<uint8_t>& mask = s.detector_mask();
      if (mask.empty()) fail(TYCHO_ERR_UNSUPPORTED, "'", description, "' has no detector mask");
      check_detector_mask_request(id.name, description, i.detector_shape, dst);
      if (int64_t(mask.size()) != element_count(*dst))
        fail(TYCHO_ERR_INTERNAL, id.who(), ": holds a mask of ", mask.size(), " pixels for a detector of ",
             element_count(*dst));
      std::memcpy(data_of<uint8_t>(*dst), mask.data(), mask.size());
    });
  }
  static void close(tycho_source* src) {
    if (src == nullptr) return;
    (void)guarded([&] {
      [[maybe_unused]] scope held;
      delete reinterpret_cast<S*>(src);
    });
  }

  static tycho_source_vtable make_vtable() {
    auto vt = detail::vtable_head<tycho_source_vtable>();
    vt.open = &open;
    vt.info = &info;
    vt.read = &read;
    vt.close = &close;
    if constexpr (detail::source_has_positions<S>::value) vt.read_positions = &read_positions;
    if constexpr (detail::source_has_detector_mask<S>::value) vt.read_detector_mask = &read_detector_mask;
    return vt;
  }
  static inline const tycho_source_vtable vtable = make_vtable();
};

// The vtable of source class S, named `name` in messages. One per class S.
template <class S>
const tycho_source_vtable* source_vtable(const char* name) {
  source_adapter<S>::id.name = name;
  return &source_adapter<S>::vtable;
}

}  // namespace tycho::sdk
