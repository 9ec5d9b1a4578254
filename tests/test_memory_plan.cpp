// The memory planner (core/include/tycho/core/memory_plan.hpp): every term by hand for small
// cases of each model, the remedies and their order, the batch shrinking; the `tycho plan`
// command's table and exit codes; and the cpu model against the peak RSS of a real run.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <tycho/core/error.hpp>
#include <tycho/core/memory_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "emd_test_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

using tycho::memory_model;
using tycho::memory_plan;
using tycho::memory_problem;
using tycho::plan_memory;
using tycho::test::run_command;

namespace {

// cpu: 12 patterns of 8 x 6 (M = 48), object 20 x 30 (O = 600), 3 threads, Adam on both.
memory_problem small_cpu() {
  memory_problem p;
  p.model = memory_model::cpu;
  p.patterns = 12;
  p.window[0] = 8;
  p.window[1] = 6;
  p.object_shape[0] = 20;
  p.object_shape[1] = 30;
  p.threads = 3;
  p.batch_size = 5;
  return p;
}

// cuda: 10 patterns of 8 x 8 (M = 64) stored as uint16, object 16 x 16 (O = 256), batch 6 on
// 2 devices (3 per device), Adam on the object, SGD on the probe, 1000 B reserve.
memory_problem small_cuda() {
  memory_problem p;
  p.model = memory_model::cuda;
  p.patterns = 10;
  p.window[0] = 8;
  p.window[1] = 8;
  p.target_bytes = 2;
  p.object_shape[0] = 16;
  p.object_shape[1] = 16;
  p.batch_size = 6;
  p.devices = 2;
  p.object_optimizer_arrays = 2;
  p.probe_optimizer_arrays = 1;
  p.reserve_bytes = 1000;
  return p;
}

TEST(MemoryPlan, CpuTermsByHand) {
  memory_plan plan = plan_memory(small_cpu(), 0);
  EXPECT_EQ(plan.term("targets").bytes, 12u * 48 * 4);                 // 2304
  EXPECT_EQ(plan.term("object").bytes, 600u * 8);                      // 4800
  EXPECT_EQ(plan.term("probe").bytes, 48u * 8);                        // 384
  EXPECT_EQ(plan.term("positions").bytes, 12u * 16);                   // 192
  EXPECT_EQ(plan.term("gradients").bytes, (600u + 48) * 8);            // 5184
  EXPECT_EQ(plan.term("optimizer state").bytes, (2u * 600 + 2 * 48) * 8);  // 10368
  // Per thread: 7 FFT buffers (4, the shift groups' A, B and A'), intensity + dL/dI, the
  // object-gradient copy, the probe-spectrum accumulator, the two ramps: 2688 + 384 + 4800 + 384
  // + 112 = 8368.
  EXPECT_EQ(plan.term("transients").bytes, 3u * 8368);                 // 25104
  EXPECT_EQ(plan.term("FFT workspace").bytes, 2u * 48 * 8);            // 768
  // The last finite iteration's object, probe and optimizer state, one copy.
  EXPECT_EQ(plan.term("kept state").bytes, (3u * 600 + 3 * 48) * 8);    // 15552
  EXPECT_EQ(plan.total, 64656u);
  EXPECT_EQ(plan.largest_term, "transients");
  EXPECT_FALSE(plan.fits);  // capacity unknown: nothing compared
  EXPECT_EQ(tycho::memory_total(small_cpu()), 64656u);
  // The batch does not change the cpu engine's memory (its scratch is per thread).
  memory_problem q = small_cpu();
  q.batch_size = 5000;
  EXPECT_EQ(tycho::memory_total(q), 64656u);
  // One slice, 3 modes (cpu_engine.cpp's thread_scratch): 4 buffers, the shift groups' A, B and A'
  // per mode (9), each mode's shifted probe and far field (6): 19 · 384 = 7296; intensity + dL/dI
  // 384, the object-gradient copy 4800, the probe-spectrum accumulator 3 · 384, the ramps 112.
  memory_problem modes = small_cpu();
  modes.probe_modes = 3;
  EXPECT_EQ(plan_memory(modes, 0).term("transients").bytes, 3u * (7296 + 384 + 4800 + 1152 + 112));
  // 2 slices, 2 modes: no shift groups (one slice only); 4 buffers and K·(S+1) = 6 waves: 10 · 384;
  // the object-gradient copy of both slices.
  memory_problem slices = small_cpu();
  slices.probe_modes = 2;
  slices.slices = 2;
  EXPECT_EQ(plan_memory(slices, 0).term("transients").bytes, 3u * (3840 + 384 + 2 * 4800 + 768 + 112));
}

TEST(MemoryPlan, CudaTermsByHand) {
  memory_plan plan = plan_memory(small_cuda(), 0);
  EXPECT_EQ(plan.term("targets").bytes, 5u * 64 * 2);         // ⌈10/2⌉ patterns of uint16: 640
  EXPECT_EQ(plan.term("object").bytes, 256u * 8);             // 2048
  EXPECT_EQ(plan.term("probe").bytes, 64u * 8);               // 512
  EXPECT_EQ(plan.term("positions").bytes, 160u);
  EXPECT_EQ(plan.term("gradients").bytes, (256u + 64) * 8);   // 2560
  EXPECT_EQ(plan.term("optimizer state").bytes, (2u * 256 + 1 * 64) * 8);  // 4608
  // 3 patterns per device, each 2 complex64 + 3 float32 buffers of 64 px, the ramps (8 + 8)·8,
  // 16 B of indices; once the probe spectrum and 8 partial sums, 9 · 64 · 8:
  // 3 · (64·28 + 128 + 16) + 4608 = 10416.
  EXPECT_EQ(plan.term("transients").bytes, 10416u);
  EXPECT_EQ(plan.term("FFT workspace").bytes, 3u * 64 * 8);   // one batch buffer: 1536
  EXPECT_EQ(plan.term("runtime reserve").bytes, 1000u);
  EXPECT_EQ(plan.total, 23480u);

  // 11 is not 2^a·3^b·5^c·7^d: cuFFT's Bluestein work area counts 4 times.
  memory_problem slow = small_cuda();
  slow.window[0] = 11;
  EXPECT_EQ(plan_memory(slow, 0).term("FFT workspace").bytes, 4u * 3 * 88 * 8);
  // Modes and slices: K·(S + 1) complex buffers per pattern, K·(1 + 8) probe-sized ones once.
  memory_problem multi = small_cuda();
  multi.probe_modes = 2;
  multi.slices = 3;
  EXPECT_EQ(plan_memory(multi, 0).term("transients").bytes, 3u * (64 * (2 * 4 * 8 + 3 * 4) + 128 + 16) + 2 * 9 * 64 * 8);
  // The batch never counts more patterns than a device holds.
  memory_problem few = small_cuda();
  few.batch_size = 100;
  EXPECT_EQ(plan_memory(few, 0).term("FFT workspace").bytes, 5u * 64 * 8);
  EXPECT_EQ(plan_memory(multi, 0).term("object").bytes, 3u * 256 * 8);
  EXPECT_EQ(plan_memory(multi, 0).term("probe").bytes, 2u * 64 * 8);
}

TEST(MemoryPlan, HostStagingHoldsEveryPattern) {
  memory_problem p = small_cuda();
  p.model = memory_model::host_staging;
  memory_plan plan = plan_memory(p, 0);
  EXPECT_EQ(plan.term("targets").bytes, 10u * 64 * 4);  // all patterns, float32
  // Targets, object, probe, positions and the kept state ((256 + 2·256 + 64 + 64) · 8): the host's
  // side of a device engine.
  EXPECT_EQ(plan.term("kept state").bytes, 896u * 8);
  EXPECT_EQ(plan.total, 2560u + 2048 + 512 + 160 + 7168);
  EXPECT_EQ(plan.terms.size(), 5u);
}

// Integer counts read as such (the source delivers its stored uint16): the cpu engine reads the
// host's uint16 targets, 2 bytes per pixel; a device engine's host staging stays float32.
TEST(MemoryPlan, CpuCountsReadAsSuchTakeTwoBytesPerPixel) {
  memory_problem p = small_cpu();
  EXPECT_EQ(plan_memory(p, 0).term("targets").bytes, 12u * 48 * 4);
  p.target_bytes = 2;
  const memory_plan plan = plan_memory(p, 0);
  EXPECT_EQ(plan.term("targets").bytes, 12u * 48 * 2);
  EXPECT_EQ(plan.term("targets").formula, "12 patterns · 8·6 px · 2 B (uint16 counts)");
}

TEST(MemoryPlan, FitsAtExactlyTheCapacity) {
  EXPECT_TRUE(plan_memory(small_cpu(), 64656).fits);
  memory_plan over = plan_memory(small_cpu(), 64655);
  EXPECT_FALSE(over.fits);
  EXPECT_FALSE(over.remedies.empty());
}

TEST(MemoryPlan, ShrinksTheBatchToTheLargestThatFits) {
  // Without the per-pattern terms the cuda case needs 16136 B; each pattern per device adds
  // 64·28 + 128 + 16 (transients) + 64·8 (FFT) = 2448 B. 21500 B hold 2 per device: batch 4.
  memory_plan plan = plan_memory(small_cuda(), 21500);
  EXPECT_TRUE(plan.fits);
  EXPECT_TRUE(plan.batch_shrunk);
  EXPECT_EQ(plan.requested_batch, 6);
  EXPECT_EQ(plan.problem.batch_size, 4);
  EXPECT_EQ(plan.batch_to_fit, 4);
  EXPECT_EQ(plan.total, 16136u + 2 * 2448);
  EXPECT_EQ(plan.requested_total, 23480u);
  EXPECT_TRUE(plan.remedies.empty());
  // 3 devices would keep the batch: ⌈10/3⌉ = 4 patterns (512 B) and 2 per device: 20904 B.
  EXPECT_EQ(plan.devices_to_fit, 3);
  std::string summary = tycho::memory_plan_summary(plan);
  EXPECT_NE(summary.find("fits with batch_size = 4 (shrunk from 6"), std::string::npos) << summary;
  // A batch that fits is left alone.
  memory_plan roomy = plan_memory(small_cuda(), 23480);
  EXPECT_TRUE(roomy.fits);
  EXPECT_FALSE(roomy.batch_shrunk);
  EXPECT_EQ(roomy.problem.batch_size, 6);
}

TEST(MemoryPlan, RemediesInOrder) {
  // 1000 patterns: targets dominate. Requested: 128000 (targets) + 26728 (object, probe,
  // positions, gradients, optimizer, reserve) + 8480 (transients of 2) + 1024 (FFT) = 164232 B.
  memory_problem p = small_cuda();
  p.patterns = 1000;
  p.batch_size = 2;
  p.devices = 1;
  ASSERT_EQ(tycho::memory_total(p), 164232u);
  memory_plan plan = plan_memory(p, 80000);
  ASSERT_FALSE(plan.fits);
  EXPECT_FALSE(plan.batch_shrunk);  // batch 1 still needs 161784
  EXPECT_EQ(plan.batch_to_fit, 0);
  EXPECT_EQ(plan.largest_term, "targets");
  // 2 devices: 500·128 + 26728 + 7056 = 97784 > 80000; 3: 334·128 + 26728 + 7056 = 76536.
  EXPECT_EQ(plan.devices_to_fit, 3);
  // Binning by 2: window 4 x 4, object 12 x 12: 56456 B.
  EXPECT_EQ(plan.binning_to_fit, 2);
  ASSERT_EQ(plan.remedies.size(), 4u);
  EXPECT_EQ(plan.remedies[0].rfind("more devices: 3 would fit", 0), 0u) << plan.remedies[0];
  EXPECT_NE(plan.remedies[1].find("host-resident targets"), std::string::npos) << plan.remedies[1];
  EXPECT_NE(plan.remedies[1].find("and then fit"), std::string::npos) << plan.remedies[1];
  EXPECT_NE(plan.remedies[1].find("not yet available"), std::string::npos) << plan.remedies[1];
  EXPECT_EQ(plan.remedies[2].rfind("binning the detector by 2 (window 4 x 4)", 0), 0u) << plan.remedies[2];
  EXPECT_EQ(plan.remedies[3].rfind("a smaller batch would not fit", 0), 0u) << plan.remedies[3];
  std::string summary = tycho::memory_plan_summary(plan);
  EXPECT_NE(summary.find("does not fit (largest term: targets"), std::string::npos) << summary;
  EXPECT_LT(summary.find("more devices"), summary.find("binning")) << summary;
}

TEST(MemoryPlan, CpuRemediesNameThreads) {
  // 57000 B: the replicated part (39552 + 3 threads · 8368) cannot shrink with more devices
  // (12 devices still need 62544); 2 threads fit (56288); binning by 2 fits.
  memory_plan plan = plan_memory(small_cpu(), 57000);
  ASSERT_FALSE(plan.fits);
  EXPECT_EQ(plan.largest_term, "transients");
  EXPECT_EQ(plan.devices_to_fit, 0);
  EXPECT_EQ(plan.threads_to_fit, 2);
  EXPECT_EQ(plan.binning_to_fit, 2);
  ASSERT_EQ(plan.remedies.size(), 4u);
  EXPECT_EQ(plan.remedies[0].rfind("more devices would not help", 0), 0u) << plan.remedies[0];
  EXPECT_EQ(plan.remedies[1].rfind("binning the detector by 2 (window 4 x 3)", 0), 0u) << plan.remedies[1];
  EXPECT_EQ(plan.remedies[2].rfind("fewer engine threads: [reconstruct] threads = 2", 0), 0u) << plan.remedies[2];
  // Targets per batch from disk: the batch's 5 patterns instead of 12 (the targets are small here).
  memory_problem streamed = small_cpu();
  streamed.targets_streamed = true;
  EXPECT_EQ(plan.remedies[3], "targets read per batch from a prepared file (target_residency = \"disk\"; tycho "
                              "preprocess --save-raw-data, then reconstruct --from it) need " +
                                  tycho::human_bytes(tycho::memory_total(streamed)) + ": not enough alone");
}

// target_residency = "disk" (ABI 1.3 targets_streamed): the engine holds one batch of targets,
// min(⌈B/W⌉, ⌈P/W⌉) patterns, the host staging two; a 1.2 problem (shorter struct) is not streamed.
TEST(MemoryPlan, StreamedTargetsHoldOneBatch) {
  memory_problem p = small_cpu();  // 12 patterns of 8 x 6, batch 5
  p.targets_streamed = true;
  EXPECT_EQ(plan_memory(p, 0).term("targets").bytes, 5u * 48 * 4);
  EXPECT_EQ(plan_memory(p, 0).term("targets").formula, "5 patterns (streamed per batch) · 8·6 px · 4 B");
  EXPECT_EQ(plan_memory(p, 0).term("read-ahead").bytes, 5u * 48 * 4);  // the host's next batch
  p.devices = 4;  // ⌈5/4⌉ = 2 per device
  EXPECT_EQ(plan_memory(p, 0).term("targets").bytes, 2u * 48 * 4);
  p.devices = 1;
  p.batch_size = 100;  // a batch larger than the scan holds the scan
  EXPECT_EQ(plan_memory(p, 0).term("targets").bytes, 12u * 48 * 4);
  p.batch_size = 5;
  p.model = memory_model::host_staging;
  EXPECT_EQ(plan_memory(p, 0).term("targets").bytes, 10u * 48 * 4);

  tycho_memory_problem a = to_abi(small_cpu());
  EXPECT_EQ(a.targets_streamed, 0);
  a.targets_streamed = 1;
  EXPECT_TRUE(from_abi(a, memory_model::cpu).targets_streamed);
  a.struct_size = uint32_t(offsetof(tycho_memory_problem, targets_streamed));  // a 1.2 host
  EXPECT_FALSE(from_abi(a, memory_model::cpu).targets_streamed);
  a.struct_size -= 8;
  EXPECT_THROW(from_abi(a, memory_model::cpu), tycho::error);
}

TEST(MemoryPlan, LargeScanTargetsExactly) {
  // A 512 x 512 scan of 96 x 96 patterns: 512·512·96·96·4 B of float32 targets on the cpu,
  // half of that on a device that kept uint16 counts.
  memory_problem p;
  p.patterns = 512 * 512;
  p.window[0] = p.window[1] = 96;
  p.object_shape[0] = p.object_shape[1] = 2200;
  p.threads = 16;
  memory_plan cpu = plan_memory(p, uint64_t(64) << 30);
  EXPECT_EQ(cpu.term("targets").bytes, 512ull * 512 * 96 * 96 * 4);
  EXPECT_EQ(cpu.term("targets").bytes, 9663676416ull);
  EXPECT_TRUE(cpu.fits);
  p.model = memory_model::cuda;
  p.target_bytes = 2;
  p.batch_size = 1024;
  memory_plan cuda = plan_memory(p, uint64_t(4) << 30);  // a 4 GiB device
  EXPECT_EQ(cuda.term("targets").bytes, 512ull * 512 * 96 * 96 * 2);
  EXPECT_FALSE(cuda.fits);
  EXPECT_EQ(cuda.largest_term, "targets");
  EXPECT_GT(cuda.devices_to_fit, 1);
  std::string table = tycho::memory_plan_table(cuda);
  EXPECT_NE(table.find("targets"), std::string::npos) << table;
  EXPECT_NE(table.find("4831838208"), std::string::npos) << table;
  EXPECT_NE(table.find("4.50 GiB"), std::string::npos) << table;
}

TEST(MemoryPlan, HumanBytesAndBadInput) {
  EXPECT_EQ(tycho::human_bytes(512), "512 B");
  EXPECT_EQ(tycho::human_bytes(1536), "1.50 KiB");
  EXPECT_EQ(tycho::human_bytes(uint64_t(3) << 30), "3.00 GiB");
  memory_problem p = small_cpu();
  p.window[0] = 0;
  EXPECT_THROW(plan_memory(p, 0), tycho::error);
}

// ---- the `tycho plan` command

std::string example_config() { return tycho::test::source_dir() + "/examples/mos2.toml"; }

// The integer in the bytes column of the table row `name`, or 0.
uint64_t row_bytes(const std::string& out, const std::string& name) {
  std::istringstream is(out);
  for (std::string line; std::getline(is, line);)
    if (line.rfind(name + " ", 0) == 0) {
      std::istringstream ls(line.substr(name.size()));
      uint64_t v = 0;
      ls >> v;
      return v;
    }
  return 0;
}

TEST(PlanCommand, MoS2FitsTheCpu) {
  auto r = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--set", "reconstruct.threads=2"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  for (const char* s : {"targets", "object", "optimizer state", "transients", "FFT workspace", "total", "fits",
                        "cpu model, 2 threads", "32 x 24 (768 patterns)"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.describe();
  // The example's counts, read as the stored uint16 and kept so (integer_targets): 2 bytes each.
  EXPECT_EQ(row_bytes(r.out, "targets"), 768ull * 96 * 96 * 2) << r.out;
  auto f = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--no-time", "--set",
                        "preprocess.integer_targets=false"});
  ASSERT_TRUE(f.exited_with(0)) << f.describe();
  EXPECT_EQ(row_bytes(f.out, "targets"), 768ull * 96 * 96 * 4) << f.out;
  // The data are not read: the plan takes well under the time a reconstruction's set-up does.
  EXPECT_EQ(r.err.find("tycho: error"), std::string::npos) << r.err;
}

