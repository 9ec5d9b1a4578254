// Targets read per mini-batch ([reconstruct] target_residency = "disk", docs/streaming.md): a
// run from a prepared file's patterns gives the same object, probe, positions and loss history
// bit for bit as the same run with the targets in memory ("device", "host"); "auto" streams when
// the targets exceed the stated memory and says why; explicit values that cannot be honoured are
// refused with the reason; and a data set larger than the process's memory limit (RLIMIT_DATA)
// reconstructs from disk under that limit, with a peak RSS below it and the in-memory result.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using tycho::test::run_command;

// A simulated scan of `rx` x `ry` noise-free patterns of n x n pixels, prepared with its patterns
// embedded; `extra`: more [preprocess] lines.
std::string prepare(const tycho::test::temp_folder& tmp, int64_t rx, int64_t ry, int64_t n, const std::string& extra) {
  const std::string config = tmp.write("sim.toml", "[data]\nsource = \"simulate\"\nscan_shape = [" + std::to_string(rx) +
                                                       ", " + std::to_string(ry) + "]\ndetector_shape = [" +
                                                       std::to_string(n) + ", " + std::to_string(n) +
                                                       "]\nthreads = 2\n[preprocess]\n" + extra);
  auto r = run_command({tycho::test::tycho_exe(), "preprocess", config, "--save-raw-data", "-q", "-o", tmp / "p.zip"});
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  return tmp / "p.zip";
}

tycho::test::command_result reconstruct(const std::string& prepared, const std::string& out,
                                        std::vector<std::string> sets) {
  // The positions held: their curvature's measurements (iterations 1 and 2 here, with the default
  // correct = "auto") pass over the data again, batches no read-ahead predicts (docs/streaming.md).
  std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", "--from", prepared, "-o", out,
                                   "--iterations", "3", "--set", "reconstruct.positions.correct=false",
                                   "--set", "reconstruct.batch_size=32",
                                   "--set", "reconstruct.threads=2", "--set", "output.previews=false"};
  for (auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(std::move(s));
  }
  return run_command(argv);
}

