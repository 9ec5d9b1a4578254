// A host array that owns its bytes, with a DLPack view: what the runtime hands out and saves.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tycho {

struct owned_array {
  std::string name;
  DLDataType dtype{kDLFloat, 32, 1};
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;

  int64_t count() const {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
  template <class T>
  const T* as() const { return reinterpret_cast<const T*>(bytes.data()); }
  // A view valid while this array lives and is not resized.
  DLTensor view() {
    DLTensor t{};
    t.data = bytes.data();
    t.device = {kDLCPU, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    return t;
  }
  // Copies a C-contiguous host tensor.
  static owned_array copy_of(const std::string& name, const DLTensor& t) {
    owned_array a;
    a.name = name;
    a.dtype = t.dtype;
    a.shape.assign(t.shape, t.shape + t.ndim);
    std::size_t n = std::size_t(a.count()) * ((t.dtype.bits * t.dtype.lanes + 7) / 8);
    a.bytes.resize(n);
    if (n) std::memcpy(a.bytes.data(), static_cast<const char*>(t.data) + t.byte_offset, n);
    return a;
  }
  template <class T>
  static owned_array from_vector(const std::string& name, DLDataType dtype,
                                 std::vector<int64_t> shape, const std::vector<T>& values) {
    owned_array a;
    a.name = name;
    a.dtype = dtype;
    a.shape = std::move(shape);
    a.bytes.resize(values.size() * sizeof(T));
    if (!values.empty()) std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
    return a;
  }
};

}  // namespace tycho