// The scan geometry search's trials, which "auto" runs before the run where the preprocessing
// does not measure the geometry: their count ((360 / 20) x 2 transposes + 63) and time, or that
// "auto" would not run them on a scan this large; nothing where the rotation is stated.
TEST(PlanCommand, SaysWhatTheGeometrySearchWouldCost) {
  auto r = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--set", "reconstruct.threads=2"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.out.find("search   [preprocess] scan_geometry_search = \"auto\": where neither the parallax nor the "
                       "curl measures"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("89 trial reconstructions of 200 iterations ~"), std::string::npos) << r.out;
  auto big = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--no-time", "--set",
                          "preprocess.scan_geometry_search_iterations=1000", "--set",
                          "preprocess.scan_rotation_deg=\"auto\"", "--set", "preprocess.scan_transpose=false"});
  ASSERT_TRUE(big.exited_with(0)) << big.describe();
  // 71 trials x 1000 iterations x 768 patterns x 96² pixels: 3.3 times the bound.
  EXPECT_NE(big.out.find("not run on this scan (71 trial reconstructions of 1000 iterations would be 3.3 times"),
            std::string::npos)
      << big.out;
  auto always = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--no-time", "--set",
                             "preprocess.scan_geometry_search=true", "--set", "preprocess.scan_geometry_search_step_deg=45"});
  ASSERT_TRUE(always.exited_with(0)) << always.describe();
  EXPECT_NE(always.out.find("scan_geometry_search = true: 69 trial reconstructions of 200 iterations before the run"),
            std::string::npos)
      << always.out;
  auto stated = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--no-time", "--set",
                             "preprocess.scan_rotation_deg=0"});
  ASSERT_TRUE(stated.exited_with(0)) << stated.describe();
  EXPECT_EQ(stated.out.find("scan_geometry_search"), std::string::npos) << stated.out;
}

