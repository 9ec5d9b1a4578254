// The built-in `zip` format plugin, reached only through the host registry: round trips,
// numpy interoperability both ways, atomic saves and the errors of bad input.
#include <gtest/gtest.h>
#include <tycho/core/last_error.hpp>
#include <tycho/host/registry.hpp>
#include <unistd.h>
#include <zip.h>

#include <bit>
#include <complex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "zip_members.hpp"

namespace fs = std::filesystem;

namespace {

constexpr DLDataType f16{kDLFloat, 16, 1}, f32{kDLFloat, 32, 1}, f64{kDLFloat, 64, 1};
constexpr DLDataType c64{kDLComplex, 64, 1}, c128{kDLComplex, 128, 1};
constexpr DLDataType i8{kDLInt, 8, 1}, i16{kDLInt, 16, 1}, i32{kDLInt, 32, 1}, i64{kDLInt, 64, 1};
constexpr DLDataType u8{kDLUInt, 8, 1}, u16{kDLUInt, 16, 1}, u32{kDLUInt, 32, 1}, u64{kDLUInt, 64, 1};
constexpr DLDataType boolean{6, 8, 1};  // the plugin's bool: kDLBool of DLPack >= 0.8

const tycho_format_vtable& zip_format() {
  static tycho::host::registry reg;
  static const tycho_format_vtable* vt = [] {
    reg.load_directories({tycho::test::plugin_dir()});
    return reg.find(TYCHO_COMPONENT_FORMAT, "zip").as<tycho_format_vtable>();
  }();
  return *vt;
}

// An array the test owns: its bytes exactly as they should appear in the file.
struct test_array {
  std::string name;
  DLDataType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

template <class T>
test_array make(std::string name, DLDataType dtype, std::vector<int64_t> shape, std::vector<T> values) {
  test_array a{std::move(name), dtype, std::move(shape), std::string(values.size() * sizeof(T), '\0')};
  if (!values.empty()) std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

// A caller-owned tycho_record over test arrays (release == NULL).
struct record_of {
  std::vector<tycho_named_array> views;
  tycho_record rec{};
  record_of(std::vector<test_array>& arrays, const char* manifest) {
    for (auto& a : arrays) {
      tycho_named_array v{};
      v.name = a.name.c_str();
      v.tensor.data = a.bytes.data();
      v.tensor.device = {kDLCPU, 0};
      v.tensor.ndim = int32_t(a.shape.size());
      v.tensor.dtype = a.dtype;
      v.tensor.shape = a.shape.data();
      views.push_back(v);
    }
    rec = {sizeof(tycho_record), int64_t(views.size()), views.data(), manifest, nullptr};
  }
};

struct release_record {
  void operator()(tycho_record* r) const { r->release(r); }
};
using loaded = std::unique_ptr<tycho_record, release_record>;

loaded load_ok(const std::string& path) {
  tycho_record* out = nullptr;
  const tycho_status s = zip_format().load(path.c_str(), &out);
  EXPECT_EQ(s, TYCHO_OK) << tycho::last_error();
  return loaded(out);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::string hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) s += {digits[c >> 4], digits[c & 15]};
  return s;
}

// A zip with exactly these members (stored), for inputs save never writes.
void write_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members) {
  tycho::test::write_zip_members(path, members);
}

std::string read_member(const std::string& path, const std::string& member) {
  return tycho::test::read_zip_member(path, member).value_or("");
}

// A .npy member written by hand: `dict` padded to 64 bytes, then `data`.
std::string npy(const std::string& dict, const std::string& data, int major = 1) {
  const std::size_t fixed = major == 1 ? 10 : 12;
  const std::size_t total = (fixed + dict.size() + 1 + 63) / 64 * 64;
  const std::size_t len = total - fixed;
  std::string s = "\x93NUMPY";
  s += char(major);
  s += char(0);
  for (std::size_t i = 0; i < fixed - 8; ++i) s += char((len >> (8 * i)) & 0xff);
  s += dict;
  s.append(total - s.size() - 1, ' ');
  return s + "\n" + data;
}

// Every supported dtype, odd values included: NaN payloads, −0, denormals, extremes.
std::vector<test_array> every_dtype() {
  std::vector<std::complex<float>> cube;
  for (int k = 0; k < 24; ++k) cube.emplace_back(0.5f * float(k) - 3.0f, 1.0f - 0.25f * float(k));
  return {
      make<uint32_t>("f32", f32, {2, 3}, {0x3fc00000u, 0x80000000u, 0x7f800000u, 0x7fc12345u, 1u, 0x40500000u}),
      make<double>("f64", f64, {4}, {3.141592653589793, -1e300, std::bit_cast<double>(0x7ff8000000000123ull), 5e-324}),
      make<uint16_t>("f16", f16, {3}, {0x3c00, 0xc000, 0x7bff}),
      make<std::complex<float>>("c64", c64, {2, 3, 4}, cube),
      make<std::complex<double>>("c128", c128, {2, 2}, {{1, 2}, {-3.5, 1e-10}, {0, -0.0}, {1e200, -7}}),
      make<int8_t>("i8", i8, {4}, {-128, -1, 0, 127}),
      make<int16_t>("i16", i16, {2, 2}, {-32768, 12345, -2, 32767}),
      make<int32_t>("i32", i32, {3}, {std::numeric_limits<int32_t>::min(), 0, 2147483647}),
      make<int64_t>("i64", i64, {2}, {std::numeric_limits<int64_t>::min(), 0x0123456789abcdefll}),
      make<uint8_t>("u8", u8, {2, 2}, {0, 1, 200, 255}),
      make<uint16_t>("u16", u16, {5}, {0, 1, 1000, 40000, 65535}),
      make<uint32_t>("u32", u32, {2}, {0u, 4000000000u}),
      make<uint64_t>("u64", u64, {1}, {std::numeric_limits<uint64_t>::max() - 5}),
      make<uint8_t>("flags", boolean, {2, 3}, {1, 0, 0, 1, 1, 0}),
      make<double>("scalar", f64, {}, {0.1736111111111111}),
      make<float>("empty", f32, {0, 3}, {}),
  };
}

const char* const manifest = R"({"kind": "result", "iterations": [1, 2, 3], "note": "Å"})";

class ZipFormat : public testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::path(testing::TempDir()) / ("tycho-zip-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string file(const std::string& name) const { return (dir / name).string(); }
  std::set<std::string> listing() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    return names;
  }
  tycho_status save(std::vector<test_array>& arrays, const std::string& path,
                    tycho_save_mode mode = TYCHO_SAVE_NEW, const char* man = nullptr) {
    record_of r(arrays, man);
    return zip_format().save(&r.rec, path.c_str(), mode);
  }
};

