// Sources deliver their stored dtype (tycho_dataset_info::reads_stored_dtype, ABI 1.3;
// docs/streaming.md): a uint8/uint16 data set read as counts (read_dataset's as_counts) gives
// the float32 path's targets, totals and mask exactly, without a float32 copy of the scan; a
// uint16 scan whose float32 copy exceeds the process's memory limit (RLIMIT_DATA) reconstructs
// under it; an older source (float32 only) still works and is never asked for another dtype; a
// source that claims a dtype it does not deliver is refused, naming it.
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/host/dataset.hpp>

#include <toml++/toml.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "../host/src/data/bad_pixels.hpp"
#include "../host/src/data/detector_padding.hpp"
#include "built_in_plugins.hpp"
#include "npy_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const tycho::host::component_ref& npy() { return tycho::test::plugins().find(TYCHO_COMPONENT_SOURCE, "npy"); }

// Wrappers of the npy source's vtable that play other sources: an older one (its info ends
// before reads_stored_dtype, and it reads float32 only) and two that claim what they do not do.
const tycho_source_vtable* npy_vt() { return npy().as<tycho_source_vtable>(); }
enum class role { old_source, claims_uint8, claims_int32 };
role g_role = role::old_source;
int g_non_float_reads = 0;  // reads an older source was asked for in a dtype other than float32

tycho_status wrapped_info(tycho_source* src, tycho_dataset_info* out) {
  const tycho_status st = npy_vt()->info(src, out);
  switch (g_role) {
    case role::old_source:
      // Built against ABI 1.2: the struct ends before the field, and the bytes past it are not
      // the source's (garbage that a host must not read as a claim).
      out->struct_size = uint32_t(offsetof(tycho_dataset_info, reads_stored_dtype));
      out->reads_stored_dtype = 1;
      break;
    case role::claims_uint8: out->stored_dtype = {kDLUInt, 8, 1}; break;  // the file is uint16
    case role::claims_int32:
      out->stored_dtype = {kDLInt, 32, 1};
      out->reads_stored_dtype = 1;
      break;
  }
  return st;
}
tycho_status wrapped_read(tycho_source* src, int64_t first, int64_t count, DLTensor* dst) {
  if (g_role == role::old_source && !(dst->dtype.code == kDLFloat && dst->dtype.bits == 32)) {
    ++g_non_float_reads;
    return tycho::set_last_error(TYCHO_ERR_INVALID_ARGUMENT, "old source: float32 only");
  }
  return npy_vt()->read(src, first, count, dst);
}
tycho::host::component_ref wrapped(const char* name, role r) {
  static tycho_source_vtable vt;
  vt = *npy_vt();
  vt.info = &wrapped_info;
  vt.read = &wrapped_read;
  g_role = r;
  g_non_float_reads = 0;
  tycho::host::component_ref c = npy();
  c.name = name;
  c.vtable = &vt;
  return c;
}

class StoredDtypeReads : public ::testing::Test {
 protected:
  tycho::host::dataset read(const tycho::host::component_ref& source, const std::string& file, bool as_counts,
                            bool centred = true) {
    auto doc = tycho::config_document::parse("[data]\npath = \"" + file + "\"\ncentred = " +
                                                 (centred ? "true" : "false") + "\n",
                                             "<test>", tmp_.path().string());
    tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
    return tycho::host::read_dataset(source, &cfg, 0, 1, as_counts);
  }
  // Read, then bad pixels masked (default settings) and padded to `window`, as the session does.
  tycho::host::dataset load(const std::string& file, bool as_counts, std::array<int64_t, 2> window,
                            tycho::host::detector_padding* padding) {
    tycho::host::dataset d = read(npy(), file, as_counts);
    tycho::host::mask_bad_pixels(d, tycho::host::read_bad_pixel_settings(toml::table{}, "<test>", d.info.stored_dtype));
    *padding = tycho::host::pad_detector(d, window);
    return d;
  }
  tycho::test::temp_folder tmp_;
};