TEST(PlanCommand, TooLittleMemoryNamesTheTermAndTheRemedies) {
  auto r = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--device-memory", "0.0018", "--set",
                        "reconstruct.threads=2"});
  ASSERT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_NE(r.out.find("does not fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest term: targets"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("more devices"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("binning the detector by"), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("more devices"), r.out.find("binning the detector")) << r.out;
  // By a factor [preprocess] binning accepts (a divisor of 96).
  EXPECT_NE(r.out.find("binning the detector by 8 (window 12 x 12) would fit"), std::string::npos) << r.out;
  // With deterministic sums their 16 B per object pixel count too: a coarser binning.
  auto sums = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--device-memory", "0.0018", "--set",
                           "reconstruct.threads=2", "--set", "reconstruct.deterministic=true"});
  ASSERT_TRUE(sums.exited_with(2)) << sums.describe();
  EXPECT_NE(sums.out.find("binning the detector by 12 (window 8 x 8) would fit"), std::string::npos) << sums.out;
  auto binned = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--set", "preprocess.binning=12"});
  EXPECT_TRUE(binned.exited_with(0)) << binned.describe();
}

TEST(PlanCommand, CudaModelWithGivenDeviceMemory) {
  auto r = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--set", "reconstruct.engine=\"cuda\"",
                        "--device-memory", "141"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.out.find("cuda model"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fits"), std::string::npos) << r.out;
  // uint16 targets, as the cuda engine keeps counts (integer_targets); 128 patterns of the batch
  // on one device.
  const uint64_t m = 96 * 96, once = 9 * m * 8;
  EXPECT_EQ(row_bytes(r.out, "targets"), 768ull * m * 2) << r.out;
  EXPECT_EQ(row_bytes(r.out, "transients"), 128ull * (m * 28 + 192 * 8 + 16) + once) << r.out;
  EXPECT_EQ(row_bytes(r.out, "FFT workspace"), 128ull * 96 * 96 * 8) << r.out;
  // Two devices halve the shards.
  auto two = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--set", "reconstruct.engine=\"cuda\"",
                          "--device-memory", "141", "--devices", "2"});
  ASSERT_TRUE(two.exited_with(0)) << two.describe();
  EXPECT_EQ(row_bytes(two.out, "targets"), 384ull * m * 2) << two.out;
  EXPECT_EQ(row_bytes(two.out, "transients"), 64ull * (m * 28 + 192 * 8 + 16) + once) << two.out;
}

