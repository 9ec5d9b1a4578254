// Result, prepared and .npz files that are not what they say (issue 12): a manifest whose
// format_version is 2 or the string "1", a schedule of 2^62 iterations, a compressed member with
// a bad CRC or a declared size no deflate stream can produce, a truth scanned over more than the
// result covers, a "$${" escape in a prepared file's config. Every file is made by the test: one
// short run of the shipped example, then members rewritten with python3's zipfile.
#include <gtest/gtest.h>

#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "source_under_test.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;
using tycho::test::command_result;
using tycho::test::error_line;
using tycho::test::run_command;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// python3: copies the zip argv[1] to argv[2], member by member (same compression), with
// manifest.json's value at the dotted path argv[3] replaced by the JSON argv[4].
const char* const k_edit_manifest = R"(
import json, sys, zipfile
src, dst, path, value = sys.argv[1:5]
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, 'w') as zout:
    for info in zin.infolist():
        data = zin.read(info.filename)
        if info.filename == 'manifest.json':
            m = json.loads(data)
            node = m
            keys = path.split('.')
            for k in keys[:-1]:
                node = node[k]
            node[keys[-1]] = json.loads(value)
            data = json.dumps(m).encode()
        zout.writestr(info, data)
)";

// python3: copies the zip argv[1] to argv[2] with member argv[3] replaced by a little-endian
// .npy of dtype argv[4] ('<i8' or '<f8'), shape (len(values),) and the values argv[5:].
const char* const k_replace_npy = R"(
import struct, sys, zipfile
src, dst, member, descr = sys.argv[1:5]
values = sys.argv[5:]
fmt = {'<i8': 'q', '<f8': 'd'}[descr]
conv = int if fmt == 'q' else float
payload = struct.pack('<%d%s' % (len(values), fmt), *[conv(v) for v in values])
d = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, len(values))
d = d + ' ' * (63 - (10 + len(d)) % 64) + '\n'
npy = b'\x93NUMPY\x01\x00' + struct.pack('<H', len(d)) + d.encode() + payload
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, 'w') as zout:
    for info in zin.infolist():
        zout.writestr(info, npy if info.filename == member else zin.read(info.filename))
)";

// python3: writes argv[1], an .npz holding "data.npy", a float32 (2, 3, 4, 4) array of 1.0,
// deflated; then, per argv[2]: "crc" flips a bit of the member's CRC-32 (local header and
// central directory alike), "size" declares 2^31 uncompressed bytes, "none" leaves it valid.
const char* const k_crafted_npz = R"(
import struct, sys, zipfile, zlib
path, how = sys.argv[1:3]
d = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4, 4), }"
d = d + ' ' * (63 - (10 + len(d)) % 64) + '\n'
npy = b'\x93NUMPY\x01\x00' + struct.pack('<H', len(d)) + d.encode() + struct.pack('<f', 1.0) * 96
with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED) as z:
    z.writestr('data.npy', npy)
raw = bytearray(open(path, 'rb').read())
crc, size = zlib.crc32(npy), len(npy)
if how == 'crc':
    old, new = struct.pack('<I', crc), struct.pack('<I', crc ^ 1)
elif how == 'size':
    old = struct.pack('<I', size)
    new = struct.pack('<I', 1 << 31)
else:
    old = new = b''
if old:
    assert raw.count(old) == 2, raw.count(old)
    raw = raw.replace(old, new)
open(path, 'wb').write(bytes(raw))
)";

command_result python(const char* script, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"python3", "-c", script};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

class HostileResults : public ::testing::Test {
 protected:
  // One run of the shipped example (2 of 4 iterations, so it can be resumed), shared by the tests.
  static void SetUpTestSuite() {
    folder_ = new tycho::test::temp_folder;
    std::string text = read_text(tycho::test::source_dir() + "/examples/mos2.toml");
    const std::string from = "\"data/mos2_80kV_32x24_counts.h5\"";
    text.replace(text.find(from), from.size(), "\"" + tycho::test::example_data("mos2_80kV_32x24_counts.h5") + "\"");
    config_ = folder_->write("run.toml", text);
    result_ = *folder_ / "result.zip";
    run_ = new command_result(run_command({tycho::test::tycho_exe(), "reconstruct", config_, "-q", "--iterations",
                                           "4", "--stop-after", "2", "-o", result_}));
  }
  static void TearDownTestSuite() {
    delete run_;
    delete folder_;
  }
  void SetUp() override { ASSERT_TRUE(run_->exited_with(0)) << run_->describe(); }

  // The result with manifest.json's `path` set to `json`, as a new file; `--from` it fails.
  std::string resume_message(const std::string& path, const std::string& json) {
    const std::string edited = tmp_ / "edited.zip";
    auto py = python(k_edit_manifest, {result_, edited, path, json});
    EXPECT_TRUE(py.exited_with(0)) << py.describe();
    auto r = run_command({tycho::test::tycho_exe(), "reconstruct", config_, "-q", "--from", edited, "--iterations",
                          "1", "-o", tmp_ / "resumed.zip"});
    EXPECT_FALSE(fs::exists(tmp_ / "resumed.zip"));
    return error_line(r);
  }

  static tycho::test::temp_folder* folder_;
  static command_result* run_;
  static std::string config_, result_;
  tycho::test::temp_folder tmp_;
};
tycho::test::temp_folder* HostileResults::folder_ = nullptr;
command_result* HostileResults::run_ = nullptr;
std::string HostileResults::config_, HostileResults::result_;

TEST_F(HostileResults, FormatVersionAsStringIsRefused) {
  const std::string edited = tmp_ / "edited.zip";
  EXPECT_EQ(resume_message("format_version", "\"1\""),
            "tycho: error: '" + edited +
                "': member 'manifest.json' has \"format_version\": \"1\", expected the integer 1 for a tycho result");
}

