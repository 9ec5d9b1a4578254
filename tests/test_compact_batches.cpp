// Compact batches ([reconstruct] batching, tycho/core/batch_plan.hpp) and the object stepped
// only in the tiles under each batch's windows (tycho/core/object_tiles.hpp, the ABI's boxes):
// the blocks, the tiles' boxes and step counts, Adam on boxes against Adam on the whole array,
// and runs on one and three ranks, resumed, against their references.
#include <gtest/gtest.h>

#include <tycho/core/batch_plan.hpp>
#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>
#include <tycho/core/geometry.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/core/object_tiles.hpp>
#include <tycho/host/parallel.hpp>
#include <tycho/host/session.hpp>
#include <tycho/sdk.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>

#include "array_difference.hpp"
#include "built_in_plugins.hpp"
#include "npy_file.hpp"
#include "test_paths.hpp"
#include "zip_members.hpp"

namespace {

using tycho::test::plugins;

// The shipped example's batches are today's: each iteration's permutation, cut in order.
TEST(BatchPlan, RandomBatchesAreTheIterationsPermutationCutInOrder) {
  tycho::batch_plan plan(768, 128, 5, tycho::batching::random);
  ASSERT_EQ(plan.batches(), 6);
  for (int64_t epoch : {1, 2, 7}) {
    const auto order = tycho::epoch_permutation(768, 5, epoch);
    for (int64_t k = 0; k < 6; ++k) {
      int64_t count = 0;
      const int64_t* b = plan.batch(epoch, k, count);
      ASSERT_EQ(count, 128);
      EXPECT_TRUE(std::equal(b, b + count, order.begin() + k * 128)) << "epoch " << epoch << ", batch " << k;
    }
  }
  // Where the batch size does not divide the patterns, batches of as equal a size as can be: 518
  // in batches of at most 128 are 5 of 103 or 104 (not four of 128 and one of 6), in order.
  tycho::batch_plan uneven(518, 128, 5, tycho::batching::random);
  ASSERT_EQ(uneven.batches(), 5);
  const auto order = tycho::epoch_permutation(518, 5, 3);
  int64_t at = 0;
  for (int64_t k = 0; k < 5; ++k) {
    int64_t count = 0;
    const int64_t* b = uneven.batch(3, k, count);
    EXPECT_TRUE(count == 103 || count == 104) << count;
    EXPECT_TRUE(std::equal(b, b + count, order.begin() + at)) << "batch " << k;
    at += count;
  }
  EXPECT_EQ(at, 518);
}

// A raster of 40 x 30 positions (4 px apart) in blocks of 64: every pattern once per iteration,
// each block a compact patch (its positions' bounding box at most 16 x 16 scan steps, where 64
// positions scattered at random span the scan), the blocks fixed and their order drawn anew.
TEST(BatchPlan, CompactBlocksArePatchesVisitedInASeededOrder) {
  const int64_t rx = 40, ry = 30, p = rx * ry;
  std::vector<double> positions;
  for (int64_t i = 0; i < rx; ++i)
    for (int64_t j = 0; j < ry; ++j) positions.insert(positions.end(), {60.0 + 4.0 * double(i), 60.0 + 4.0 * double(j)});
  tycho::batch_plan plan(p, 64, 3, tycho::batching::compact, positions);
  ASSERT_EQ(plan.batches(), (p + 63) / 64);
  std::vector<std::set<int64_t>> blocks_of_epoch1;
  std::vector<int64_t> first_of[2];
  for (int64_t epoch : {1, 2}) {
    std::vector<int> seen(std::size_t(p), 0);
    for (int64_t k = 0; k < plan.batches(); ++k) {
      int64_t count = 0;
      const int64_t* b = plan.batch(epoch, k, count);
      // 1200 patterns in 19 blocks: 63 or 64 each.
      EXPECT_TRUE(count == p / plan.batches() || count == p / plan.batches() + 1) << count;
      int64_t lo[2] = {rx, ry}, hi[2] = {0, 0};
      for (int64_t i = 0; i < count; ++i) {
        ++seen[std::size_t(b[i])];
        lo[0] = std::min(lo[0], b[i] / ry), hi[0] = std::max(hi[0], b[i] / ry);
        lo[1] = std::min(lo[1], b[i] % ry), hi[1] = std::max(hi[1], b[i] % ry);
      }
      EXPECT_LE((hi[0] - lo[0] + 1) * (hi[1] - lo[1] + 1), 16 * 16) << "block " << k << " of iteration " << epoch;
      if (epoch == 1) blocks_of_epoch1.emplace_back(b, b + count);
      first_of[epoch - 1].push_back(b[0]);
      if (epoch == 2)  // the same blocks, in another order
        EXPECT_TRUE(std::find(blocks_of_epoch1.begin(), blocks_of_epoch1.end(), std::set<int64_t>(b, b + count)) !=
                    blocks_of_epoch1.end());
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), p) << "iteration " << epoch;
  }
  EXPECT_NE(first_of[0], first_of[1]);
  EXPECT_THROW(tycho::batch_plan(p, 64, 3, tycho::batching::compact, {}), tycho::error);
}