TEST(PlanCommand, ShrinksTheBatchOnASmallDevice) {
  // 0.7 GiB: the fixed part (with the 512 MiB reserve) fits, a batch of all 768 patterns does not.
  auto r = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--set", "reconstruct.engine=\"cuda\"",
                        "--set", "reconstruct.batch_size=4096", "--device-memory", "0.7"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.out.find("fits with batch_size = "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shrunk from 4096"), std::string::npos) << r.out;
}

TEST(PlanCommand, BadConfigIsAnError) {
  auto r = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--set", "reconstruct.engine=\"cpux\""});
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_NE(r.err.find("unknown engine 'cpux'"), std::string::npos) << r.err;
}

// A 512 x 512 scan of 96 x 96 patterns from the simulate source (nothing is simulated: plan
// only opens the source), planned without allocating any of it.
TEST(PlanCommand, LargeSimulatedScan) {
  auto plugins = run_command({tycho::test::tycho_exe(), "plugins"});
  if (plugins.out.find("source     simulate") == std::string::npos) GTEST_SKIP() << "no simulate source";
  tycho::test::temp_folder tmp;
  const std::string config = tmp.write("large.toml",
                                       "[data]\nsource = \"simulate\"\nscan_shape = [512, 512]\n"
                                       "detector_shape = [96, 96]\n\n[reconstruct]\nengine = \"cpu\"\n");
  auto r = run_command({tycho::test::tycho_exe(), "plan", config, "--device-memory", "64", "--set",
                        "reconstruct.threads=4"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(row_bytes(r.out, "targets"), 512ull * 512 * 96 * 96 * 4) << r.out;
  EXPECT_EQ(row_bytes(r.out, "positions"), 512ull * 512 * 16) << r.out;
  EXPECT_NE(r.out.find("9.00 GiB"), std::string::npos) << r.out;
  std::printf("%s", r.out.c_str());
  // On a 16 GiB device the float32 targets alone take 9 GiB with the batch: 2 devices fit.
  auto cuda = run_command({tycho::test::tycho_exe(), "plan", config, "--device-memory", "8", "--set",
                           "reconstruct.engine=\"cuda\""});
  ASSERT_TRUE(cuda.exited_with(2)) << cuda.describe();
  EXPECT_NE(cuda.out.find("largest term: targets"), std::string::npos) << cuda.out;
  EXPECT_NE(cuda.out.find("1. more devices: 2 would fit"), std::string::npos) << cuda.out;
  EXPECT_NE(cuda.out.find("2. host-resident targets"), std::string::npos) << cuda.out;
  EXPECT_NE(cuda.out.find("3. binning the detector by 2"), std::string::npos) << cuda.out;
  EXPECT_NE(cuda.out.find("4. a smaller batch would not fit"), std::string::npos) << cuda.out;
}

// The session refuses, before the engine exists, a run the cpu plan cannot fit in this
// machine's memory (here: a scan step that makes a 10^12-pixel object), with the plan's message.
TEST(PlanCommand, SessionRefusesARunThatCannotFit) {
  tycho::test::temp_folder tmp;
  auto r = run_command({tycho::test::tycho_exe(), "reconstruct", example_config(), "--iterations", "1", "-o",
                        tmp / "result.zip", "--set", "data.scan_step_A=20000"});
  ASSERT_TRUE(r.exited_with(2)) << r.describe();
  for (const char* s : {"tycho: error: the cpu plan needs", "does not fit (largest term: ", "remedies, in order: 1) ",
                        "more devices", "check [data] scan_step_A (20000 Å)", "object_padding_px"})
    EXPECT_NE(r.err.find(s), std::string::npos) << s << "\n" << r.describe();
  EXPECT_TRUE(tmp.entries().empty()) << r.describe();
}

// A third-party engine (tests/plugins/planned_engine_plugin.cpp) that the host knows only by
// what it reports: `tycho plan` prints its terms as reported, passes it the optimizers' state
// arrays (SGD 1, Adam 2: 3·1000 B), and shrinks the batch with it because it says its terms
// grow with the batch. Figures: M = 96·96 = 9216, P = 768; targets 768·M·4 = 28311552 B,
// batch buffers b·M·8, so 0.03 GiB (32212254 B) leaves room for b = 52.
TEST(PlanCommand, ThirdPartyEngineReportsItsTerms) {
  const std::vector<std::string> env = {std::string("TYCHO_PLUGIN_PATH=") + TYCHO_TEST_PLUGIN_DIR};
  const std::vector<std::string> base = {tycho::test::tycho_exe(), "plan", example_config(), "--set",
                                         "reconstruct.engine=\"thirdparty_planned\"", "--set",
                                         "reconstruct.object.optimizer=\"sgd\""};
  auto args = base;
  args.insert(args.end(), {"--device-memory", "141"});
  auto r = run_command(args, env);
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.out.find("engine   thirdparty_planned (thirdparty_planned model, 1 device(s), batch 128 global)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(row_bytes(r.out, "targets"), 768ull * 9216 * 4) << r.out;
  EXPECT_EQ(row_bytes(r.out, "batch buffers"), 128ull * 9216 * 8) << r.out;
  EXPECT_EQ(row_bytes(r.out, "optimizer state"), 3000ull) << r.out;
  EXPECT_EQ(row_bytes(r.out, "total"), 768ull * 9216 * 4 + 128ull * 9216 * 8 + 3000) << r.out;
  EXPECT_NE(r.out.find("fits: "), std::string::npos) << r.out;

  args = base;
  args.insert(args.end(), {"--device-memory", "0.03"});
  auto small = run_command(args, env);
  ASSERT_TRUE(small.exited_with(0)) << small.describe();
  EXPECT_NE(small.out.find("fits with batch_size = 52, shrunk from 128"), std::string::npos) << small.out;
  EXPECT_EQ(row_bytes(small.out, "batch buffers"), 52ull * 9216 * 8) << small.out;
}

// ---- the cpu model against reality

// Peak RSS in KiB of a command, from GNU time's %M (the child's ru_maxrss), or -1.
long peak_rss_kib(const std::vector<std::string>& argv, std::string* log) {
  std::vector<std::string> cmd = {"/usr/bin/time", "-f", "TYCHO_MAXRSS_KIB=%M"};
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  auto r = run_command(cmd);
  *log += r.describe() + "\n";
  if (!r.exited_with(0)) return -1;
  auto at = r.err.rfind("TYCHO_MAXRSS_KIB=");
  if (at == std::string::npos) return -1;
  return std::atol(r.err.c_str() + at + 17);
}

// The first 4 x 4 scan positions of the MoS2 counts (uint16, 96 x 96) as a small EMD file in
// emdfile's layout, without calibrations (given with --set).
void write_small_mos2(const std::string& path) {
  const std::string src = tycho::test::example_data("mos2_80kV_32x24_counts.h5");
  const char* array = "/datacube_root/datacube/data";
  hsize_t start[4] = {0, 0, 0, 0}, count[4] = {4, 4, 96, 96};
  std::vector<uint16_t> values(4 * 4 * 96 * 96);
  hid_t in = H5Fopen(src.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(in, 0) << src;
  hid_t d = H5Dopen2(in, array, H5P_DEFAULT);
  hid_t fspace = H5Dget_space(d);
  H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr);
  hid_t mspace = H5Screate_simple(4, count, nullptr);
  ASSERT_GE(H5Dread(d, H5T_NATIVE_UINT16, mspace, fspace, H5P_DEFAULT, values.data()), 0);
  H5Sclose(mspace);
  H5Sclose(fspace);
  H5Dclose(d);
  H5Fclose(in);

  std::string why;
  ASSERT_TRUE(tycho::test::write_emd_file(path, {{count, count + 4}, tycho::test::emd_element::uint16, values.data()},
                                          &why))
      << why;
}

// What a config's run measures and the planner predicts.
struct rss_case {
  double planned = 0;  // the plan's total, bytes
  long peak_kib = -1;  // the smallest peak RSS of the runs
};

rss_case measure(const std::vector<std::string>& args, const std::string& out_zip, std::string* log) {
  rss_case c;
  std::vector<std::string> plan = {tycho::test::tycho_exe(), "plan"};
  plan.insert(plan.end(), args.begin(), args.end());
  auto p = run_command(plan);
  *log += p.describe() + "\n";
  if (!p.exited_with(0)) return c;
  c.planned = double(row_bytes(p.out, "total"));
  std::vector<std::string> run = {tycho::test::tycho_exe(), "reconstruct"};
  run.insert(run.end(), args.begin(), args.end());
  // --overwrite: the three runs below write the same file.
  for (const char* a : {"--iterations", "1", "-q", "--overwrite", "-o"}) run.push_back(a);
  run.push_back(out_zip);
  // The smallest of three runs: page-cache and allocator noise only ever add.
  for (int i = 0; i < 3; ++i) {
    long k = peak_rss_kib(run, log);
    if (k < 0) return rss_case{};
    c.peak_kib = c.peak_kib < 0 ? k : std::min(c.peak_kib, k);
  }
  return c;
}

// The cpu model against the peak RSS (ru_maxrss) of `tycho reconstruct --iterations 1`.
// Two measurements:
//  * absolute: MoS2's peak RSS minus that of `tycho plugins` (the runtime with every plugin
//    loaded, nothing run). This also holds what the plan does not model and does not scale:
//    the code pages of FFTW, HDF5, libzip touched by a run, HDF5's free lists and chunk cache,
//    zlib's deflate state, the result's copies while saving, the OpenMP thread's stack. It is
//    measured below as the excess of a 4 x 4 scan of the same data over its own plan (about
//    9 MiB on Debian 12 x86-64), so the absolute growth is only checked to exceed the plan.
//  * differential: MoS2 minus the 4 x 4 scan, the same code paths, threads and FFT plans: every
//    fixed overhead cancels, and what is left is what the plan models (targets, object, its
//    gradient, optimizer state, the per-thread object copies). That must agree within 10 %.
TEST(PlanCommand, CpuPlanMatchesThePeakRssOfARun) {
  if (access("/usr/bin/time", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/time";
  tycho::test::temp_folder tmp;
  const std::string small = tmp / "small.h5";
  write_small_mos2(small);
  // The stated step: the lattice's measurement in the preprocessing (its block, up to 32 MiB, on
  // the 32 x 24 scan and not on the 4 x 4 one) is outside the engine's plan (documented).
  const std::vector<std::string> common = {"--set", "reconstruct.threads=2", "--set", "output.previews=false",
                                           "--set", "preprocess.scan_scale=\"stated\""};
  std::vector<std::string> big_args = {example_config()}, small_args = {example_config(), "--set",
      "data.path=" + small, "--set", "data.scan_step_A=0.5", "--set", "data.detector_pixel_invA=0.06"};
  big_args.insert(big_args.end(), common.begin(), common.end());
  small_args.insert(small_args.end(), common.begin(), common.end());

  std::string log;
  long base = -1;
  for (int i = 0; i < 3; ++i) {
    long b = peak_rss_kib({tycho::test::tycho_exe(), "plugins"}, &log);
    ASSERT_GT(b, 0) << log;
    base = base < 0 ? b : std::min(base, b);
  }
  rss_case big = measure(big_args, tmp / "big.zip", &log);
  rss_case little = measure(small_args, tmp / "small.zip", &log);
  ASSERT_GT(big.planned, 0) << log;
  ASSERT_GT(little.planned, 0) << log;
  ASSERT_GT(big.peak_kib, 0) << log;
  ASSERT_GT(little.peak_kib, 0) << log;

  const double big_growth = double(big.peak_kib - base) * 1024.0;
  const double little_growth = double(little.peak_kib - base) * 1024.0;
  const double fixed = little_growth - little.planned;  // the unmodelled, non-scaling overhead
  const double measured_delta = double(big.peak_kib - little.peak_kib) * 1024.0;
  const double planned_delta = big.planned - little.planned;
  std::printf("memory plan, MoS2 cpu: planned %.0f B; peak RSS growth over `tycho plugins` (%ld KiB) %.0f B, "
              "ratio %.3f\n", big.planned, base, big_growth, big_growth / big.planned);
  std::printf("memory plan, 4 x 4 scan: planned %.0f B; growth %.0f B; fixed overhead %.0f B\n", little.planned,
              little_growth, fixed);
  std::printf("memory plan, MoS2 minus 4 x 4: planned %.0f B, measured %.0f B, ratio %.3f\n", planned_delta,
              measured_delta, measured_delta / planned_delta);
  EXPECT_NEAR(measured_delta / planned_delta, 1.0, 0.10) << log;
  // The absolute growth is the plan plus the fixed overhead the small run shows.
  EXPECT_GE(big_growth, big.planned) << "the plan counts more than a run allocates";
}

}  // namespace
