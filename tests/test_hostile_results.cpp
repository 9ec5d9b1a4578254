// Result, prepared and .npz files that are not what they say (issue 12): a manifest whose
// format_version is 2 or the string "1", a schedule of 2^62 iterations, a compressed member with
// a bad CRC or a declared size no deflate stream can produce, a truth scanned over more than the
// result covers, a "$${" escape in a prepared file's config. And (issue 28) `tycho evaluate`
// reading results as strictly as `--from` (one reader): a prepared file or another format version
// in place of a result, an object cropped or inflated (a zip bomb, refused before it is
// inflated), a member not of a result, a header lying about its shape, duplicate members,
// corrupt prepared files called corrupt, constant object or truth (an undefined correlation), a
// truth smaller than the field it is compared on, optimizer state out of range (a step count of
// 2^63 - 1, a negative mean square), manifest errors naming the key. Every file is made by the
// test: one short run of the shipped example, then members rewritten with python3's zipfile.
#include <gtest/gtest.h>

#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>

#include <array>
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

// python3: copies the zip argv[2] to argv[3], changed as argv[1] says:
//   drop KEY...        manifest.json without the dotted keys
//   member NAME DESCR SHAPE FILL [deflate]   member NAME replaced by a .npy of DESCR and SHAPE
//                      filled with FILL ("zeros", "ones" as complex64 1 + 0i, "halves" float32 0.5);
//                      "deflate" compresses it, written in chunks (a zip bomb stays small)
//   header NAME TEXT   member NAME's .npy header dict replaced by TEXT (\0 for a NUL), data kept
//   extra NAME         a member NAME added (4 bytes)
//   twice NAME         member NAME written a second time
//   negate NAME K      member NAME's float32 number K negated
//   nan                manifest.json's mean_total_intensity spelled NaN (not JSON)
//   truncate           the first two thirds of the file
const char* const k_craft = R"(
import json, struct, sys, zipfile
how, src, dst = sys.argv[1:4]
args = sys.argv[4:]
def header(descr, shape):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    d = d + ' ' * (63 - (10 + len(d)) % 64) + '\n'
    return b'\x93NUMPY\x01\x00' + struct.pack('<H', len(d)) + d.encode()
if how == 'truncate':
    b = open(src, 'rb').read()
    open(dst, 'wb').write(b[:len(b) * 2 // 3])
    sys.exit(0)
zin = zipfile.ZipFile(src)
zout = zipfile.ZipFile(dst, 'w')
for info in zin.infolist():
    name, data = info.filename, zin.read(info.filename)
    if how == 'drop' and name == 'manifest.json':
        m = json.loads(data)
        for key in args:
            node = m
            for k in key.split('.')[:-1]:
                node = node[k]
            del node[key.split('.')[-1]]
        data = json.dumps(m).encode()
    elif how == 'nan' and name == 'manifest.json':
        m = json.loads(data)
        m['data']['mean_total_intensity'] = float('nan')
        data = json.dumps(m).encode()
    elif how == 'member' and name == args[0]:
        descr, shape, fill = args[1:4]
        count = 1
        for d in shape.strip('()').split(','):
            count *= int(d) if d.strip() else 1
        size = {'<c8': 8, '<f4': 4, '<f8': 8, '<c16': 16}[descr]
        unit = {'zeros': bytes(size), 'ones': struct.pack('<ff', 1, 0), 'halves': struct.pack('<f', 0.5)}[fill]
        zi = zipfile.ZipInfo(name)
        zi.compress_type = zipfile.ZIP_DEFLATED if args[4:] == ['deflate'] else zipfile.ZIP_STORED
        with zout.open(zi, 'w', force_zip64=True) as w:
            w.write(header(descr, shape))
            left, chunk = count, unit * (1 << 16)
            while left > 0:
                n = min(left, 1 << 16)
                w.write(chunk[:n * len(unit)])
                left -= n
        continue
    elif how == 'header' and name == args[0]:
        length = struct.unpack('<H', data[8:10])[0]
        d = args[1].replace('\\0', '\0')
        d = d + ' ' * (63 - (10 + len(d)) % 64) + '\n'
        data = b'\x93NUMPY\x01\x00' + struct.pack('<H', len(d)) + d.encode() + data[10 + length:]
    elif how == 'negate' and name == args[0]:
        length = struct.unpack('<H', data[8:10])[0]
        at = 10 + length + 4 * int(args[1])
        value = struct.unpack('<f', data[at:at + 4])[0]
        data = data[:at] + struct.pack('<f', -abs(value) - 1.0) + data[at + 4:]
    zout.writestr(zipfile.ZipInfo(name), data)
    if how == 'twice' and name == args[0]:
        zout.writestr(zipfile.ZipInfo(name), data)
if how == 'extra':
    zout.writestr(args[0], b'abcd')
zout.close()
if how == 'flip':  # one byte of a stored member changed, its CRC-32 in the zip left as it was
    at = zipfile.ZipFile(dst).getinfo(args[0]).header_offset
    f = open(dst, 'r+b')
    f.seek(at)
    local = f.read(30)
    at += 30 + struct.unpack('<H', local[26:28])[0] + struct.unpack('<H', local[28:30])[0] + int(args[1])
    f.seek(at)
    b = f.read(1)
    f.seek(at)
    f.write(bytes([(b[0] + 1) % 256]))
    f.close()
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
    // The positions held at the stated raster (not the lattice's scale): the messages below name
    // the field of view the raster's extent gives.
    run_ = new command_result(run_command({tycho::test::tycho_exe(), "reconstruct", config_, "-q", "--iterations",
                                           "4", "--stop-after", "2", "-o", result_, "--set",
                                           "reconstruct.positions.correct=false", "--set",
                                           "preprocess.scan_scale=\"stated\""}));
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
            "tycho: error: --from '" + edited +
                "': member 'manifest.json' has \"format_version\": \"1\", expected the integer 1 for a tycho result");
}