TEST_F(ZipFormat, RegistersAsZipFormatComponent) {
  tycho::host::registry reg;
  reg.load_directories({tycho::test::plugin_dir()});
  const auto& c = reg.find(TYCHO_COMPONENT_FORMAT, "zip");
  EXPECT_EQ(c.version, "1.0.0");
  EXPECT_EQ(c.devices, TYCHO_DEVICE_BIT(kDLCPU));
  EXPECT_TRUE(c.config_keys.empty());
  EXPECT_STREQ(c.as<tycho_format_vtable>()->extension, ".zip");
  EXPECT_EQ(c.as<tycho_format_vtable>()->struct_size, sizeof(tycho_format_vtable));
}

TEST_F(ZipFormat, RoundTripsEveryDtypeBitForBit) {
  auto arrays = every_dtype();
  const std::string path = file("all.zip");
  ASSERT_EQ(save(arrays, path, TYCHO_SAVE_NEW, manifest), TYCHO_OK) << tycho::last_error();
  EXPECT_EQ(listing(), std::set<std::string>{"all.zip"});  // no temporary left behind

  loaded rec = load_ok(path);
  ASSERT_TRUE(rec);
  ASSERT_EQ(rec->n_arrays, int64_t(arrays.size()));
  ASSERT_NE(rec->manifest_json, nullptr);
  EXPECT_STREQ(rec->manifest_json, manifest);
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const auto& want = arrays[i];
    const auto& got = rec->arrays[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(got.name, want.name);  // member order is kept
    EXPECT_EQ(got.tensor.dtype.code, want.dtype.code);
    EXPECT_EQ(got.tensor.dtype.bits, want.dtype.bits);
    EXPECT_EQ(got.tensor.dtype.lanes, 1);
    EXPECT_EQ(got.tensor.device.device_type, kDLCPU);
    EXPECT_EQ(got.tensor.byte_offset, 0u);
    EXPECT_EQ(std::vector<int64_t>(got.tensor.shape, got.tensor.shape + got.tensor.ndim), want.shape);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.tensor.data) % 64, 0u);
    EXPECT_EQ(std::string(static_cast<const char*>(got.tensor.data), want.bytes.size()), want.bytes);
  }
  // One value read back through the loaded memory, not just compared as bytes.
  const auto* cube = static_cast<const std::complex<float>*>(rec->arrays[3].tensor.data);
  EXPECT_EQ(cube[23], std::complex<float>(8.5f, -4.75f));
  EXPECT_EQ(*static_cast<const double*>(rec->arrays[14].tensor.data), 0.1736111111111111);
}