// The npy source says what it delivers: its stored dtype for uint8, uint16, float16 (the values
// as stored, bit for bit), float32 only for int32 and float32; any other dtype is refused.
TEST_F(StoredDtypeReads, TheNpySourceDeliversUint8Uint16AndFloat16AsStored) {
  std::mt19937 gen(3);
  std::vector<uint16_t> u16(2 * 3 * 5 * 7);
  for (auto& v : u16) v = uint16_t(gen());
  tycho::test::write_npy(tmp_ / "u16.npy", "<u2", {2, 3, 5, 7}, u16.data(), u16.size() * 2);
  tycho::test::write_npy(tmp_ / "f16.npy", "<f2", {2, 3, 5, 7}, u16.data(), u16.size() * 2);  // the same bits as float16
  std::vector<uint8_t> u8(u16.size());
  for (std::size_t k = 0; k < u8.size(); ++k) u8[k] = uint8_t(u16[k] >> 3);
  tycho::test::write_npy(tmp_ / "u8.npy", "|u1", {2, 3, 5, 7}, u8.data(), u8.size());
  std::vector<int32_t> i32(u16.begin(), u16.end());
  tycho::test::write_npy(tmp_ / "i32.npy", "<i4", {2, 3, 5, 7}, i32.data(), i32.size() * 4);

  const tycho_source_vtable* vt = npy_vt();
  auto open = [&](const std::string& file, tycho_dataset_info& info) {
    auto doc = tycho::config_document::parse("[data]\npath = \"" + file + "\"\n", "<test>", tmp_.path().string());
    tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
    tycho_source* src = nullptr;
    EXPECT_EQ(vt->open(&cfg, &src), TYCHO_OK) << tycho::last_error();
    info = tycho_dataset_info{};
    info.struct_size = sizeof info;
    EXPECT_EQ(vt->info(src, &info), TYCHO_OK) << tycho::last_error();
    EXPECT_EQ(info.struct_size, sizeof info);
    return src;
  };
  // Patterns [1, 5) in `dtype`: the status and the bytes.
  auto read_as = [&](tycho_source* src, DLDataType dtype, std::vector<unsigned char>& out) {
    int64_t shape[3] = {4, 5, 7};
    out.assign(std::size_t(4 * 5 * 7 * dtype.bits / 8), 0);
    DLTensor t{out.data(), {kDLCPU, 0}, 3, dtype, shape, nullptr, 0};
    return vt->read(src, 1, 4, &t);
  };
  std::vector<unsigned char> bytes;
  const std::size_t skip = 5 * 7;  // pattern 0
  for (const auto& [file, dtype, stored] :
       {std::tuple{"u16.npy", DLDataType{kDLUInt, 16, 1}, static_cast<const void*>(u16.data())},
        std::tuple{"f16.npy", DLDataType{kDLFloat, 16, 1}, static_cast<const void*>(u16.data())},
        std::tuple{"u8.npy", DLDataType{kDLUInt, 8, 1}, static_cast<const void*>(u8.data())}}) {
    tycho_dataset_info info;
    tycho_source* src = open(tmp_ / file, info);
    ASSERT_NE(src, nullptr);
    EXPECT_EQ(info.reads_stored_dtype, 1) << file;
    ASSERT_EQ(read_as(src, dtype, bytes), TYCHO_OK) << file << ": " << tycho::last_error();
    EXPECT_EQ(std::memcmp(bytes.data(), static_cast<const unsigned char*>(stored) + skip * dtype.bits / 8, bytes.size()),
              0)
        << file << ": not the stored values";
    vt->close(src);
  }
  tycho_dataset_info info;
  tycho_source* src = open(tmp_ / "i32.npy", info);
  ASSERT_NE(src, nullptr);
  EXPECT_EQ(info.reads_stored_dtype, 0) << "int32 is not a dtype a host takes: float32 only";
  EXPECT_EQ(read_as(src, {kDLInt, 32, 1}, bytes), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(tycho::last_error(), "npy source: the patterns array is int32, expected float32 to read"))
      << tycho::last_error();
  vt->close(src);
  src = open(tmp_ / "u16.npy", info);
  ASSERT_NE(src, nullptr);
  EXPECT_EQ(read_as(src, {kDLUInt, 8, 1}, bytes), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(tycho::last_error(), "npy source: the patterns array is uint8, expected float32 or the stored "
                                            "uint16 to read"))
      << tycho::last_error();
  vt->close(src);
}