TEST_F(HostileResults, FormatVersionTwoIsRefused) {
  const std::string edited = tmp_ / "edited.zip";
  EXPECT_EQ(resume_message("format_version", "2"),
            "tycho: error: --from '" + edited +
                "' is a tycho result of format version 2 (member 'manifest.json'); this tycho reads version 1: "
                "read it with the tycho that wrote it");
}

// 2^62 iterations: resuming would run for ever.
TEST_F(HostileResults, HugeScheduleIsRefused) {
  const std::string edited = tmp_ / "edited.zip";
  EXPECT_EQ(resume_message("history.schedule_iterations", "4611686018427387904"),
            "tycho: error: --from '" + edited +
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

// ---- issue 28: one reader of results for `tycho evaluate` and `--from`

// A copy of the shared result changed by k_craft (`how` and its arguments).
class HostileResultFiles : public HostileResults {
 protected:
  std::string crafted(const std::string& name, const std::vector<std::string>& how, const std::string& from = "") {
    const std::string path = tmp_ / name;
    std::vector<std::string> args = {how[0], from.empty() ? result_ : from, path};
    args.insert(args.end(), how.begin() + 1, how.end());
    auto py = python(k_craft, args);
    EXPECT_TRUE(py.exited_with(0)) << py.describe();
    return path;
  }
  static std::string truth() { return tycho::test::example_data("mos2_ground_truth.npz"); }
  std::string evaluate_error(const std::string& result, const std::string& truth_path = truth()) {
    const std::string m = error_line(run_command({tycho::test::tycho_exe(), "evaluate", result, "--truth", truth_path}));
    EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
    EXPECT_EQ(m.find("internal error"), std::string::npos) << m;
    return m;
  }
  std::string from_error(const std::string& from, bool with_config = true) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct"};
    if (with_config) argv.push_back(config_);
    argv.insert(argv.end(), {"-q", "--from", from, "--iterations", "1", "-o", tmp_ / "resumed.zip"});
    const std::string m = error_line(run_command(argv));
    EXPECT_FALSE(fs::exists(tmp_ / "resumed.zip"));
    EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
    return m;
  }
  // `tycho evaluate` and `--from` refuse `file` with the same message (--from's starts with "--from ").
  void expect_both_refuse(const std::string& file, const std::string& message) {
    EXPECT_EQ(evaluate_error(file), "tycho: error: " + message);
    EXPECT_EQ(from_error(file), "tycho: error: --from " + message);
  }
};

// Scored with exit status 0 before; --from refused them.
TEST_F(HostileResultFiles, EvaluateRefusesWhatFromRefuses) {
  const std::string v2 = tmp_ / "v2.zip";
  ASSERT_TRUE(python(k_edit_manifest, {result_, v2, "format_version", "2"}).exited_with(0));
  expect_both_refuse(v2, "'" + v2 + "' is a tycho result of format version 2 (member 'manifest.json'); this tycho "
                                    "reads version 1: read it with the tycho that wrote it");
  const std::string none = crafted("none.zip", {"drop", "format_version"});
  expect_both_refuse(none, "'" + none + "': member 'manifest.json' has no \"format_version\"; expected 1 for a tycho "
                                        "result");
  const std::string prepared = tmp_ / "prepared.zip";
  auto pre = run_command({tycho::test::tycho_exe(), "preprocess", config_, "-q", "-o", prepared});
  ASSERT_TRUE(pre.exited_with(0)) << pre.describe();
  EXPECT_EQ(evaluate_error(prepared), "tycho: error: '" + prepared + "' is a prepared file (written by tycho "
                                      "preprocess), not a result of tycho reconstruct: give a result file "
                                      "(reconstruct --from takes a prepared file without a CONFIG)");
}

// An object cropped to another shape than the manifest's scan implies, and one inflated to
// 64 MiB of deflated zeros (a zip bomb: a few KB on disk): refused from the member's header,
// before anything is inflated, by evaluate and --from alike.
TEST_F(HostileResultFiles, ObjectOfAnotherShapeIsRefusedBeforeItIsInflated) {
  const std::string expected = "; expected (slices, H, W) complex64 or complex128 with slices from 1 to 4096 and (H, W) "
                               "= (220, 197) from the manifest's scan (32 x 24 positions, step 0.5 Å, pixel "
                               "0.1736111111 Å, window 96 x 96, padding 16 px)";
  const std::string cropped = crafted("cropped.zip", {"member", "object.npy", "<c8", "(1, 100, 100)", "ones"});
  expect_both_refuse(cropped, "'" + cropped + "': array 'object' is (1, 100, 100) complex64" + expected);
  const std::string bomb =
      crafted("bomb.zip", {"member", "object.npy", "<c8", "(1, 2048, 4096)", "zeros", "deflate"});
  EXPECT_LT(fs::file_size(bomb), uint64_t(1) << 20);
  expect_both_refuse(bomb, "'" + bomb + "': array 'object' is (1, 2048, 4096) complex64" + expected);
  // A float32 object is named by its dtype (it was "a dtype code 2 of 32 bits object").
  const std::string f32 = crafted("f32.zip", {"member", "object.npy", "<f4", "(1, 220, 197)", "halves"});
  EXPECT_EQ(evaluate_error(f32), "tycho: error: '" + f32 + "': array 'object' is (1, 220, 197) float32" + expected);
}

// A member that is not an array of a result, one whose header lies about its size (the member
// holds less than its header declares), one written twice: refused, naming it.
TEST_F(HostileResultFiles, MembersThatAreNotAResultsAreRefused) {
  const std::string extra = crafted("extra.zip", {"extra", "junk.npy"});
  EXPECT_TRUE(evaluate_error(extra).find("member 'junk.npy': too short for a .npy array (4 bytes)") !=
              std::string::npos);
  const std::string lying = crafted("lying.zip", {"header", "positions_px.npy",
                                                  "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 2), }"});
  EXPECT_EQ(evaluate_error(lying),
            "tycho: error: '" + lying + "': member 'positions_px.npy': holds 12288 bytes of array data, but its .npy "
            "header declares shape (1000000, 2) of float64, 16000000 bytes: the header lies about the shape, or the "
            "member is truncated");
  const std::string twice = crafted("twice.zip", {"twice", "manifest.json"});
  expect_both_refuse(twice, "'" + twice + "': member 'manifest.json' appears twice; expected each member once "
                                          "(readers disagree which one is meant): the file is corrupt or crafted");
  // NUL bytes in a header are printed escaped.
  const std::string nul = crafted("nul.zip", {"header", "mask.npy", "{'descr': '|u1\\0', 'fortran_order': False, }"});
  const std::string m = evaluate_error(nul);
  EXPECT_NE(m.find("|u1\\x00"), std::string::npos) << m;
  EXPECT_EQ(m.find('\0'), std::string::npos);
}

// Manifest errors name the file, the key and what was expected: never the JSON library's text.
TEST_F(HostileResultFiles, ManifestErrorsNameTheKey) {
  const std::string no_pixel = crafted("nopixel.zip", {"drop", "calibration.object_pixel_A"});
  expect_both_refuse(no_pixel, "'" + no_pixel + "': member 'manifest.json' has no calibration.object_pixel_A; expected "
                                                "2 finite numbers > 0 (the object's pixel size in Å)");
  const std::string nan = crafted("nan.zip", {"nan"});
  EXPECT_TRUE(evaluate_error(nan).find("': member 'manifest.json' is not valid JSON (it stops parsing at byte ") !=
              std::string::npos);
}

// The scan map the reader lays the object out under (preprocess.scan_map.linear): a singular map
// is refused naming the key; a finite one that stretches the scan absurdly gives an object shape
// the member does not have, refused with the shape it implies (no allocation of it).
TEST_F(HostileResultFiles, ScanMapsThatCannotBeTheRunsAreRefused) {
  const std::string singular = tmp_ / "singular.zip";
  ASSERT_TRUE(python(k_edit_manifest, {result_, singular, "preprocess.scan_map.linear", "[[0, 0], [0, 0]]"})
                  .exited_with(0));
  expect_both_refuse(singular, "'" + singular + "': member 'manifest.json': preprocess.scan_map.linear must be a 2 x "
                                                "2 array of finite numbers with a positive determinant (the scan's "
                                                "linear map)");
  const std::string stretched = tmp_ / "stretched.zip";
  ASSERT_TRUE(python(k_edit_manifest, {result_, stretched, "preprocess.scan_map.linear", "[[100000, 0], [0, 0.00001]]"})
                  .exited_with(0));
  const std::string m = evaluate_error(stretched);
  EXPECT_NE(m.find("': array 'object' is (1, 220, 197) complex64; expected (slices, H, W)"), std::string::npos) << m;
  EXPECT_NE(m.find("under its preprocess.scan_map)"), std::string::npos) << m;
}

// A step count of 2^63 - 1 overflowed Adam's step (UBSan), then the run diverged and blamed the
// learning rate; a negative mean square (Adam's v) has no square root.
TEST_F(HostileResultFiles, OptimizerStateOutOfRangeIsRefused) {
  const std::string steps = tmp_ / "steps.zip";
  ASSERT_TRUE(python(k_edit_manifest, {result_, steps, "optimizer_state.object.steps", "9223372036854775807"})
                  .exited_with(0));
  expect_both_refuse(steps, "'" + steps + "': member 'manifest.json' has optimizer_state.object.steps = "
                                          "9223372036854775807, expected an integer from 0 to 1536");
  const std::string negative = crafted("negative.zip", {"negate", "optimizer.object.v.npy", "2"});
  EXPECT_EQ(from_error(negative),
            "tycho: error: '" + negative + "': array 'optimizer.object.v' (resumed with --from) is refused by the "
            "object optimizer: adam optimizer: state 'v' holds -1 at real value 2; expected finite values >= 0 (a "
            "mean square)");
}

// An all-ones object has a constant local phase; an all-zero truth a constant phase: scored
// pearson 0.0 before, an undefined correlation. A 2 x 2 truth was tiled over the field.
TEST_F(HostileResultFiles, UndefinedCorrelationsAndSmallTruthsAreRefused) {
  const std::string ones = crafted("ones.zip", {"member", "object.npy", "<c8", "(1, 220, 197)", "ones"});
  EXPECT_EQ(evaluate_error(ones), "tycho: error: '" + ones + "': the object's local phase is constant over the 72 x 54 "
                                  "px field of view compared, so its correlation with the truth is undefined: nothing "
                                  "to score (an untouched or empty object?)");
  const std::string flat = tmp_ / "flat.npz";
  ASSERT_TRUE(python(k_craft, {"member", truth(), flat, "phase.npy", "<f4", "(288, 288)", "zeros"}).exited_with(0));
  EXPECT_TRUE(evaluate_error(result_, flat).find("'" + flat + "': the truth's local phase is constant over the ") !=
              std::string::npos);
  const std::string tiny = tmp_ / "tiny.npz";
  ASSERT_TRUE(python(k_craft, {"member", truth(), tiny, "phase.npy", "<f4", "(2, 2)", "halves"}).exited_with(0));
  EXPECT_EQ(evaluate_error(result_, tiny),
            "tycho: error: '" + result_ + "' against the truth '" + tiny + "': the truth's cell (2 x 2 px) is smaller "
            "than the field of view it is compared on (72 x 54 px of the object): a truth must cover that field; it is "
            "not repeated to fill it");
}

// A corrupt prepared file (a NaN in its manifest, a truncated zip) was called "not a prepared
// file: give the CONFIG file"; a member written twice was read (the first by tycho, the last by
// Python's zipfile).
TEST_F(HostileResultFiles, CorruptPreparedFilesAreCalledCorrupt) {
  const std::string prepared = tmp_ / "prepared.zip";
  auto pre = run_command({tycho::test::tycho_exe(), "preprocess", config_, "-q", "--save-raw-data", "-o", prepared});
  ASSERT_TRUE(pre.exited_with(0)) << pre.describe();
  const std::string nan = crafted("nan.zip", {"nan"}, prepared);
  const std::string m = from_error(nan, false);
  EXPECT_EQ(m.rfind("tycho: error: --from '" + nan + "': member 'manifest.json' is not valid JSON (it stops parsing at byte ",
                    0),
            0u)
      << m;
  EXPECT_NE(m.find("NaN and inf are not JSON): the file is corrupt"), std::string::npos) << m;
  const std::string cut = crafted("cut.zip", {"truncate"}, prepared);
  EXPECT_EQ(from_error(cut, false),
            "tycho: error: --from '" + cut + "' is not a tycho result or prepared file: it is not a readable zip archive "
            "(libzip: Not a zip archive); the file is truncated, corrupt or of another kind");
  const std::string twice = crafted("twice.zip", {"twice", "patterns.npy"}, prepared);
  EXPECT_EQ(from_error(twice, false),
            "tycho: error: --from '" + twice + "': member 'patterns.npy' appears twice; expected each member once (readers "
            "disagree which one is meant): the file is corrupt or crafted");
  // A byte of the patterns changed (a damaged disk, a bad copy): its counts still parse, so only
  // the CRC-32 the zip records for the member tells, checked as the run's first pass reads it.
  const std::string flipped = crafted("flipped.zip", {"flip", "patterns.npy", "5000"}, prepared);
  EXPECT_EQ(from_error(flipped, false),
            "tycho: error: '" + flipped + "': member 'patterns.npy' does not match the CRC-32 the zip records for it "
            "(CRC error): the file is damaged; prepare the data again (tycho preprocess)");
}

// The X-ray fields of a prepared manifest (issue 29): the listed positions (data.positions_A) and
// the source's far-field detector and radiation are read through the same checks as the rest,
// naming the key and what was expected.
TEST_F(HostileResultFiles, PreparedXrayFieldsAreChecked) {
  const std::string prepared = tmp_ / "prepared_xray.zip";
  auto pre = run_command({tycho::test::tycho_exe(), "preprocess", config_, "-q", "--save-raw-data", "-o", prepared});
  ASSERT_TRUE(pre.exited_with(0)) << pre.describe();
  std::string one_bad = "[";
  for (int k = 0; k < 768; ++k) one_bad += k == 0 ? "[0, 0]" : k == 300 ? ", [\"a\", 0]" : ", [1.5, 2]";
  one_bad += "]";
  const std::vector<std::array<std::string, 3>> cases = {
      {"data.positions_A", "[[0, 0]]", "data.positions_A = [[0,0]], expected 768 positions [x, y] of finite numbers in"},
      {"data.positions_A", one_bad, "data.positions_A = "},
      {"source_calibration.radiation", "\"neutron\"", "\"electron\", \"xray\" or null"},
      {"source_calibration.detector_pixel_m", "[1e-4, -1]", "source_calibration.detector_pixel_m"},
      {"source_calibration.detector_distance_m", "\"far\"", "source_calibration.detector_distance_m"},
      {"source_calibration.detector_distance_m", "-1.2", "source_calibration.detector_distance_m = -1.2, expected a distance > 0"}};
  for (const auto& [key, value, part] : cases) {
    const std::string edited = tmp_ / "edited_prepared.zip";
    auto py = python(k_edit_manifest, {prepared, edited, key, value});
    ASSERT_TRUE(py.exited_with(0)) << py.describe();
    const std::string m = from_error(edited, false);
    EXPECT_NE(m.find(part), std::string::npos) << key << " = " << value.substr(0, 40) << "\n" << m;
    EXPECT_NE(m.find(edited), std::string::npos) << m;
  }
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

// A header that declares (2, 3, 4, 8) over the data of (2, 3, 4, 4): it was reported as "no
// 4-D array"; now as the header it is.
TEST_F(HostileNpz, HeaderLyingAboutItsShapeIsNamed) {
  const std::string path = tmp_ / "lie.npz";
  auto py = python(R"(
import struct, sys, zipfile
d = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4, 8), }"
d = d + ' ' * (63 - (10 + len(d)) % 64) + '\n'
npy = b'\x93NUMPY\x01\x00' + struct.pack('<H', len(d)) + d.encode() + struct.pack('<f', 1.0) * 96
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    z.writestr('data.npy', npy)
)",
                   {path});
  ASSERT_TRUE(py.exited_with(0)) << py.describe();
  EXPECT_EQ(open(path), TYCHO_ERR_BAD_DATA);
  EXPECT_EQ(std::string(tycho::last_error()),
            "'" + path + "': member 'data.npy': its .npy header declares shape (2, 3, 4, 8) of float32 ('<f4'), 768 "
            "bytes of data, but only 384 follow the header: the header lies about the shape, or the array is truncated");
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
