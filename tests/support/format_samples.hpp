// Small files in each detector format, written by the tests' own writers with deterministic
// values, that RosettaSciIO read once (tests/realformats/make_reference.py --generated DIR):
// tests/realformats/reference.json holds its reading under "generated", and the tests compare
// tycho's reading of the same files with it. So the readers are checked against RosettaSciIO on
// what the shared real files do not cover (DM 4-D data and several images, DM3, EMPAD).
//   TYCHO_WRITE_FORMAT_SAMPLES=DIR build/bin/tycho_tests --gtest_filter='*GeneratedFiles*'
// writes them into DIR for the script.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dm_test_file.hpp"

namespace tycho::test {

// The value at C-order index k of a sample: small integers, so float32 and every integer type
// hold them exactly.
inline uint32_t sample_value(uint64_t k, uint32_t modulo) { return uint32_t((k * 2654435761u) >> 9) % modulo; }

template <class T>
std::string sample_bytes(uint64_t n, uint32_t modulo) {
  std::string out(std::size_t(n * sizeof(T)), '\0');
  for (uint64_t k = 0; k < n; ++k) {
    const T v = T(sample_value(k, modulo));
    std::memcpy(&out[std::size_t(k * sizeof(T))], &v, sizeof(T));
  }
  return out;
}

inline void write_sample(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// Writes the sample files into `dir`: gen_4d.dm4 (a thumbnail + a 4-D uint16 scan, calibrated),
// gen_3d.dm3 (a 3-D float32 stack; little-endian: RosettaSciIO reads DM pixels as
// little-endian whatever the header says, so big-endian files are checked by round trip only), gen_multi.dm4 (two 4-D images, int32 and
// uint8), gen_empad.xml + scan_x4_y3.raw (12 EMPAD frames of 128 x 130 float32).
inline void write_format_samples(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  dm_image_spec thumb{6, {8, 8}, sample_bytes<uint8_t>(64, 200), {}, "", -1, 0, "thumbnail"};
  dm_image_spec four{10, {9, 7, 4, 3}, sample_bytes<uint16_t>(9 * 7 * 4 * 3, 4000),
                     {{4.5, 0.05, "1/nm"}, {3.5, 0.05, "1/nm"}, {0, 0.2, "nm"}, {0, 0.2, "nm"}},
                     "Diffraction image", 1, 200e3, "scan"};
  write_sample(dir / "gen_4d.dm4", dm_bytes(4, true, {thumb, four}, {0}));
  dm_image_spec stack{2, {8, 6, 5}, sample_bytes<float>(8 * 6 * 5, 1000), {{0, 0.1, "1/nm"}, {0, 0.1, "1/nm"}, {0, 1, ""}},
                      "Diffraction image", -1, 300e3, "stack"};
  write_sample(dir / "gen_3d.dm3", dm_bytes(3, true, {stack}));
  dm_image_spec a{7, {5, 5, 2, 3}, sample_bytes<int32_t>(5 * 5 * 2 * 3, 100000), {{0, 0.02, "1/Å"}, {0, 0.02, "1/Å"},
                   {0, 1.5, "Å"}, {0, 1.5, "Å"}}, "Diffraction image", 1, 80e3, "first"};
  dm_image_spec b{6, {4, 6, 3, 2}, sample_bytes<uint8_t>(4 * 6 * 3 * 2, 250), {{0, 0.3, "1/nm"}, {0, 0.3, "1/nm"},
                   {0, 0.01, "µm"}, {0, 0.01, "µm"}}, "Diffraction image", 1, 80e3, "second"};
  write_sample(dir / "gen_multi.dm4", dm_bytes(4, true, {thumb, a, b}, {0}));
  // EMPAD: 128 x 130 float32 frames, the two last rows per frame a footer (999999 here).
  std::string raw;
  const uint64_t frame = 128 * 128;
  for (uint64_t f = 0; f < 12; ++f) {
    for (uint64_t k = 0; k < frame; ++k) {
      const float v = float(sample_value(f * frame + k, 5000));
      raw.append(reinterpret_cast<const char*>(&v), 4);
    }
    const float footer = 999999.0f;
    for (int k = 0; k < 2 * 128; ++k) raw.append(reinterpret_cast<const char*>(&footer), 4);
  }
  write_sample(dir / "scan_x4_y3.raw", raw);
  write_sample(dir / "gen_empad.xml",
               "<root name=\"gen\"><timestamp timestamp=\"1774471672.5\" isoformat=\"2026-03-25T16:47:52.586728\"/>"
               "<raw_file filename=\"scan_x4_y3.raw\"/><exposure_time>1</exposure_time>"
               "<scan_parameters mode=\"acquire\"><scan_size>0.6</scan_size><scan_resolution_y>3</scan_resolution_y>"
               "<scan_resolution_x>4</scan_resolution_x></scan_parameters>"
               "<iom_measurements><scan_rotation>0.0</scan_rotation><full_scan_field_of_view><scale_factor>0.72</scale_factor>"
               "<x>2.88e-09</x><y>2.88e-09</y></full_scan_field_of_view><nominal_camera_length>0.369</nominal_camera_length>"
               "<high_voltage>300000.0</high_voltage></iom_measurements></root>");
}

// Also into $TYCHO_WRITE_FORMAT_SAMPLES when set (for make_reference.py).
inline void write_format_samples_for_reference() {
  if (const char* dir = std::getenv("TYCHO_WRITE_FORMAT_SAMPLES")) write_format_samples(dir);
}

}  // namespace tycho::test