TEST_F(ZipFormat, HonoursByteOffsetAndCompactStrides) {
  std::vector<float> storage = {-1, -1, 1, 2, 3, 4, 5, 6};
  int64_t shape[] = {2, 3}, strides[] = {3, 1};
  tycho_named_array a{"view", {}};
  a.tensor = {storage.data(), {kDLCPU, 0}, 2, f32, shape, strides, 2 * sizeof(float)};
  tycho_record rec{sizeof(tycho_record), 1, &a, nullptr, nullptr};
  const std::string path = file("offset.zip");
  ASSERT_EQ(zip_format().save(&rec, path.c_str(), TYCHO_SAVE_NEW), TYCHO_OK) << tycho::last_error();
  loaded back = load_ok(path);
  ASSERT_TRUE(back);
  ASSERT_EQ(back->n_arrays, 1);
  EXPECT_EQ(back->manifest_json, nullptr);
  const auto* v = static_cast<const float*>(back->arrays[0].tensor.data);
  EXPECT_EQ(std::vector<float>(v, v + 6), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(ZipFormat, RoundTripsEmptyRecord) {
  std::vector<test_array> none;
  const std::string path = file("empty.zip");
  ASSERT_EQ(save(none, path), TYCHO_OK) << tycho::last_error();
  loaded rec = load_ok(path);
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->n_arrays, 0);
  EXPECT_EQ(rec->manifest_json, nullptr);
}

TEST_F(ZipFormat, LongHeaderUsesNpyVersion2) {
  // 22000 axes of extent 1 make a dict longer than a 16-bit header length can say.
  std::vector<test_array> arrays = {make<float>("tall", f32, std::vector<int64_t>(22000, 1), {42.0f})};
  const std::string path = file("long.zip");
  ASSERT_EQ(save(arrays, path), TYCHO_OK) << tycho::last_error();
  const std::string member = read_member(path, "tall.npy");
  ASSERT_GT(member.size(), 65536u);  // more than a 16-bit length covers
  EXPECT_EQ(member.substr(0, 8), std::string("\x93NUMPY\x02\x00", 8));
  const uint32_t header_len = uint32_t(uint8_t(member[8])) | uint32_t(uint8_t(member[9])) << 8 |
                              uint32_t(uint8_t(member[10])) << 16 | uint32_t(uint8_t(member[11])) << 24;
  EXPECT_EQ((12 + header_len) % 64, 0u);
  EXPECT_EQ(member[12 + header_len - 1], '\n');
  EXPECT_EQ(member.size(), 12 + header_len + 4);
  loaded rec = load_ok(path);
  ASSERT_TRUE(rec);
  ASSERT_EQ(rec->arrays[0].tensor.ndim, 22000);
  EXPECT_EQ(*static_cast<const float*>(rec->arrays[0].tensor.data), 42.0f);
}

// The first interpreter that can import numpy (Debian's lives in /usr/bin), or "".
std::string python_with_numpy() {
  for (const char* py : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(py) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return py;
  return "";
}

TEST_F(ZipFormat, NumpyLoadsSavedFile) {
  const std::string python = python_with_numpy();
  if (python.empty()) GTEST_SKIP() << "no python3 with numpy";
  auto arrays = every_dtype();
  const std::string path = file("for_numpy.zip");
  ASSERT_EQ(save(arrays, path, TYCHO_SAVE_NEW, manifest), TYCHO_OK) << tycho::last_error();

  const char* descr[] = {"<f4", "<f8", "<f2", "<c8", "<c16", "|i1", "<i2", "<i4",
                         "<i8", "|u1", "<u2", "<u4", "<u8", "|b1", "<f8", "<f4"};
  std::ostringstream py;
  py << "import json, sys, zipfile\nimport numpy as np\npath = sys.argv[1]\nexpected = {\n";
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    py << "  '" << arrays[i].name << "': ('" << descr[i] << "', (";
    for (int64_t d : arrays[i].shape) py << d << ",";
    py << "), '" << hex(arrays[i].bytes) << "'),\n";
  }
  py << R"(}
with np.load(path) as f:
    assert sorted(f.files) == sorted(list(expected) + ['manifest.json']), f.files
    for name, (descr, shape, data) in expected.items():
        a = f[name]
        assert a.dtype == np.dtype(descr), (name, a.dtype)
        assert a.shape == shape, (name, a.shape)
        assert a.tobytes() == bytes.fromhex(data), name
    assert f['c64'][1, 2, 3] == np.complex64(8.5 - 4.75j), f['c64'][1, 2, 3]
    assert f['flags'].tolist() == [[True, False, False], [True, True, False]], f['flags']
    assert f['scalar'][()] == 0.1736111111111111
    assert f['i64'][0] == -2**63 and f['u16'][3] == 40000
with zipfile.ZipFile(path) as z:
    assert json.loads(z.read('manifest.json')) == {'kind': 'result', 'iterations': [1, 2, 3], 'note': '\u00c5'}
    for info in z.infolist():
        want = zipfile.ZIP_DEFLATED if info.filename == 'manifest.json' else zipfile.ZIP_STORED
        assert info.compress_type == want, (info.filename, info.compress_type)
print('numpy read everything')
)";
  const std::string script = file("check.py"), log = file("check.log");
  std::ofstream(script) << py.str();
  const int rc = std::system((python + " " + script + " " + path + " >" + log + " 2>&1").c_str());
  EXPECT_EQ(rc, 0) << slurp(log);
  EXPECT_NE(slurp(log).find("numpy read everything"), std::string::npos) << slurp(log);
}