TEST_F(HostileResults, FormatVersionTwoIsRefused) {
  const std::string edited = tmp_ / "edited.zip";
  EXPECT_EQ(resume_message("format_version", "2"),
            "tycho: error: '" + edited +
                "' is a tycho result of format version 2 (member 'manifest.json'); this tycho reads version 1: "
                "resume it with the tycho that wrote it");
}

// 2^62 iterations: resuming would run for ever.
TEST_F(HostileResults, HugeScheduleIsRefused) {
  const std::string edited = tmp_ / "edited.zip";
  EXPECT_EQ(resume_message("history.schedule_iterations", "4611686018427387904"),
            "tycho: error: '" + edited +
                "': member 'manifest.json' has history.schedule_iterations = 4611686018427387904, expected an "
                "integer from 0 to 100000000");
  EXPECT_NE(resume_message("history.iterations", "2.5").find("history.iterations = 2.5"), std::string::npos);
}

// The truth's scan (scan_shape) made larger than the one the result reconstructed: refused,
// where it used to print a score over the few pixels both share. The real truth is accepted.
TEST_F(HostileResults, EvaluateRefusesAResultThatDoesNotCoverTheTruthScan) {
  const std::string truth = tycho::test::shared_data("mos2_ground_truth.npz");
  if (!fs::exists(truth)) GTEST_SKIP() << "no " << truth;
  auto ok = run_command({tycho::test::tycho_exe(), "evaluate", result_, "--truth", truth});
  EXPECT_TRUE(ok.exited_with(0)) << ok.describe();
  const std::string bigger = tmp_ / "truth_64x48.npz";
  auto py = python(k_replace_npy, {truth, bigger, "scan_shape.npy", "<i8", "64", "48"});
  ASSERT_TRUE(py.exited_with(0)) << py.describe();
  const std::string m = error_line(run_command({tycho::test::tycho_exe(), "evaluate", result_, "--truth", bigger}));
  EXPECT_NE(m.find("'" + result_ + "' does not cover the scan of the truth '" + bigger + "': its 768 positions span"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("the truth was scanned at 64 x 48 positions"), std::string::npos) << m;
}

// A prepared file keeps a "$${" escape literal: its stored config (already expanded) is not
// expanded again, where the unset variable used to make the prepared file unusable.
TEST_F(HostileResults, EscapedDollarBraceSurvivesAPreparedFile) {
  std::string text = read_text(config_);
  const std::string from = "path = \"mos2-result.zip\"";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "path = \"run-$${TYCHO_TEST_SURELY_UNSET}.zip\"");
  const std::string config = tmp_.write("escaped.toml", text);
  const std::string prepared = tmp_ / "prepared.zip";
  auto pre = run_command({tycho::test::tycho_exe(), "preprocess", config, "-q", "-o", prepared});
  ASSERT_TRUE(pre.exited_with(0)) << pre.describe();
  auto run = run_command({tycho::test::tycho_exe(), "reconstruct", "--from", prepared, "-q", "--iterations", "1",
                          "-o", tmp_ / "from_prepared.zip"});
  EXPECT_TRUE(run.exited_with(0)) << run.describe();
  const std::string manifest = tycho::test::load_result(tmp_ / "from_prepared.zip").manifest_json;
  EXPECT_NE(manifest.find("run-${TYCHO_TEST_SURELY_UNSET}.zip"), std::string::npos) << manifest;
}

class HostileNpz : public ::testing::Test {
 protected:
  std::string crafted(const std::string& how) {
    const std::string path = tmp_ / (how + ".npz");
    auto py = python(k_crafted_npz, {path, how});
    EXPECT_TRUE(py.exited_with(0)) << py.describe();
    return path;
  }
  tycho_status open(const std::string& path) {
    return source_.open(tycho::test::plugins(), "npy", "path = \"" + path + "\"\n", "");
  }
  tycho::test::temp_folder tmp_;
  tycho::test::source_under_test source_;
};

TEST_F(HostileNpz, ValidCompressedNpzReads) {
  ASSERT_EQ(open(crafted("none")), TYCHO_OK) << tycho::last_error();
  const auto patterns = source_.read(0, 6);
  for (float v : patterns) ASSERT_EQ(v, 1.0f);
}

TEST_F(HostileNpz, BadCrcIsRefused) {
  const std::string path = crafted("crc");
  EXPECT_EQ(open(path), TYCHO_ERR_BAD_DATA);
  EXPECT_EQ(tycho::last_error(), "'" + path + ":data' is corrupt: CRC error (member 'data.npy')");
  // The result loader (zip format) reads through the same check.
  try {
    tycho::test::load_result(path);
    ADD_FAILURE() << "loaded";
  } catch (const tycho::error& e) {
    EXPECT_EQ(std::string(e.what()), "member 'data.npy' of " + path + ": CRC error");
  }
}

// A member declaring 2 GiB from a few hundred compressed bytes: refused before 2 GiB is
// allocated or inflated, by the source and by the result loader.
TEST_F(HostileNpz, DeclaredSizeBeyondDeflateIsRefused) {
  const std::string path = crafted("size");
  EXPECT_EQ(open(path), TYCHO_ERR_BAD_DATA);
  EXPECT_NE(std::string(tycho::last_error()).find("declares 2147483648 bytes from "), std::string::npos) << tycho::last_error();
  EXPECT_NE(std::string(tycho::last_error()).find("more than deflate can produce"), std::string::npos) << tycho::last_error();
  try {
    tycho::test::load_result(path);
    ADD_FAILURE() << "loaded";
  } catch (const tycho::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("member 'data.npy' of " + path + " declares 2147483648 bytes from ", 0), 0u)
        << e.what();
  }
}

}  // namespace