// uint16 and uint8 counts read as counts: d.counts holds exactly the float32 path's targets
// (centred patterns shifted, the saturated pixel masked, padded), with the same totals bit for
// bit and the same mask; float32 data asked as counts are read as float32.
TEST_F(StoredDtypeReads, CountsEqualTheFloat32PathBitForBit) {
  std::mt19937 gen(7);
  std::poisson_distribution<int> counts(300.0);
  std::vector<uint16_t> u16(4 * 5 * 30 * 30);
  for (auto& v : u16) v = uint16_t(counts(gen));
  u16[2 * 900 + 31] = 65535;  // saturated: masked in every pattern
  u16[3 * 900 + 7] = 40000;
  tycho::test::write_npy(tmp_ / "u16.npy", "<u2", {4, 5, 30, 30}, u16.data(), u16.size() * 2);
  std::vector<uint8_t> u8(u16.size());
  for (std::size_t k = 0; k < u8.size(); ++k) u8[k] = uint8_t(std::min<int>(u16[k] / 2, 250));
  tycho::test::write_npy(tmp_ / "u8.npy", "|u1", {4, 5, 30, 30}, u8.data(), u8.size());

  for (const char* file : {"u16.npy", "u8.npy"}) {
    tycho::host::detector_padding pf, pc;
    const auto f = load(tmp_ / file, false, {32, 33}, &pf);
    const auto c = load(tmp_ / file, true, {32, 33}, &pc);
    ASSERT_TRUE(f.counts.empty()) << file;
    ASSERT_TRUE(c.targets.empty()) << file << ": read as float32";
    ASSERT_EQ(c.counts.size(), f.targets.size()) << file;
    ASSERT_EQ(c.counts.size(), std::size_t(20 * 32 * 33)) << file;
    for (std::size_t k = 0; k < f.targets.size(); ++k) ASSERT_EQ(float(c.counts[k]), f.targets[k]) << file << " " << k;
    EXPECT_EQ(std::memcmp(&c.total_intensity, &f.total_intensity, sizeof(double)), 0)
        << file << ": " << c.total_intensity << " vs " << f.total_intensity;
    EXPECT_EQ(std::memcmp(&c.mean_total_intensity, &f.mean_total_intensity, sizeof(double)), 0) << file;
    EXPECT_EQ(c.max_value, f.max_value) << file;
    EXPECT_EQ(c.detector_mask, f.detector_mask) << file;
    EXPECT_EQ(pc.mask, pf.mask) << file;
    EXPECT_EQ(c.bad_pixels.saturated_values, f.bad_pixels.saturated_values) << file;
  }
  tycho::host::detector_padding p;
  const auto u = load(tmp_ / "u16.npy", true, {30, 30}, &p);
  // The saturated pixel, and the 40000 among counts of ~300: a pixel hot in one pattern.
  EXPECT_EQ(u.bad_pixels.masked_pixels, 2);
  EXPECT_EQ(u.bad_pixels.value_pixels, 1);
  ASSERT_EQ(u.bad_pixels.found.size(), 1u);
  EXPECT_EQ(u.bad_pixels.found[0].reason, "hot_in_some_patterns");
  EXPECT_EQ(u.max_value, 65535.0);

  std::vector<float> f32(u16.begin(), u16.end());
  tycho::test::write_npy(tmp_ / "f32.npy", "<f4", {4, 5, 30, 30}, f32.data(), f32.size() * 4);
  const auto f = read(npy(), tmp_ / "f32.npy", true);
  EXPECT_TRUE(f.counts.empty());
  EXPECT_EQ(f.targets.size(), u16.size());
}