TEST_F(ZipFormat, LoadsNumpySavezGroundTruth) {
  loaded rec = load_ok(tycho::test::example_data("mos2_ground_truth.npz"));
  ASSERT_TRUE(rec);
  ASSERT_EQ(rec->n_arrays, 5);
  EXPECT_EQ(rec->manifest_json, nullptr);
  struct expectation {
    const char* name;
    DLDataType dtype;
    std::vector<int64_t> shape;
  };
  const expectation want[] = {{"phase", f32, {288, 288}},
                              {"pixel_size_A", f64, {}},
                              {"scan_origin_A", f64, {2}},
                              {"scan_step_A", f64, {}},
                              {"scan_shape", i64, {2}}};
  for (int i = 0; i < 5; ++i) {
    const DLTensor& t = rec->arrays[i].tensor;
    SCOPED_TRACE(want[i].name);
    EXPECT_STREQ(rec->arrays[i].name, want[i].name);
    EXPECT_EQ(t.dtype.code, want[i].dtype.code);
    EXPECT_EQ(t.dtype.bits, want[i].dtype.bits);
    EXPECT_EQ(std::vector<int64_t>(t.shape, t.shape + t.ndim), want[i].shape);
  }
  const auto* phase = static_cast<const float*>(rec->arrays[0].tensor.data);
  // The file stores phase in Fortran order; these are numpy's phase[i, j] in C order.
  EXPECT_EQ(phase[0 * 288 + 1], 0.6956418752670288f);
  EXPECT_EQ(phase[1 * 288 + 0], 0.7735529541969299f);
  EXPECT_EQ(phase[287 * 288 + 3], 0.22385089099407196f);
  EXPECT_EQ(phase[5 * 288 + 200], 0.03368900716304779f);
  double sum = 0;
  for (int k = 0; k < 288 * 288; ++k) sum += phase[k];
  EXPECT_NEAR(sum, 8729.395535056523, 1e-6);
  EXPECT_EQ(*static_cast<const double*>(rec->arrays[1].tensor.data), 0.1736111111111111);
  const auto* origin = static_cast<const double*>(rec->arrays[2].tensor.data);
  EXPECT_EQ(origin[0], 17.0);
  EXPECT_EQ(origin[1], 19.0);
  EXPECT_EQ(*static_cast<const double*>(rec->arrays[3].tensor.data), 0.5);
  const auto* scan = static_cast<const int64_t*>(rec->arrays[4].tensor.data);
  EXPECT_EQ(scan[0], 32);
  EXPECT_EQ(scan[1], 24);
}

