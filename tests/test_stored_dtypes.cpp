// What each stored dtype becomes on its way to the engine. Sources deliver float32 to the host
// (tycho_source_vtable::read), so: integer counts up to 2^24 = 16777216 and every float16 value
// are exact in float32 and reach the engine's targets unchanged (uint8, uint16, uint32, float16
// through the `npy` source, then the host's read_dataset and mask_bad_pixels); larger integers
// are rounded and warned about, naming the largest value; the stored dtype's maximum is masked
// as saturated (integers), float16's inf and NaN as non-finite.
#include <gtest/gtest.h>
#include <unistd.h>

#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/host/dataset.hpp>

#include <toml++/toml.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../host/src/data/bad_pixels.hpp"
#include "built_in_plugins.hpp"
#include "npy_file.hpp"
#include "run_command.hpp"

namespace fs = std::filesystem;

namespace {

// float16 bits → value, computed from the definition (not the plugin's bit manipulation):
// (−1)^s · mant · 2^−24 for exponent 0, (−1)^s · (1024 + mant) · 2^(e − 25) otherwise.
float half_reference(uint16_t h) {
  const int e = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return mant ? std::numeric_limits<float>::quiet_NaN() : float(sign * HUGE_VAL);
  if (e == 0) return float(sign * std::ldexp(double(mant), -24));
  return float(sign * std::ldexp(double(1024 + mant), e - 25));
}

bool same_bits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

class StoredDtypes : public ::testing::Test {
 protected:
  // The file read through the npy source as the host reads it (not centred: the targets keep
  // the stored order), bad pixels masked with the default settings.
  tycho::host::dataset host_read(const std::string& file, std::string* warning = nullptr) {
    auto doc = tycho::config_document::parse("[data]\nsource = \"npy\"\npath = \"" + file + "\"\ncentred = false\n",
                                             "<test>", tmp_.path().string());
    tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
    const auto& source = tycho::test::plugins().find(TYCHO_COMPONENT_SOURCE, "npy");
    tycho::host::dataset d = tycho::host::read_dataset(source, &cfg);
    const std::string w = tycho::host::mask_bad_pixels(
        d, tycho::host::read_bad_pixel_settings(toml::table{}, "<test>", d.info.stored_dtype));
    if (warning) *warning = w;
    return d;
  }
  // What the source alone delivers for every pattern.
  std::vector<float> source_read(const std::string& file) {
    auto doc = tycho::config_document::parse("[data]\npath = \"" + file + "\"\n", "<test>", tmp_.path().string());
    tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
    const auto* vt = tycho::test::plugins().find(TYCHO_COMPONENT_SOURCE, "npy").as<tycho_source_vtable>();
    tycho_source* src = nullptr;
    EXPECT_EQ(vt->open(&cfg, &src), TYCHO_OK) << tycho::last_error();
    if (!src) return {};
    tycho_dataset_info info{};
    info.struct_size = sizeof info;
    EXPECT_EQ(vt->info(src, &info), TYCHO_OK);
    const int64_t n = info.scan_shape[0] * info.scan_shape[1];
    std::vector<float> out(std::size_t(n * info.detector_shape[0] * info.detector_shape[1]));
    int64_t shape[3] = {n, info.detector_shape[0], info.detector_shape[1]};
    DLTensor t{out.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
    EXPECT_EQ(vt->read(src, 0, n, &t), TYCHO_OK) << tycho::last_error();
    vt->close(src);
    return out;
  }
  tycho::test::temp_folder tmp_;
};

// Every uint8 and uint16 value reaches the source's float32 exactly; through the host every
// value below the dtype's maximum is unchanged and the maximum (255, 65535) is masked.
TEST_F(StoredDtypes, Uint8AndUint16AreExact) {
  std::vector<uint8_t> u8(16 * 16);  // one pattern holding every value
  for (std::size_t k = 0; k < u8.size(); ++k) u8[k] = uint8_t(k);
  tycho::test::write_npy(tmp_ / "u8.npy", "|u1", {1, 1, 16, 16}, u8.data(), u8.size());
  std::vector<uint16_t> u16(256 * 256);
  for (std::size_t k = 0; k < u16.size(); ++k) u16[k] = uint16_t(k);
  tycho::test::write_npy(tmp_ / "u16.npy", "<u2", {1, 1, 256, 256}, u16.data(), u16.size() * 2);

  const auto s8 = source_read(tmp_ / "u8.npy");
  ASSERT_EQ(s8.size(), u8.size());
  for (std::size_t k = 0; k < u8.size(); ++k) ASSERT_EQ(s8[k], float(u8[k])) << k;
  const auto s16 = source_read(tmp_ / "u16.npy");
  ASSERT_EQ(s16.size(), u16.size());
  for (std::size_t k = 0; k < u16.size(); ++k) ASSERT_EQ(s16[k], float(u16[k])) << k;

  std::string w8, w16;
  const auto d8 = host_read(tmp_ / "u8.npy", &w8);
  EXPECT_EQ(d8.info.stored_dtype.bits, 8);
  EXPECT_EQ(d8.bad_pixels.saturated_values, 1) << w8;
  for (std::size_t k = 0; k < u8.size(); ++k) ASSERT_EQ(d8.targets[k], u8[k] == 255 ? 0.f : float(u8[k])) << k;
  EXPECT_NE(w8.find("saturation_value = 255 (the maximum of the stored uint8)"), std::string::npos) << w8;
  const auto d16 = host_read(tmp_ / "u16.npy", &w16);
  EXPECT_EQ(d16.bad_pixels.masked_pixels, 1) << w16;
  for (std::size_t k = 0; k < u16.size(); ++k) ASSERT_EQ(d16.targets[k], u16[k] == 65535 ? 0.f : float(u16[k])) << k;
  EXPECT_EQ(tycho::host::float32_rounding_warning(d16), "");
}

// uint32 counts up to 2^24 are exact; above it they are rounded, and the host warns naming the
// largest value.
TEST_F(StoredDtypes, Uint32IsExactUpTo2To24) {
  std::vector<uint32_t> exact = {0, 1, 2, 3, 1000, 65535, 65536, 1u << 20, (1u << 24) - 1, 1u << 24};
  std::mt19937 gen(5);
  while (exact.size() < 2 * 3 * 4 * 4) exact.push_back(std::uniform_int_distribution<uint32_t>(0, 1u << 24)(gen));
  tycho::test::write_npy(tmp_ / "exact.npy", "<u4", {2, 3, 4, 4}, exact.data(), exact.size() * 4);
  std::string w;
  const auto d = host_read(tmp_ / "exact.npy", &w);
  EXPECT_EQ(w, "");
  for (std::size_t k = 0; k < exact.size(); ++k) {
    ASSERT_EQ(d.targets[k], float(exact[k])) << k;
    ASSERT_EQ(double(d.targets[k]), double(exact[k])) << k;  // and that is the integer itself
  }
  // 2^24 itself is exact but is where rounding starts: warned.
  EXPECT_NE(tycho::host::float32_rounding_warning(d).find("16777216"), std::string::npos);

  std::vector<uint32_t> large(2 * 3 * 4 * 4, 7);
  large[5] = (1u << 24) + 1;  // → 16777216
  large[9] = 4000000000u;     // exactly representable: 15625000 · 2^8
  large[10] = 4000000001u;    // → 4000000000
  tycho::test::write_npy(tmp_ / "large.npy", "<u4", {2, 3, 4, 4}, large.data(), large.size() * 4);
  const auto l = host_read(tmp_ / "large.npy");
  EXPECT_EQ(l.targets[5], 16777216.f);
  EXPECT_EQ(l.targets[10], 4000000000.f);
  EXPECT_EQ(l.max_value, 4000000000.0);
  const std::string lw = tycho::host::float32_rounding_warning(l);
  for (const char* part : {"stored as uint32", "reach 4000000000", "2^24 = 16777216", "rounded"})
    EXPECT_NE(lw.find(part), std::string::npos) << "'" << part << "' not in: " << lw;
  EXPECT_EQ(l.bad_pixels.masked_pixels, 0);  // below the uint32 maximum: not saturated
}

// Every float16 value, sign and special included, becomes the same float32 (by the definition
// of the format); through the host the finite non-negative ones are unchanged and inf and NaN
// are masked (float data have no saturation value, so 65504, the largest, is kept).
TEST_F(StoredDtypes, Float16IsExact) {
  std::vector<uint16_t> all(4 * 4 * 64 * 64);
  for (std::size_t k = 0; k < all.size(); ++k) all[k] = uint16_t(k);
  tycho::test::write_npy(tmp_ / "all.npy", "<f2", {4, 4, 64, 64}, all.data(), all.size() * 2);
  const auto s = source_read(tmp_ / "all.npy");
  ASSERT_EQ(s.size(), all.size());
  for (std::size_t k = 0; k < all.size(); ++k)
    ASSERT_TRUE(same_bits(s[k], half_reference(all[k]))) << "float16 bits 0x" << std::hex << k;
  EXPECT_EQ(s[0x3c00], 1.f);
  EXPECT_EQ(s[0x7bff], 65504.f);
  EXPECT_EQ(s[0x0001], std::ldexp(1.f, -24));

  // The finite non-negative values (0x0000 to 0x7bff) through the host: unchanged.
  std::vector<uint16_t> finite(124 * 256);
  for (std::size_t k = 0; k < finite.size(); ++k) finite[k] = uint16_t(k);
  ASSERT_EQ(finite.back(), 0x7bff);
  tycho::test::write_npy(tmp_ / "finite.npy", "<f2", {1, 1, 124, 256}, finite.data(), finite.size() * 2);
  std::string w;
  const auto d = host_read(tmp_ / "finite.npy", &w);
  EXPECT_EQ(w, "");
  for (std::size_t k = 0; k < finite.size(); ++k) ASSERT_TRUE(same_bits(d.targets[k], half_reference(finite[k]))) << k;
  EXPECT_EQ(d.max_value, 65504.0);
  EXPECT_EQ(tycho::host::float32_rounding_warning(d), "");  // float data: nothing rounded

  // inf and NaN are masked (in both patterns), the largest finite value is kept.
  const std::vector<uint16_t> special = {0x3c00, 0x7c00, 0x7e00, 0x7bff, 0x4000, 0x4200, 0x7c01, 0x4400};
  tycho::test::write_npy(tmp_ / "special.npy", "<f2", {1, 2, 2, 2}, special.data(), special.size() * 2);
  const auto sp = host_read(tmp_ / "special.npy", &w);
  EXPECT_EQ(sp.bad_pixels.nonfinite_values, 3) << w;
  EXPECT_EQ(sp.bad_pixels.masked_pixels, 2) << w;  // 2 of 4: at max_masked_fraction = 0.5, accepted
  EXPECT_FALSE(sp.bad_pixels.saturation_value.has_value());
  EXPECT_EQ(sp.targets, (std::vector<float>{1.f, 0.f, 0.f, 65504.f, 2.f, 0.f, 0.f, 4.f}));
}

}  // namespace

namespace {

// Integer counts stay integer until the loss: asked for (the default for counts a source delivers as
// such, and for device engines), the MoS2
// counts (uint16) are read as uint16 (the source delivers its stored dtype) and reach the engine
// as uint16 targets (half the memory), widened exactly before the loss, so the run equals the
// float32 one bit for bit; data that are no longer whole numbers
// (normalised) go as float32.
TEST(IntegerTargets, CountsReachTheEngineAsUint16AndChangeNothing) {
  tycho::test::temp_folder tmp;
  auto run = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct",
                                     tycho::test::source_dir() + "/examples/mos2.toml", "--iterations", "3",
                                     "--set", "output.previews=false", "--set", "reconstruct.threads=1",
                                     "-o", tmp / out};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = tycho::test::run_command(argv);
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    return r;
  };
  auto u = run("u.zip", {"--set", "preprocess.integer_targets=true"});
  EXPECT_NE(u.err.find("targets uint16"), std::string::npos) << u.err;
  // Read as counts in the stored dtype (the emd source delivers uint16): no float32 copy.
  EXPECT_NE(u.err.find("patterns (14 MiB as uint16 counts, read as the stored uint16)"), std::string::npos) << u.err;
  auto d = run("d.zip", {});  // the default for counts read as such: uint16 (see docs/config-reference.md)
  EXPECT_NE(d.err.find("targets uint16"), std::string::npos) << d.err;
  auto f = run("f.zip", {"--set", "preprocess.integer_targets=false"});
  EXPECT_NE(f.err.find("targets float32"), std::string::npos) << f.err;
  auto n = run("n.zip", {"--set", "preprocess.normalise=true", "--set", "preprocess.integer_targets=true"});
  EXPECT_NE(n.err.find("targets float32"), std::string::npos) << "normalised counts are not whole numbers: " << n.err;
  const auto a = tycho::test::load_result(tmp / "u.zip"), b = tycho::test::load_result(tmp / "f.zip");
  for (const auto& arr : a.arrays)
    EXPECT_TRUE(arr.bytes == b.array(arr.name, tmp / "f.zip").bytes) << arr.name << " differs between uint16 and float32 targets";
}

}  // namespace