// A source built before ABI 1.3 (its info ends before reads_stored_dtype, whatever lies past it)
// reads float32 as before, and is never asked for another dtype.
TEST_F(StoredDtypeReads, AnOlderSourceStillReadsFloat32) {
  std::vector<uint16_t> u16(3 * 4 * 8 * 8);
  for (std::size_t k = 0; k < u16.size(); ++k) u16[k] = uint16_t(k * 37 % 1000);
  tycho::test::write_npy(tmp_ / "u16.npy", "<u2", {3, 4, 8, 8}, u16.data(), u16.size() * 2);
  const auto old = wrapped("old_npy", role::old_source);
  const auto d = read(old, tmp_ / "u16.npy", true, false);
  EXPECT_EQ(g_non_float_reads, 0);
  EXPECT_TRUE(d.counts.empty());
  ASSERT_EQ(d.targets.size(), u16.size());
  for (std::size_t k = 0; k < u16.size(); ++k) ASSERT_EQ(d.targets[k], float(u16[k])) << k;
}

// Hostile sources: one claiming its uint16 data are uint8 is asked for uint8, fails to deliver
// it, and is refused naming both; one claiming to deliver int32 is refused before any read.
TEST_F(StoredDtypeReads, ASourceClaimingADtypeItDoesNotDeliverIsRefused) {
  std::vector<uint16_t> u16(2 * 2 * 4 * 4, 9);
  tycho::test::write_npy(tmp_ / "u16.npy", "<u2", {2, 2, 4, 4}, u16.data(), u16.size() * 2);
  const std::string file = tmp_ / "u16.npy";
  try {
    read(wrapped("liar", role::claims_uint8), file, true);
    ADD_FAILURE() << "a source that does not deliver its claimed uint8 was accepted";
  } catch (const tycho::error& e) {
    EXPECT_EQ(e.status, TYCHO_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(e.what(), "source 'liar' declares that it delivers the stored dtype of '" + file +
                                       "' (uint8, reads_stored_dtype = 1) but did not read patterns [0, 4) as uint8: "
                                       "npy source: the patterns array is uint8, expected float32 or the stored uint16"))
        << e.what();
  }
  try {
    read(wrapped("int32_claim", role::claims_int32), file, true);
    ADD_FAILURE() << "a source claiming to deliver int32 was accepted";
  } catch (const tycho::error& e) {
    EXPECT_EQ(e.status, TYCHO_ERR_BAD_DATA);
    EXPECT_TRUE(contains(e.what(), "source 'int32_claim' (data '" + file + "') declares that it delivers its stored "
                                   "dtype (reads_stored_dtype = 1) for data stored as int32; a source may deliver "
                                   "uint8, uint16, float16 or float32"))
        << e.what();
  }
}

// A preprocessing stage that only measures (the centre-of-mass plane fit) measures it on the
// counts: the MoS2 counts read as uint16 give the fit and the result of the chunked stage (forced
// by a no-op crop; itself the float32 path's bit for bit, test_chunked_preprocess.cpp) bit for bit.
TEST(StoredDtypeRun, CentreOfMassFitOnCountsEqualsTheFloat32Path) {
  tycho::test::temp_folder tmp;
  auto run = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct",
                                     tycho::test::source_dir() + "/examples/mos2.toml", "--iterations", "2",
                                     "--set", "output.previews=false", "--set", "reconstruct.threads=2",
                                     "--set", "preprocess.integer_targets=true", "--set", "preprocess.com_fit='plane'",
                                     "-o", tmp / out};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = tycho::test::run_command(argv);
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    return r;
  };
  const auto counts = run("counts.zip", {});
  const auto floats = run("float32.zip", {"--set", "preprocess.crop_detector=[96, 96]"});
  EXPECT_TRUE(contains(counts.err, "patterns (14 MiB as uint16 counts, read as the stored uint16)")) << counts.err;
  EXPECT_TRUE(contains(floats.err, "read and preprocessed 768 patterns in chunks of the stored uint16 counts (3 passes) "
                                   "into 14 MiB of uint16 counts"))
      << floats.err;
  auto fit_line = [](const std::string& log) {
    const std::size_t at = log.find("centre of mass (px from the detector centre)");
    return at == std::string::npos ? std::string() : log.substr(at, log.find('\n', at) - at);
  };
  ASSERT_FALSE(fit_line(counts.err).empty()) << counts.err;
  EXPECT_EQ(fit_line(counts.err), fit_line(floats.err));
  const auto a = tycho::test::load_result(tmp / "counts.zip"), b = tycho::test::load_result(tmp / "float32.zip");
  for (const char* name : {"object", "probe", "loss_history", "positions_px"})
    EXPECT_TRUE(a.array(name, tmp / "counts.zip").bytes == b.array(name, tmp / "float32.zip").bytes)
        << name << " differs between the counts and the float32 path";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// 128 x 128 patterns of 48 x 48 uint16 counts: 72 MiB as counts, 144 MiB as float32. Under