// The tiles under windows, as boxes: runs of marked tiles along each tile row with one step count,
// the plane's edge clipping the last tiles; counting a step raises exactly the marked tiles'.
// [reconstruct] validation_fraction and validation_fold: the folds of one seed are disjoint blocks
// of n = round(f P) patterns of a seeded permutation (k-fold cross-validation); another seed draws
// others; f = 0 holds none out; values out of range are refused naming the key.
TEST(BatchPlan, HeldOutFoldsAreDisjointBlocksOfASeededPermutation) {
  const std::string key = "[reconstruct] validation_fraction";
  std::set<int64_t> seen;
  for (int64_t fold = 0; fold < 4; ++fold) {
    const std::vector<int64_t> out = tycho::held_out_patterns(101, 0.25, 7, fold, key);
    ASSERT_EQ(out.size(), 25u);
    EXPECT_TRUE(std::is_sorted(out.begin(), out.end()));
    for (int64_t j : out) {
      EXPECT_TRUE(j >= 0 && j < 101) << j;
      EXPECT_TRUE(seen.insert(j).second) << "pattern " << j << " in two folds";
    }
  }
  EXPECT_EQ(seen.size(), 100u);  // one pattern of 101 is in no fold
  EXPECT_EQ(tycho::held_out_patterns(101, 0.25, 7, 0, key), tycho::held_out_patterns(101, 0.25, 7, 0, key));
  EXPECT_NE(tycho::held_out_patterns(101, 0.25, 7, 0, key), tycho::held_out_patterns(101, 0.25, 8, 0, key));
  EXPECT_TRUE(tycho::held_out_patterns(101, 0.0, 7, 0, key).empty());
  EXPECT_TRUE(tycho::held_out_patterns(101, 0.001, 7, 0, key).empty());  // rounds to none
  for (double bad : {-0.1, 0.6, std::nan("")}) {
    try {
      tycho::held_out_patterns(101, bad, 7, 0, key);
      ADD_FAILURE() << bad << " accepted";
    } catch (const tycho::error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  try {
    tycho::held_out_patterns(101, 0.25, 7, 4, key);
    ADD_FAILURE() << "fold 4 of 4 accepted";
  } catch (const tycho::error& e) {
    EXPECT_NE(std::string(e.what()).find("validation_fold' must be from 0 to 3"), std::string::npos) << e.what();
  }
}

TEST(ObjectTiles, BoxesAreTheMarkedTilesWithTheirStepCounts) {
  tycho::object_tiles tiles(70, 50, 16);  // 5 x 4 tiles, the last row 6 px, the last column 2 px
  ASSERT_EQ(tiles.rows(), 5);
  ASSERT_EQ(tiles.cols(), 4);
  std::vector<int64_t> boxes, steps;
  tiles.mark_window(20.0, 20.0, 8, 8);  // rows 16..23, cols 16..23: tile (1, 1)
  tiles.take_boxes(true, boxes, steps);
  EXPECT_EQ(boxes, (std::vector<int64_t>{16, 32, 16, 32}));
  EXPECT_EQ(steps, (std::vector<int64_t>{1}));
  tiles.mark_window(20.5, 40.0, 8, 20);  // rows 16..23, cols 30..49: tiles (1, 1..3)
  tiles.mark_window(66.0, 3.0, 6, 6);    // rows 63..68, cols 0..5: tiles (3, 0), (4, 0)
  tiles.take_boxes(true, boxes, steps);
  EXPECT_EQ(boxes, (std::vector<int64_t>{16, 32, 16, 32, 16, 32, 32, 50, 48, 64, 0, 16, 64, 70, 0, 16}));
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 1, 1, 1}));
  tiles.mark_window(20.0, 30.0, 4, 24);  // tiles (1, 1..2), not counted
  tiles.take_boxes(false, boxes, steps);
  EXPECT_EQ(boxes, (std::vector<int64_t>{16, 32, 16, 32, 16, 32, 32, 48}));
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 1}));
  std::vector<int64_t> want(20, 0);
  want[5] = 2, want[6] = want[7] = want[12] = want[16] = 1;
  EXPECT_EQ(tiles.steps(), want);
  EXPECT_THROW(tiles.set_steps(std::vector<int64_t>(19, 0)), tycho::error);
}