void expect_identical(const std::string& a, const std::string& b) {
  auto ra = tycho::test::load_result(a), rb = tycho::test::load_result(b);
  for (const char* name : {"object", "probe", "loss_history", "positions_px"}) {
    const auto& x = ra.array(name, a);
    const auto& y = rb.array(name, b);
    EXPECT_EQ(x.shape, y.shape) << name;
    EXPECT_TRUE(x.bytes == y.bytes) << name << " differs between " << a << " and " << b;
  }
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// 16 x 16 patterns of 60 x 60 pixels, padded to a 64 x 64 window: the stream shifts and pads
// each pattern as it reads it. Disk, host and device: one result.
TEST(TargetStreaming, DiskHostAndDeviceGiveOneResultBitForBit) {
  tycho::test::temp_folder tmp;
  const std::string p = prepare(tmp, 16, 16, 60, "pad_detector_to = [64, 64]\n");
  auto device = reconstruct(p, tmp / "device.zip", {"reconstruct.target_residency='device'"});
  ASSERT_TRUE(device.exited_with(0)) << device.describe();
  EXPECT_TRUE(contains(device.err, "targets: device")) << device.err;
  auto disk = reconstruct(p, tmp / "disk.zip", {"reconstruct.target_residency='disk'"});
  ASSERT_TRUE(disk.exited_with(0)) << disk.describe();
  EXPECT_TRUE(contains(disk.err, "targets: disk ([reconstruct] target_residency = \"disk\")")) << disk.err;
  // 8 batches in each of 3 iterations: every one but the first was predicted and read ahead.
  EXPECT_TRUE(contains(disk.err, "24 batches read from disk, 23 of them read ahead")) << disk.err;
  auto host = reconstruct(p, tmp / "host.zip", {"reconstruct.target_residency='host'"});
  ASSERT_TRUE(host.exited_with(0)) << host.describe();
  expect_identical(tmp / "device.zip", tmp / "disk.zip");
  expect_identical(tmp / "device.zip", tmp / "host.zip");
  // And the run straight from the source, which reads and pads the patterns in memory without
  // the prepared file: the stream's shift and padding are the in-memory path's.
  auto direct = run_command({tycho::test::tycho_exe(), "reconstruct", tmp / "sim.toml", "-o", tmp / "direct.zip",
                             "--iterations", "3", "--set", "reconstruct.batch_size=32", "--set",
                             "reconstruct.positions.correct=false", "--set", "reconstruct.threads=2", "--set",
                             "output.previews=false"});
  ASSERT_TRUE(direct.exited_with(0)) << direct.describe();
  expect_identical(tmp / "direct.zip", tmp / "disk.zip");
  // The loss fell: the runs computed something.
  const auto h = tycho::test::load_result(tmp / "disk.zip").array("loss_history", "disk.zip");
  ASSERT_EQ(h.count(), 3);
  EXPECT_LT(h.as<double>()[2], h.as<double>()[0]);
}

// Batches of 2 patterns: the engine asks for the next batch almost as soon as the worker (at idle
// priority) is told to read it ahead, so both threads read patterns of one batch, claiming them
// from a shared counter, on their own file handles. Whoever reads which pattern, the batches and
// the result are those of the in-memory run, and every batch after the first counts as read ahead.
TEST(TargetStreaming, ReadAheadSharedWithTheEngineThreadGivesTheInMemoryResult) {
  tycho::test::temp_folder tmp;
  const std::string p = prepare(tmp, 12, 12, 32, "");
  const std::string small = "reconstruct.batch_size=2";
  auto device = reconstruct(p, tmp / "device.zip", {"reconstruct.target_residency='device'", small});
  ASSERT_TRUE(device.exited_with(0)) << device.describe();
  auto disk = reconstruct(p, tmp / "disk.zip", {"reconstruct.target_residency='disk'", small});
  ASSERT_TRUE(disk.exited_with(0)) << disk.describe();
  // 72 batches in each of 3 iterations.
  EXPECT_TRUE(contains(disk.err, "216 batches read from disk, 215 of them read ahead (")) << disk.err;
  expect_identical(tmp / "device.zip", tmp / "disk.zip");
}

// Targets of 4 MiB against a stated 5 MiB (the run needs 5.4 MiB with them in memory, 2.9 MiB reading
// them from disk, with the default float sums; 6.5 and 4 MiB with deterministic sums): "auto" reads them from disk and says why;
// "device" is refused with the remedy; "disk" without a prepared file is refused with what to do.
TEST(TargetStreaming, AutoReadsFromDiskWhenTheTargetsExceedTheStatedMemory) {
  tycho::test::temp_folder tmp;
  const std::string p = prepare(tmp, 16, 16, 64, "");
  auto device = reconstruct(p, tmp / "device.zip", {});  // auto, the machine's memory: in memory
  ASSERT_TRUE(device.exited_with(0)) << device.describe();
  EXPECT_TRUE(contains(device.err, "targets: device (target_residency = \"auto\": the run needs ")) << device.err;
  auto automatic = reconstruct(p, tmp / "auto.zip", {"reconstruct.host_memory_GiB=0.005"});
  ASSERT_TRUE(automatic.exited_with(0)) << automatic.describe();
  EXPECT_TRUE(contains(automatic.err, "targets: disk (target_residency = \"auto\": the run needs ")) << automatic.err;
  EXPECT_TRUE(contains(automatic.err, "with its targets in memory, more than 5.12 MiB ([reconstruct] host_memory_GiB = "
                                      "0.005); reading them per batch from disk it needs "))
      << automatic.err;
  expect_identical(tmp / "device.zip", tmp / "auto.zip");

  auto refused = reconstruct(p, tmp / "refused.zip",
                             {"reconstruct.host_memory_GiB=0.005", "reconstruct.target_residency='device'"});
  EXPECT_TRUE(refused.exited_with(2)) << refused.describe();
  EXPECT_TRUE(contains(refused.err, "targets read per batch from a prepared file (target_residency = \"disk\"")) << refused.err;

  const std::string config = tmp.write("sim.toml", "[data]\nsource = \"simulate\"\nscan_shape = [4, 4]\n"
                                                   "detector_shape = [64, 64]\n[reconstruct]\ntarget_residency = \"disk\"\n");
  auto no_file = run_command({tycho::test::tycho_exe(), "reconstruct", config, "-q", "-o", tmp / "x.zip"});
  EXPECT_TRUE(no_file.exited_with(2)) << no_file.describe();
  EXPECT_TRUE(contains(no_file.err, "[reconstruct] target_residency = \"disk\": only a prepared file's patterns are read "
                                    "per batch: run tycho preprocess --save-raw-data -o prepared.zip, then reconstruct "
                                    "--from prepared.zip"))
      << no_file.err;
}

// 96 x 96 patterns of 48 x 48 pixels: 85 MiB of float32 targets. Under RLIMIT_DATA = 64 MiB the
// planner ("auto") reads them from disk, the run needs far less than the limit, and its result
// is the in-memory run's.
TEST(TargetStreaming, ADataSetLargerThanTheMemoryLimitReconstructsFromDisk) {
  tycho::test::temp_folder tmp;
  const std::string p = prepare(tmp, 96, 96, 48, "");
  const uint64_t limit = uint64_t(64) << 20, targets = uint64_t(96 * 96) * 48 * 48 * 4;
  ASSERT_GT(targets, limit);
  std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", "--from", p, "-o", tmp / "disk.zip",
                                   "--iterations", "2", "--set", "reconstruct.batch_size=256",
                                   "--set", "reconstruct.threads=2", "--set", "output.previews=false"};
  const auto [status, peak] = tycho::test::run_with_data_limit(argv, limit, tmp / "disk.log");
  std::ifstream in(tmp / "disk.log");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(status, 0) << log;
  EXPECT_TRUE(contains(log, "targets: disk (target_residency = \"auto\"")) << log;
  EXPECT_TRUE(contains(log, "(the process's RLIMIT_DATA)")) << log;
  EXPECT_LT(peak, limit) << "peak RSS " << peak << " bytes";
  std::cout << "peak RSS under RLIMIT_DATA " << (limit >> 20) << " MiB: " << double(peak) / double(1 << 20)
            << " MiB, targets " << double(targets) / double(1 << 20) << " MiB\n";

  argv[5] = tmp / "memory.zip";
  argv.push_back("--set");
  argv.push_back("reconstruct.target_residency='device'");
  auto memory = run_command(argv);
  ASSERT_TRUE(memory.exited_with(0)) << memory.describe();
  expect_identical(tmp / "memory.zip", tmp / "disk.zip");
}

}  // namespace