// RLIMIT_DATA = 120 MiB the run reads them as counts and reconstructs, its peak RSS below the
// limit; so does a run whose preprocessing stage changes the patterns (crop, centre-of-mass fit,
// recentre), which reads them in chunks of counts (the whole-scan float32 path needed the scan as
// float32, 144 MiB, and could not load it under this limit).
TEST_F(StoredDtypeReads, Uint16ScanLargerThanTheLimitAsFloat32LoadsAsCounts) {
  const int64_t r = 128, n = 48;
  std::vector<uint16_t> data(std::size_t(r * r * n * n));
  std::mt19937 gen(11);
  std::poisson_distribution<int> dose(20.0);
  for (auto& v : data) v = uint16_t(dose(gen));
  tycho::test::write_npy(tmp_ / "big.npy", "<u2", {r, r, n, n}, data.data(), data.size() * 2);
  std::vector<uint16_t>().swap(data);
  const uint64_t limit = uint64_t(120) << 20, float32 = uint64_t(r * r * n * n) * 4;
  ASSERT_GT(float32, limit);
  std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct",
                                   tycho::test::source_dir() + "/examples/mos2.toml", "--set", "data.source=\"npy\"",
                                   "--set", "data.path=\"" + (tmp_ / "big.npy") + "\"", "--set",
                                   "data.scan_step_A=0.5", "--set", "data.detector_pixel_invA=0.06", "--set",
                                   "preprocess.integer_targets=true", "--set", "reconstruct.batch_size=1024",
                                   "--set", "reconstruct.threads=2", "--set", "output.previews=false",
                                   // the lattice's block (6.5 MiB here), which `tycho plan` does not
                                   // count either, is not what this test weighs
                                   "--set", "preprocess.scan_scale=\"stated\"",
                                   "--iterations", "1", "-o", tmp_ / "counts.zip"};
  const auto [status, peak] = tycho::test::run_with_data_limit(argv, limit, tmp_ / "counts.log");
  const std::string log = read_text(tmp_ / "counts.log");
  ASSERT_EQ(status, 0) << log;
  EXPECT_TRUE(contains(log, "patterns (72 MiB as uint16 counts, read as the stored uint16)")) << log;
  EXPECT_TRUE(contains(log, "targets uint16")) << log;
  EXPECT_LT(peak, limit) << "peak RSS " << peak << " bytes";
  std::cout << "peak RSS under RLIMIT_DATA " << (limit >> 20) << " MiB: " << double(peak) / double(1 << 20)
            << " MiB; the scan is " << (float32 >> 20) << " MiB as float32\n";

  argv.back() = tmp_ / "chunked.zip";
  argv.insert(argv.end(), {"--set", "preprocess.crop_detector=[40, 40]", "--set", "preprocess.com_fit=\"plane\"",
                           "--set", "preprocess.recentre=true"});
  const auto [chunked_status, chunked_peak] = tycho::test::run_with_data_limit(argv, limit, tmp_ / "chunked.log");
  const std::string chunked_log = read_text(tmp_ / "chunked.log");
  ASSERT_EQ(chunked_status, 0) << chunked_log;
  EXPECT_TRUE(contains(chunked_log, "read and preprocessed 16384 patterns in chunks of the stored uint16 counts "
                                    "(3 passes) into 50 MiB of uint16 counts"))
      << chunked_log;
  EXPECT_LT(chunked_peak, limit) << "peak RSS " << chunked_peak << " bytes";
  std::cout << "cropped and recentred in chunks under RLIMIT_DATA " << (limit >> 20)
            << " MiB: peak RSS " << double(chunked_peak) / double(1 << 20) << " MiB\n";
}

}  // namespace