// Adam on boxes: inside them each box's elements take the step of its own count, bit for bit the
// whole-array step of that number; outside, values and moments stay. Complex64, two planes.
TEST(OptimizerBoxes, AdamOnBoxesIsTheWholeArrayStepInsideThemAndNothingOutside) {
  const auto* vt = plugins().find(TYCHO_COMPONENT_OPTIMIZER, "adam").as<tycho_optimizer_vtable>();
  ASSERT_TRUE(vt->flags & TYCHO_OPTIMIZER_TAKES_BOXES);
  auto doc = tycho::config_document::parse("[reconstruct.object]\nlearning_rate = 0.01\n", "<test>", "");
  tycho_config cfg{&doc.table_at("reconstruct.object"), "[reconstruct.object]", ""};
  const int64_t planes = 2, h = 9, w = 11, n = planes * h * w;
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.f, 1.f);
  const std::size_t size = std::size_t(n);
  std::vector<std::complex<float>> start(size), grad1(size), grad2(size);
  for (int64_t k = 0; k < n; ++k) {
    start[std::size_t(k)] = {1.f + 0.1f * g(rng), 0.1f * g(rng)};
    grad1[std::size_t(k)] = {g(rng), g(rng)};
    grad2[std::size_t(k)] = {g(rng), g(rng)};
  }
  auto make = [&](std::vector<std::complex<float>>& values) {
    tycho_optimizer* opt = nullptr;
    tycho::sdk::tensor_view v{values.data(), tycho::sdk::dtype_complex64, {planes, h, w}};
    EXPECT_EQ(vt->create(&cfg, v.get(), &opt), TYCHO_OK) << tycho::last_error();
    return opt;
  };
  auto step = [&](tycho_optimizer* opt, std::vector<std::complex<float>>& values, std::vector<std::complex<float>>& gr,
                  const std::vector<int64_t>& boxes, const std::vector<int64_t>& counts, int64_t it) {
    tycho::sdk::tensor_view pv{values.data(), tycho::sdk::dtype_complex64, {planes, h, w}};
    tycho::sdk::tensor_view gv{gr.data(), tycho::sdk::dtype_complex64, {planes, h, w}};
    tycho_step_info info{sizeof(tycho_step_info), 0.25, 0.7, it, int64_t(boxes.size() / 4),
                         boxes.empty() ? nullptr : boxes.data(), counts.empty() ? nullptr : counts.data()};
    EXPECT_EQ(vt->step(opt, pv.get(), gv.get(), &info, nullptr), TYCHO_OK) << tycho::last_error();
  };
  // Reference: two whole-array steps (counts 1 and 2).
  auto whole = start;
  tycho_optimizer* a = make(whole);
  step(a, whole, grad1, {}, {}, 1);
  auto after_one = whole;
  step(a, whole, grad2, {}, {}, 2);
  // Boxes: box A (rows 1..4, cols 2..6) takes both steps; box B (rows 6..8, cols 0..10) the second
  // only, as its first (count 1).
  auto boxed = start;
  tycho_optimizer* b = make(boxed);
  step(b, boxed, grad1, {1, 5, 2, 7}, {1}, 1);
  step(b, boxed, grad2, {1, 5, 2, 7, 6, 9, 0, 11}, {2, 1}, 2);
  // Box B's reference: one whole-array step with grad2 from the start.
  auto once = start;
  tycho_optimizer* c = make(once);
  step(c, once, grad2, {}, {}, 1);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t r = 0; r < h; ++r)
      for (int64_t q = 0; q < w; ++q) {
        const std::size_t k = std::size_t((p * h + r) * w + q);
        const bool in_a = r >= 1 && r < 5 && q >= 2 && q < 7, in_b = r >= 6 && r < 9;
        const auto want = in_a ? whole[k] : in_b ? once[k] : start[k];
        ASSERT_EQ(boxed[k], want) << "plane " << p << ", element " << r << ", " << q;
      }
  EXPECT_NE(after_one, whole);
  // A box outside the array, or a count of 0, is refused.
  tycho::sdk::tensor_view pv{boxed.data(), tycho::sdk::dtype_complex64, {planes, h, w}};
  const std::vector<int64_t> outside = {0, 10, 0, 2}, one = {1}, zero = {0}, inside = {0, 2, 0, 2};
  tycho_step_info bad{sizeof(tycho_step_info), 1.0, 1.0, 3, 1, outside.data(), one.data()};
  EXPECT_EQ(vt->step(b, pv.get(), pv.get(), &bad, nullptr), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("outside the 9 x 11 plane"), std::string::npos) << tycho::last_error();
  tycho_step_info uncounted{sizeof(tycho_step_info), 1.0, 1.0, 3, 1, inside.data(), zero.data()};
  EXPECT_EQ(vt->step(b, pv.get(), pv.get(), &uncounted, nullptr), TYCHO_ERR_INVALID_ARGUMENT);
  // Nor a count past 2^53, the bound of a restored state (2^63 - 1 overflowed Adam's step).
  const std::vector<int64_t> huge = {INT64_MAX};
  tycho_step_info overflowing{sizeof(tycho_step_info), 1.0, 1.0, 3, 1, inside.data(), huge.data()};
  EXPECT_EQ(vt->step(b, pv.get(), pv.get(), &overflowing, nullptr), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("(outside [1, 2^53])"), std::string::npos) << tycho::last_error();
  for (tycho_optimizer* o : {a, b, c}) vt->destroy(o);
}