TEST_F(ZipFormat, LoadsHeaderVariantsAndFortranOrder) {
  const auto ints = [](std::vector<int32_t> v) { return std::string(reinterpret_cast<char*>(v.data()), v.size() * 4); };
  // (2, 3, 4) int32 with value 100i + 10j + k, laid out in Fortran order (i fastest).
  std::vector<int32_t> fortran, c_order;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) fortran.push_back(100 * i + 10 * j + k);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) c_order.push_back(100 * i + 10 * j + k);
  const std::string path = file("variants.zip");
  write_zip(path, {
      {"notes.txt", "ignored"},
      {"spaced.npy", npy("{ \"descr\" : \"<i4\" ,\n 'fortran_order':False,'shape':( 3 , ) }", ints({7, 8, 9}))},
      {"bare.npy", npy("{'descr': 'i4', 'fortran_order': False, 'shape': (2L, 1L)}", ints({5, 6}))},
      {"paren.npy", npy("{'shape': (2), 'fortran_order': False, 'descr': '<i4',}", ints({1, 2}))},
      {"v2.npy", npy("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", ints({11}), 2)},
      {"v3.npy", npy("{'descr': '<i4', 'fortran_order': False, 'shape': (), }", ints({12}), 3)},
      {"fortran.npy", npy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }", ints(fortran))},
      {"sub/dir/nested.npy", npy("{'descr': '|u1', 'fortran_order': True, 'shape': (2,), }", "\x01\x02")},
  });
  loaded rec = load_ok(path);
  ASSERT_TRUE(rec);
  ASSERT_EQ(rec->n_arrays, 7);
  const auto values = [&](int i) {
    const DLTensor& t = rec->arrays[i].tensor;
    const auto* p = static_cast<const int32_t*>(t.data);
    int64_t n = 1;
    for (int k = 0; k < t.ndim; ++k) n *= t.shape[k];
    return std::vector<int32_t>(p, p + n);
  };
  const char* names[] = {"spaced", "bare", "paren", "v2", "v3", "fortran", "sub/dir/nested"};
  for (int i = 0; i < 7; ++i) EXPECT_STREQ(rec->arrays[i].name, names[i]);
  EXPECT_EQ(values(0), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(rec->arrays[1].tensor.ndim, 2);
  EXPECT_EQ(values(1), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(values(2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(values(3), (std::vector<int32_t>{11}));
  EXPECT_EQ(rec->arrays[4].tensor.ndim, 0);
  EXPECT_EQ(values(4), (std::vector<int32_t>{12}));
  EXPECT_EQ(values(5), c_order);
  EXPECT_EQ(static_cast<const uint8_t*>(rec->arrays[6].tensor.data)[1], 2);
}

TEST_F(ZipFormat, SaveNewRefusesExistingFile) {
  auto first = every_dtype();
  const std::string path = file("result.zip");
  ASSERT_EQ(save(first, path), TYCHO_OK) << tycho::last_error();
  const std::string before = slurp(path);
  std::vector<test_array> other = {make<float>("other", f32, {1}, {1.0f})};
  EXPECT_EQ(save(other, path, TYCHO_SAVE_NEW), TYCHO_ERR_IO);
  EXPECT_NE(std::string(tycho::last_error()).find("already exists"), std::string::npos) << tycho::last_error();
  EXPECT_NE(std::string(tycho::last_error()).find(path), std::string::npos) << tycho::last_error();
  EXPECT_EQ(slurp(path), before);
  EXPECT_EQ(listing(), std::set<std::string>{"result.zip"});
}

TEST_F(ZipFormat, OverwriteReplacesExistingFile) {
  auto first = every_dtype();
  const std::string path = file("result.zip");
  ASSERT_EQ(save(first, path, TYCHO_SAVE_NEW, manifest), TYCHO_OK) << tycho::last_error();
  std::vector<test_array> second = {make<double>("energy", f64, {}, {80000.0})};
  ASSERT_EQ(save(second, path, TYCHO_SAVE_OVERWRITE, "{}"), TYCHO_OK) << tycho::last_error();
  loaded rec = load_ok(path);
  ASSERT_TRUE(rec);
  ASSERT_EQ(rec->n_arrays, 1);
  EXPECT_STREQ(rec->arrays[0].name, "energy");
  EXPECT_EQ(*static_cast<const double*>(rec->arrays[0].tensor.data), 80000.0);
  EXPECT_STREQ(rec->manifest_json, "{}");
  EXPECT_EQ(listing(), std::set<std::string>{"result.zip"});
}

TEST_F(ZipFormat, FailedSaveLeavesPreviousFileIntact) {
  auto first = every_dtype();
  const std::string path = file("result.zip");
  ASSERT_EQ(save(first, path, TYCHO_SAVE_NEW, manifest), TYCHO_OK) << tycho::last_error();
  const std::string before = slurp(path);

  // The second array is on a GPU, or of a dtype .npy cannot hold.
  auto on_gpu = every_dtype();
  record_of gpu(on_gpu, manifest);
  gpu.views[1].tensor.device = {kDLCUDA, 0};
  EXPECT_EQ(zip_format().save(&gpu.rec, path.c_str(), TYCHO_SAVE_OVERWRITE), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find(path), std::string::npos) << tycho::last_error();
  EXPECT_NE(std::string(tycho::last_error()).find("f64.npy"), std::string::npos) << tycho::last_error();
  EXPECT_EQ(slurp(path), before);
  EXPECT_EQ(listing(), std::set<std::string>{"result.zip"});

  auto bad_dtype = every_dtype();
  bad_dtype[1].dtype = {kDLBfloat, 16, 1};
  bad_dtype[1].bytes.resize(8);
  EXPECT_EQ(save(bad_dtype, path, TYCHO_SAVE_OVERWRITE), TYCHO_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(tycho::last_error()).find("f64.npy"), std::string::npos) << tycho::last_error();
  EXPECT_NE(std::string(tycho::last_error()).find("bfloat16"), std::string::npos) << tycho::last_error();
  EXPECT_EQ(slurp(path), before);
  EXPECT_EQ(listing(), std::set<std::string>{"result.zip"});

  // A failure after the archive is written (renaming over a non-empty folder) removes it too.
  fs::create_directories(dir / "taken" / "inside");
  EXPECT_EQ(save(first, file("taken"), TYCHO_SAVE_OVERWRITE), TYCHO_ERR_IO);
  EXPECT_NE(std::string(tycho::last_error()).find(file("taken")), std::string::npos) << tycho::last_error();
  EXPECT_TRUE(fs::is_directory(dir / "taken" / "inside"));
  EXPECT_EQ(listing(), (std::set<std::string>{"result.zip", "taken"}));
  EXPECT_EQ(slurp(path), before);
}

TEST_F(ZipFormat, LoadMissingFileIsNotFound) {
  const std::string path = file("nowhere.zip");
  tycho_record* out = reinterpret_cast<tycho_record*>(&out);  // must be reset to NULL
  EXPECT_EQ(zip_format().load(path.c_str(), &out), TYCHO_ERR_NOT_FOUND);
  EXPECT_EQ(out, nullptr);
  EXPECT_NE(std::string(tycho::last_error()).find(path), std::string::npos) << tycho::last_error();
}

TEST_F(ZipFormat, LoadNonZipIsBadData) {
  for (const std::string content : {"this is plain text, not an archive\n", ""}) {
    const std::string path = file("text.zip");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    tycho_record* out = nullptr;
    EXPECT_EQ(zip_format().load(path.c_str(), &out), TYCHO_ERR_BAD_DATA) << content;
    EXPECT_EQ(out, nullptr);
    EXPECT_NE(std::string(tycho::last_error()).find(path), std::string::npos) << tycho::last_error();
  }
}

TEST_F(ZipFormat, MalformedNpyMembersAreBadData) {
  const std::string four(4, '\0');
  struct bad_case {
    const char* label;
    std::string member;
    const char* says;  // part of the message
  };
  const bad_case cases[] = {
      {"no magic", "just some bytes that are not an array", "magic"},
      {"version", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", four, 9), "version 9.0"},
      {"big-endian", npy("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", four), "big-endian"},
      {"unknown dtype", npy("{'descr': '<U1', 'fortran_order': False, 'shape': (1,), }", four), "'<U1'"},
      {"structured", npy("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (1,), }", four), "structured"},
      {"missing shape", npy("{'descr': '<f4', 'fortran_order': False, }", four), "'shape'"},
      {"negative dim", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", four), "non-negative"},
      {"bad bool", npy("{'descr': '<f4', 'fortran_order': maybe, 'shape': (1,), }", four), "True or False"},
      {"junk after", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x", four), "after the dict"},
      {"short data", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (10,), }", four), "declares shape (10,) of float32, 40 bytes"},
      {"long data", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", four + four), "declares shape () of float32, 4 bytes"},
      {"header past end", std::string("\x93NUMPY\x01\x00\xff\x7f{'descr'", 18), "header claims"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = file("bad.zip");
    write_zip(path, {{"good.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", four)},
                     {"bad.npy", c.member}});
    tycho_record* out = nullptr;
    EXPECT_EQ(zip_format().load(path.c_str(), &out), TYCHO_ERR_BAD_DATA);
    EXPECT_EQ(out, nullptr);
    const std::string message = tycho::last_error();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("bad.npy"), std::string::npos) << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
  }
}

}  // namespace
