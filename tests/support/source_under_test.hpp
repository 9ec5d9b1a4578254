// A source component opened the way the host opens one, its [data] table parsed from TOML text,
// for the tests of each source (emd, npy, cxi and hdf5, simulate): open, info, reads and
// positions with their statuses checked.
//
//   tycho::test::source_under_test s;
//   ASSERT_EQ(s.open(tycho::test::plugins(), "emd", "path = 'a.h5'\n", dir), TYCHO_OK);
//   std::vector<float> first_two = s.read(0, 2);
#pragma once

#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/sdk.hpp>
#include <tycho/tycho_components.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tycho::test {

class source_under_test {
 public:
  source_under_test() = default;
  ~source_under_test() { close(); }
  source_under_test(const source_under_test&) = delete;
  source_under_test& operator=(const source_under_test&) = delete;

  // Opens component `source` of `reg` on "[data]\nsource = \"<source>\"\n" + data_toml, relative
  // paths resolving against `base_dir`; whatever was open is closed first.
  tycho_status open(const tycho::host::registry& reg, const std::string& source, const std::string& data_toml,
                    const std::string& base_dir) {
    auto doc = tycho::config_document::parse("[data]\nsource = \"" + source + "\"\n" + data_toml, "<test>", base_dir);
    tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
    close();
    vt = reg.find(TYCHO_COMPONENT_SOURCE, source).as<tycho_source_vtable>();
    return vt->open(&cfg, &src);
  }

  void close() {
    if (src != nullptr) vt->close(src);
    src = nullptr;
  }

  tycho_dataset_info info() {
    tycho_dataset_info i{};
    i.struct_size = sizeof(i);
    EXPECT_EQ(vt->info(src, &i), TYCHO_OK) << tycho::last_error();
    return i;
  }

  // Patterns [first, first + count) as (count, Qx, Qy) float32, the buffer filled with `fill`
  // before the read (so that a pixel the source left unwritten shows).
  std::vector<float> read(int64_t first, int64_t count, float fill = 0.0f) {
    return read_as<float>(first, count, fill, {kDLFloat, 32, 1});
  }

  // Patterns [first, first + count) as (count, Qx, Qy) uint16, the stored dtype of a source that
  // delivers it (tycho_dataset_info::reads_stored_dtype), the buffer filled with `fill` first.
  std::vector<uint16_t> read_uint16(int64_t first, int64_t count, uint16_t fill = 0xabcd) {
    return read_as<uint16_t>(first, count, fill, {kDLUInt, 16, 1});
  }

  // The read into a buffer of T (`dtype`) filled with `fill`.
  template <class T>
  std::vector<T> read_as(int64_t first, int64_t count, T fill, DLDataType dtype) {
    tycho_dataset_info i = info();
    std::vector<T> buf(size_t(count * i.detector_shape[0] * i.detector_shape[1]), fill);
    int64_t shape[3] = {count, i.detector_shape[0], i.detector_shape[1]};
    DLTensor t{};
    t.data = buf.data();
    t.device = {kDLCPU, 0};
    t.ndim = 3;
    t.dtype = dtype;
    t.shape = shape;
    EXPECT_EQ(vt->read(src, first, count, &t), TYCHO_OK) << tycho::last_error();
    return buf;
  }

  // read_positions: the status, and the (P, 2) values in Å on success.
  tycho_status positions(std::vector<double>& out) {
    tycho_dataset_info i = info();
    const int64_t p = i.scan_shape[0] * i.scan_shape[1];
    out.assign(size_t(2 * p), NAN);
    tycho::sdk::tensor_view t(out.data(), DLDataType{kDLFloat, 64, 1}, {p, 2});
    EXPECT_GE(vt->struct_size, offsetof(tycho_source_vtable, read_positions) + sizeof(void*));
    return vt->read_positions ? vt->read_positions(src, t.get()) : TYCHO_ERR_UNSUPPORTED;
  }

  // read_detector_mask: the status, and the (Qx, Qy) mask (nonzero = bad) on success.
  tycho_status detector_mask(std::vector<uint8_t>& out) {
    tycho_dataset_info i = info();
    out.assign(size_t(i.detector_shape[0] * i.detector_shape[1]), 0xee);
    tycho::sdk::tensor_view t(out.data(), DLDataType{kDLUInt, 8, 1}, {i.detector_shape[0], i.detector_shape[1]});
    EXPECT_GE(vt->struct_size, offsetof(tycho_source_vtable, read_detector_mask) + sizeof(void*));
    return vt->read_detector_mask ? vt->read_detector_mask(src, t.get()) : TYCHO_ERR_UNSUPPORTED;
  }

  const tycho_source_vtable* vt = nullptr;
  tycho_source* src = nullptr;
};

}  // namespace tycho::test