tycho::config_document compact_mos2(int iterations) {
  auto doc = tycho::config_document::load_file(tycho::test::source_dir() + "/examples/mos2.toml");
  doc.set_from_text("reconstruct.iterations=" + std::to_string(iterations));
  doc.set_from_text("reconstruct.threads=1");
  doc.set_from_text("reconstruct.batching=\"compact\"");
  doc.set_from_text("reconstruct.batch_size=48");  // 16 blocks of the 32 x 24 scan
  doc.set_from_text("reconstruct.amplitude_epsilon=1e-2");
  doc.set_from_text("reconstruct.object.amplitude_max=1.0");  // a constraint on the boxes too
  // The object's tiles are what is compared: the positions held (the default corrects them from
  // iteration 1, whose steps carry the ranks' float sums into the positions).
  doc.set_from_text("reconstruct.positions.correct=false");
  doc.set_from_text("output.previews=false");
  return doc;
}

// On the example's data with compact batches: the run steps tiles (the manifest and the saved
// tile counts say so, every tile under a window stepped), three ranks as threads follow one
// rank's trajectory (the W-invariance tolerance of the guarded example), and a run stopped after
// 2 iterations and resumed for 2 more gives the 4-iteration run bit for bit.
TEST(CompactBatches, ThreeRanksFollowOneAndAResumedRunContinuesBitForBit) {
  const auto doc = compact_mos2(4);
  tycho::host::session one(doc.clone(), tycho::host::registry::global());
  one.run(0, {});
  const auto manifest = nlohmann::json::parse(one.manifest_json());
  EXPECT_EQ(manifest["batching"]["kind"], "compact");
  EXPECT_EQ(manifest["batching"]["tile_px"], tycho::object_tiles::default_tile_px);
  const tycho::owned_array tiles = one.get("object_tile_steps");
  const auto* counts = tiles.as<int64_t>();
  const int64_t most = *std::max_element(counts, counts + tiles.count());
  EXPECT_GT(most, 4);           // tiles under several blocks took several steps per iteration
  EXPECT_LT(most, 4 * 16 + 1);  // at most one per batch
  EXPECT_EQ(std::count(counts, counts + tiles.count(), int64_t(0)) > 0, true);  // the padding's corners: never

  std::vector<DLDevice> cpus(3, DLDevice{kDLCPU, 0});
  std::vector<double> loss3;
  tycho::owned_array object3;
  std::mutex m;
  tycho::host::run_local_ranks(doc, tycho::host::registry::global(), cpus, [&](tycho::host::parallel_context& ctx) {
    tycho::host::session s(doc.clone(), tycho::host::registry::global(), "", &ctx);
    s.run(0, {});
    std::lock_guard lock(m);
    if (ctx.is_root()) {
      loss3 = s.loss_history();
      object3 = s.get("object");
    }
  });
  ASSERT_EQ(loss3.size(), one.loss_history().size());
  for (std::size_t i = 0; i < loss3.size(); ++i) EXPECT_NEAR(loss3[i] / one.loss_history()[i], 1.0, 1e-5) << i;
  EXPECT_LT(tycho::test::largest_relative_difference(one.get("object"), object3), 1e-4);

  const std::string path = (std::filesystem::temp_directory_path() / "tycho-compact-resume.zip").string();
  {
    tycho::host::session first(doc.clone(), tycho::host::registry::global());
    first.run(2, {});
    first.save(path, TYCHO_SAVE_OVERWRITE);
  }
  tycho::host::session resumed(doc.clone(), tycho::host::registry::global(), path);
  resumed.run(2, {});
  EXPECT_EQ(resumed.loss_history(), one.loss_history());
  EXPECT_EQ(resumed.get("object").bytes, one.get("object").bytes);
  EXPECT_EQ(resumed.get("object_tile_steps").bytes, tiles.bytes);

  // The tile counts are untrusted input as every member of a result is: of another shape than
  // batching.tile_px tiles the object, refused by the reader of results; a negative count (Adam's
  // bias correction of a step before the first), refused when it is restored.
  const std::string crafted = (std::filesystem::temp_directory_path() / "tycho-compact-crafted.zip").string();
  const std::string rows = std::to_string(tiles.shape[0]), cols = std::to_string(tiles.shape[1]);
  std::vector<int64_t> negative(counts, counts + tiles.count());
  negative[1] = -3;
  for (const auto& [member, want] :
       {std::pair{tycho::test::npy_bytes("<i8", "(1, 1)", tycho::test::bytes_of({int64_t(1)})),
                  "array 'object_tile_steps' is (1, 1) int64; expected (rows, cols) int64, the 16 x 16 px tiles "
                  "(batching.tile_px) of the object"},
        std::pair{tycho::test::npy_bytes("<i8", "(" + rows + ", " + cols + ")", tycho::test::bytes_of(negative)),
                  "object_tile_steps holds -3 at tile (0, 1); expected a step count from 0 to 2^53"}}) {
    tycho::test::write_zip_members(crafted, {{"object_tile_steps.npy", member}}, path);
    try {
      tycho::host::session refused(doc.clone(), tycho::host::registry::global(), crafted);
      ADD_FAILURE() << "resumed from " << want;
    } catch (const tycho::error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(crafted);
  std::filesystem::remove(path);
}

// batching = "auto" keeps the example's random batches (its object is far smaller than what a
// batch's windows cover), so its trajectory is today's; the manifest says which.
TEST(CompactBatches, AutoKeepsTheExamplesRandomBatches) {
  auto doc = tycho::config_document::load_file(tycho::test::source_dir() + "/examples/mos2.toml");
  doc.set_from_text("reconstruct.iterations=1");
  doc.set_from_text("output.previews=false");
  tycho::host::session s(doc.clone(), tycho::host::registry::global());
  const auto manifest = nlohmann::json::parse(s.manifest_json());
  EXPECT_EQ(manifest["batching"]["kind"], "random");
  EXPECT_EQ(manifest["batching"]["tile_px"], 0);
  const auto names = s.array_names();
  EXPECT_EQ(std::find(names.begin(), names.end(), "object_tile_steps"), names.end());
}

}  // namespace
