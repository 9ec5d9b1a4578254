// The `arina` source (plugins/sources/detectors): Dectris ARINA / EIGER NeXus masters and data
// files written by the tests (tests/support/arina_test_file.hpp) read back bit for bit through
// the source's own chunk decoders (bitshuffle/LZ4, LZ4) and through HDF5's pipeline (none, gzip),
// and through the Debian filter plugins where installed (the same values); external links, the
// pixel mask and flat field, the scan metadata and its calibrations; crafted chunks and links
// refused naming the file and path; the real ARINA files of ../shared equal to RosettaSciIO.
#include <gtest/gtest.h>
#include <unistd.h>

#include <tycho/core/last_error.hpp>
#include <tycho/sdk/optics.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "arina_test_file.hpp"
#include "built_in_plugins.hpp"
#include "realformats.hpp"
#include "source_under_test.hpp"

namespace fs = std::filesystem;
using tycho::test::arina_codec;
using tycho::test::arina_data_spec;
using tycho::test::arina_scan;
using tycho::test::image;
using tycho::test::write_arina_scan;

namespace {

std::vector<uint32_t> random_counts(int64_t n, uint32_t top, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = rng() % (top + 1);
  return v;
}

class ArinaSource : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("tycho_arina_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(tmp_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  void TearDown() override {
    source_.close();
    std::error_code ec;
    if (!std::getenv("TYCHO_KEEP_TMP")) fs::remove_all(tmp_, ec);
  }
  tycho_status open(const std::string& path, const std::string& more = "") {
    return source_.open(tycho::test::plugins(), "arina", "path = '" + path + "'\n" + more, tmp_.string());
  }
  void expect_refused(const std::string& path, const std::string& more, tycho_status status,
                      const std::vector<std::string>& parts) {
    EXPECT_EQ(open(path, more), status) << tycho::last_error();
    const std::string msg = tycho::last_error();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
  // A read expected to fail, with the message holding each of `parts`.
  void expect_read_refused(int64_t first, int64_t count, const std::vector<std::string>& parts) {
    const tycho_dataset_info i = source_.info();
    std::vector<float> buf(std::size_t(count * i.detector_shape[0] * i.detector_shape[1]));
    int64_t dims[3] = {count, i.detector_shape[0], i.detector_shape[1]};
    DLTensor t{};
    t.data = buf.data();
    t.device = {kDLCPU, 0};
    t.ndim = 3;
    t.dtype = {kDLFloat, 32, 1};
    t.shape = dims;
    EXPECT_EQ(source_.vt->read(source_.src, first, count, &t), TYCHO_ERR_BAD_DATA);
    const std::string msg = tycho::last_error();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }

  tycho::test::source_under_test source_;
  fs::path tmp_;
};

std::vector<float> as_float(const std::vector<uint32_t>& v) { return std::vector<float>(v.begin(), v.end()); }
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// What HDF5 itself reads from a dataset (through the filter plugins, when installed).
std::vector<uint32_t> hdf5_read(const std::string& file, const std::string& path, int64_t n) {
  std::vector<uint32_t> v(static_cast<std::size_t>(n));
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  const bool ok = d >= 0 && H5Dread(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0;
  if (d >= 0) H5Dclose(d);
  H5Fclose(f);
  return ok ? v : std::vector<uint32_t>{};
}

// Every codec, element size and chunking, data files beside the master or inside it: the
// values written, bit for bit; where the Debian filter plugins are installed, HDF5 reads the
// same values through them (so the tests' encoder is the real format, and so is the decoder).
TEST_F(ArinaSource, EveryCodecAndLayoutRoundTrips) {
  struct variant {
    arina_codec codec;
    hid_t file_type, mem_type;
    uint32_t top;
    int64_t chunk_frames;
    bool external;
    int bits;
    const char* name;
  };
  const variant variants[] = {
      {arina_codec::bitshuffle_lz4, H5T_STD_U32LE, H5T_NATIVE_UINT32, 0xffffffu, 1, true, 32, "bslz4 u32"},
      {arina_codec::bitshuffle_lz4, H5T_STD_U16LE, H5T_NATIVE_UINT16, 65535, 3, true, 16, "bslz4 u16, 3-frame chunks"},
      {arina_codec::bitshuffle_lz4, H5T_STD_U8LE, H5T_NATIVE_UINT8, 255, 5, false, 8, "bslz4 u8 inside"},
      {arina_codec::bitshuffle_lz4, H5T_STD_U32BE, H5T_NATIVE_UINT32, 4095, 1, true, 32, "bslz4 big-endian"},
      {arina_codec::lz4, H5T_STD_U16LE, H5T_NATIVE_UINT16, 7, 2, true, 16, "lz4 u16"},
      {arina_codec::none, H5T_STD_U32LE, H5T_NATIVE_UINT32, 0xffffffu, 4, true, 32, "uncompressed"},
      {arina_codec::gzip, H5T_STD_U16LE, H5T_NATIVE_UINT16, 1000, 1, false, 16, "gzip"},
  };
  unsigned seed = 1;
  int plugin_checks = 0;
  for (const variant& v : variants) {
    SCOPED_TRACE(v.name);
    source_.close();
    arina_scan s;
    s.values = random_counts(s.frames * s.rows * s.cols, v.top, seed++);
    s.spec.codec = v.codec;
    s.spec.chunk_frames = v.chunk_frames;
    s.spec.file_type = v.file_type;
    s.spec.mem_type = v.mem_type;
    s.external = v.external;
    const std::string master = write_arina_scan(tmp_, "scan", s);
    ASSERT_EQ(open(master), TYCHO_OK) << tycho::last_error();
    const tycho_dataset_info i = source_.info();
    EXPECT_EQ(i.scan_shape[0], 3);
    EXPECT_EQ(i.scan_shape[1], 4);
    EXPECT_EQ(i.detector_shape[0], 13);
    EXPECT_EQ(i.detector_shape[1], 11);
    EXPECT_EQ(int(i.stored_dtype.bits), v.bits);
    EXPECT_TRUE(same_bits(source_.read(0, 12), as_float(s.values)));
    // Across the two data files and inside chunks.
    EXPECT_TRUE(same_bits(source_.read(4, 5), as_float(std::vector<uint32_t>(s.values.begin() + 4 * 143,
                                                                            s.values.begin() + 9 * 143))));
    EXPECT_EQ(i.reads_stored_dtype, v.bits <= 16 ? 1 : 0);
    if (v.bits == 16) {
      const auto stored = source_.read_uint16(2, 7);
      EXPECT_TRUE(std::equal(stored.begin(), stored.end(), s.values.begin() + 2 * 143));
    }
    // The plugins' reading of the first data dataset, where HDF5 has them.
    const bool plugin = v.codec == arina_codec::bitshuffle_lz4 ? H5Zfilter_avail(32008) > 0
                        : v.codec == arina_codec::lz4          ? H5Zfilter_avail(32004) > 0
                                                               : true;
    if (plugin) {
      const auto through_hdf5 = v.external ? hdf5_read((tmp_ / "scan_data_000001.h5").string(), "/entry/data/data", 6 * 143)
                                           : hdf5_read(master, "/entry/data/data_000001", 6 * 143);
      EXPECT_TRUE(through_hdf5 == std::vector<uint32_t>(s.values.begin(), s.values.begin() + 6 * 143))
          << "HDF5's own reading (through the filter plugin) differs";
      plugin_checks += v.codec == arina_codec::bitshuffle_lz4 || v.codec == arina_codec::lz4;
    }
  }
  if (plugin_checks == 0)
    std::printf("note: no HDF5 filter plugin for 32008/32004 installed (Debian: bitshuffle, hdf5-filter-plugin): "
                "the decoder was not cross-checked against it\n");
}

// The master's pixel mask goes to the host as the detector's mask (read_detector_mask), its
// pixels read as 0; its flat field multiplies the counts unless the detector applied it; both can
// be switched off. Stored-dtype reads are declined while a flat field scales the counts, and
// offered with only the mask.
TEST_F(ArinaSource, PixelMaskAndFlatFieldAreApplied) {
  arina_scan s;
  s.spec.file_type = H5T_STD_U16LE;
  s.spec.mem_type = H5T_NATIVE_UINT16;
  s.values = random_counts(s.frames * 143, 1000, 3);
  s.mask.assign(143, 0);
  s.mask[5] = 1;     // a gap
  s.mask[77] = 8;    // hot
  s.flat.assign(143, 1.0f);
  s.flat[10] = 2.0f;
  s.flat[20] = 0.5f;
  const std::string master = write_arina_scan(tmp_, "m", s);
  ASSERT_EQ(open(master), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.info().reads_stored_dtype, 0);
  std::vector<uint8_t> mask;
  ASSERT_EQ(source_.detector_mask(mask), TYCHO_OK) << tycho::last_error();
  ASSERT_EQ(mask.size(), 143u);
  for (int64_t k = 0; k < 143; ++k) EXPECT_EQ(mask[std::size_t(k)], k == 5 || k == 77 ? 1 : 0) << k;
  auto got = source_.read(0, 12);
  for (int64_t f = 0; f < 12; ++f)
    for (int64_t k = 0; k < 143; ++k) {
      const float v = got[std::size_t(f * 143 + k)], w = float(s.values[std::size_t(f * 143 + k)]);
      if (k == 5 || k == 77) EXPECT_EQ(v, 0.0f) << f << " " << k;
      else if (k == 10) EXPECT_EQ(v, 2.0f * w);
      else if (k == 20) EXPECT_EQ(v, 0.5f * w);
      else ASSERT_EQ(v, w) << f << " " << k;
    }
  // Switched off: the counts as stored.
  ASSERT_EQ(open(master, "apply_mask = false\napply_flatfield = false\n"), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.info().reads_stored_dtype, 1);
  EXPECT_TRUE(same_bits(source_.read(0, 12), as_float(s.values)));
  EXPECT_EQ(source_.detector_mask(mask), TYCHO_ERR_UNSUPPORTED);
  // The detector applied the flat field already: only the mask.
  source_.close();
  s.flat_applied = 1;
  write_arina_scan(tmp_, "m", s);
  ASSERT_EQ(open(master), TYCHO_OK) << tycho::last_error();
  got = source_.read(3, 1);
  EXPECT_EQ(got[10], float(s.values[3 * 143 + 10]));
  EXPECT_EQ(got[77], 0.0f);
  // Only the mask: the stored counts are offered, 0 where masked.
  EXPECT_EQ(source_.info().reads_stored_dtype, 1);
  const auto stored = source_.read_uint16(3, 1);
  for (int64_t k = 0; k < 143; ++k)
    EXPECT_EQ(stored[std::size_t(k)], k == 5 || k == 77 ? 0 : s.values[std::size_t(3 * 143 + k)]) << k;
  // A mask of another shape is refused, naming it.
  source_.close();
  {
    hid_t m = H5Fopen(master.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Ldelete(m, "/entry/instrument/detector/detectorSpecific/pixel_mask", H5P_DEFAULT);
    std::vector<uint32_t> small(4, 0);
    image(m, "/entry/instrument/detector/detectorSpecific/pixel_mask", H5T_STD_U32LE, H5T_NATIVE_UINT32, 2, 2, small.data());
    H5Fclose(m);
  }
  expect_refused(master, "", TYCHO_ERR_BAD_DATA, {master + ":/entry/instrument/detector/detectorSpecific/pixel_mask",
                                                  "(2, 2)", "pixel mask", "(13, 11)"});
}

// The scan's shape and calibrations from the metadata file beside the master; without it, the
// energy from the master and the shape from the config.
TEST_F(ArinaSource, ScanShapeAndCalibrationsFromTheMetadata) {
  arina_scan s;
  s.values = random_counts(s.frames * 143, 100, 4);
  const std::string master = write_arina_scan(tmp_, "c", s);
  ASSERT_EQ(open(master), TYCHO_OK) << tycho::last_error();
  tycho_dataset_info i = source_.info();
  EXPECT_EQ(i.scan_shape[0], 3);
  EXPECT_EQ(i.scan_shape[1], 4);
  EXPECT_DOUBLE_EQ(i.scan_step_A[0], 1.39);
  EXPECT_DOUBLE_EQ(i.energy_eV, 300e3);
  const double dk = 100e-6 / (0.115 * tycho::sdk::wavelength_A(300e3) * 1e-10) * 1e-10;
  EXPECT_NEAR(i.detector_pixel_invA[0], dk, 1e-12);
  EXPECT_NEAR(i.detector_pixel_invA[1], dk, 1e-12);
  EXPECT_NEAR(dk, 0.04417, 1e-5);  // 100 µm at 0.115 m, 300 kV: λ = 0.019687 Å
  EXPECT_TRUE(std::isnan(i.semiangle_mrad) && std::isnan(i.C10_A));
  // The config's shape replaces the file's.
  ASSERT_EQ(open(master, "scan_shape = [2, 6]\n"), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.info().scan_shape[1], 6);
  // Without the metadata file: the energy the detector was given, no step, the shape required.
  source_.close();
  fs::remove(tmp_ / "c.h5");
  expect_refused(master, "", TYCHO_ERR_INVALID_ARGUMENT, {"12 frames", "scan_shape", "[4, 3], [3, 4], [12, 1]"});
  ASSERT_EQ(open(master, "scan_shape = [3, 4]\n"), TYCHO_OK) << tycho::last_error();
  i = source_.info();
  EXPECT_DOUBLE_EQ(i.energy_eV, 200e3);
  EXPECT_TRUE(std::isnan(i.scan_step_A[0]) && std::isnan(i.detector_pixel_invA[0]));  // no camera length
  // A metadata file named in the config must hold the STEM Metadata group.
  expect_refused(master, "scan_shape = [3, 4]\nmetadata = 'c_master.h5'\n", TYCHO_ERR_NOT_FOUND,
                 {"c_master.h5", "STEM Metadata"});
}

// Crafted files: a data file missing, a chunk bit-flipped or cut short, a chunk header that
// lies, frames of two shapes; each refused naming the file and the path or chunk.
TEST_F(ArinaSource, CraftedFilesAreRefused) {
  arina_scan s;
  s.values = random_counts(s.frames * 143, 5000, 5);
  const std::string master = write_arina_scan(tmp_, "x", s);
  const std::string data1 = (tmp_ / "x_data_000001.h5").string(), data2 = (tmp_ / "x_data_000002.h5").string();
  // A data file missing.
  fs::rename(data2, data2 + ".away");
  expect_refused(master, "", TYCHO_ERR_NOT_FOUND, {master + ":/entry/data/data_000002", "external link",
                                                   "x_data_000002.h5", "does not exist"});
  fs::rename(data2 + ".away", data2);
  // A bit flipped in the LZ4 stream of frame 2's chunk: refused by the read that meets it.
  haddr_t where = 0;
  hsize_t size = 0;
  {
    hid_t f = H5Fopen(data1.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/entry/data/data", H5P_DEFAULT);
    hsize_t offset[3] = {2, 0, 0};
    unsigned mask = 0;
    ASSERT_GE(H5Dget_chunk_info_by_coord(d, offset, &mask, &where, &size), 0);
    H5Dclose(d);
    H5Fclose(f);
  }
  std::string bytes;
  {
    std::ifstream in(data1, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto write = [&](const std::string& b) {
    std::ofstream out(data1, std::ios::binary | std::ios::trunc);
    out.write(b.data(), std::streamsize(b.size()));
  };
  std::string flipped = bytes;
  flipped[std::size_t(where + 16)] ^= 0x40;  // the first block's LZ4 token / literals
  flipped[std::size_t(where + 17)] ^= 0xff;
  write(flipped);
  ASSERT_EQ(open(master), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(source_.read(0, 2).size(), std::size_t(2 * 143));
  expect_read_refused(1, 3, {"x_data_000001.h5:/entry/data/data", "chunk of frames 2 to 2"});
  source_.close();
  // The chunk's header claims another size.
  std::string lying = bytes;
  lying[std::size_t(where + 7)] ^= 0x01;
  write(lying);
  ASSERT_EQ(open(master), TYCHO_OK) << tycho::last_error();
  expect_read_refused(2, 1, {"chunk of frames 2 to 2", "header says it holds", "expected 572"});
  source_.close();
  // Cut short inside the chunk (HDF5's own check, or ours).
  write(bytes.substr(0, std::size_t(where + size / 2)));
  const tycho_status st = open(master);
  if (st == TYCHO_OK) {
    expect_read_refused(2, 1, {"x_data_000001.h5"});
  } else {
    EXPECT_NE(std::string(tycho::last_error()).find("x_data_000001.h5"), std::string::npos) << tycho::last_error();
  }
  source_.close();
  write(bytes);
  // Frames of another shape in the second file.
  {
    hid_t f = H5Fcreate(data2.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<uint32_t> v(6 * 143, 1);
    tycho::test::write_arina_frames(f, "/entry/data/data", v.data(), 6, 11, 13, s.spec);
    H5Fclose(f);
  }
  expect_refused(master, "", TYCHO_ERR_BAD_DATA, {"data_000002", "(6, 11, 13)", "(13, 11)", "one shape and type"});
  // Chunks of 1.2 GiB declared (never written): refused before any is allocated.
  {
    const std::string big = (tmp_ / "big.h5").string();
    hid_t f = H5Fcreate(big.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[3] = {1, 1024, 1024}, maxdims[3] = {H5S_UNLIMITED, 1024, 1024}, chunk[3] = {300, 1024, 1024};
    hid_t space = H5Screate_simple(3, dims, maxdims);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 3, chunk);
    H5Dclose(H5Dcreate2(f, "/entry/data/data_000001", H5T_STD_U32LE, space, lcpl, dcpl, H5P_DEFAULT));
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    H5Sclose(space);
    H5Fclose(f);
    expect_refused(big, "", TYCHO_ERR_BAD_DATA, {big + ":/entry/data/data_000001", "(300, 1024, 1024)", "1 GiB"});
  }
  // An unfiltered chunk stored shorter than the chunk (the arina fuzzer's input: libhdf5's own
  // H5Dread copied past its buffer on it): refused by the source's read, naming the chunk.
  {
    const std::string shortc = (tmp_ / "short.h5").string();
    hid_t f = H5Fcreate(shortc.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[3] = {1, 8, 8}, chunk[3] = {1, 8, 8};
    hid_t space = H5Screate_simple(3, dims, nullptr);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 3, chunk);
    hid_t d = H5Dcreate2(f, "/entry/data/data_000001", H5T_STD_U32LE, space, lcpl, dcpl, H5P_DEFAULT);
    const std::string bytes(80, '\1');
    hsize_t offset[3] = {0, 0, 0};
    ASSERT_GE(H5Dwrite_chunk(d, H5P_DEFAULT, 0, offset, bytes.size(), bytes.data()), 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    H5Sclose(space);
    H5Fclose(f);
    ASSERT_EQ(open(shortc), TYCHO_OK) << tycho::last_error();
    expect_read_refused(0, 1, {shortc, "stored unfiltered in 80 bytes, expected 256"});
    source_.close();
  }
  // A data file alone reads as its frames (its /entry/data/data); a file without /entry/data is
  // refused.
  ASSERT_EQ(open(data1, "scan_shape = [6, 1]\n"), TYCHO_OK) << tycho::last_error();
  EXPECT_TRUE(same_bits(source_.read(0, 6), as_float(std::vector<uint32_t>(s.values.begin(), s.values.begin() + 6 * 143))));
  const std::string meta = (tmp_ / "x.h5").string();
  expect_refused(meta, "scan_shape = [6, 1]\n", TYCHO_ERR_NOT_FOUND, {meta + ":/entry/data", "not a group"});
}

// The fuzz target's seeds (fuzz/corpus/arina: one-frame masters with the data inside) are valid.
TEST_F(ArinaSource, FuzzSeedsAreValidFiles) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(tycho::test::source_dir() + "/fuzz/corpus/arina")) {
    SCOPED_TRACE(e.path().string());
    ASSERT_EQ(open(e.path().string()), TYCHO_OK) << tycho::last_error();
    const auto v = source_.read(0, 1);
    EXPECT_EQ(v[9], 0.0f);  // the pixel mask
    std::vector<uint8_t> mask;
    ASSERT_EQ(source_.detector_mask(mask), TYCHO_OK) << tycho::last_error();
    EXPECT_EQ(mask[9], 1);
    EXPECT_EQ(v[3], 2.0f * float(3 * 37 % 200));  // the flat field
    ++n;
  }
  EXPECT_EQ(n, 3);
}

// ../shared/data/realformats: the ARINA scan (a master, its bitshuffle/LZ4 data file through an
// external link, the scan metadata beside them) reads as RosettaSciIO reads it: a 4 x 4 scan of
// 192 x 192 frames, the same values, its scan step; tycho keeps the stored uint32 (RosettaSciIO
// converts to uint16) and finds the energy and detector pixel too.
TEST_F(ArinaSource, RealFilesEqualRosettaSciIO) {
  if (!tycho::test::have_realformats()) GTEST_SKIP() << "../shared/data/realformats is absent: real-file checks skipped";
  const auto& ref = tycho::test::realformats_reference().at("files").at("test_00_master.h5");
  const std::string master = tycho::test::realformats_dir() + "/test_00_master.h5";
  ASSERT_EQ(open(master), TYCHO_OK) << tycho::last_error();
  const tycho_dataset_info i = source_.info();
  const auto shape = ref.at("shape").get<std::vector<int64_t>>();
  EXPECT_EQ(i.scan_shape[0], shape[0]);
  EXPECT_EQ(i.scan_shape[1], shape[1]);
  EXPECT_EQ(i.detector_shape[0], shape[2]);
  EXPECT_EQ(i.detector_shape[1], shape[3]);
  EXPECT_EQ(i.stored_dtype.code, kDLUInt);
  EXPECT_EQ(i.stored_dtype.bits, 32);
  EXPECT_DOUBLE_EQ(i.scan_step_A[0], ref.at("axes").at(0).at("scale").get<double>());
  EXPECT_EQ(ref.at("axes").at(0).at("units").get<std::string>(), "A");
  EXPECT_DOUBLE_EQ(i.energy_eV, 300e3);
  EXPECT_NEAR(i.detector_pixel_invA[0], 100e-6 / (0.115 * tycho::sdk::wavelength_A(300e3) * 1e-10) * 1e-10, 1e-12);
  tycho::test::expect_checksums(source_.read(0, 16), 192 * 192, ref);
}

}  // namespace
