// iterations = "auto" end to end (the rule itself: test_stopping_rule.cpp): a run stops by the
// rule and its manifest and summary say why, with the verdict the saved history gives; a stage
// scheduled later keeps it going; a run stopped part-way (--stop-after) and continued with
// --from stops where the uninterrupted run did, bit for bit, and a file the rule has ended is
// refused unless a fixed count is asked for; the rule decides only when to stop, never what an
// iteration does (the same bits as a fixed count); two ranks stop together; the new keys refuse
// bad values by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tycho/host/parallel.hpp>
#include <tycho/host/result_record.hpp>
#include <tycho/host/session.hpp>
#include <vector>

#include "../host/src/runtime/stopping_rule.hpp"
#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"
#include "zip_members.hpp"

namespace {

using tycho::test::command_result;
using tycho::test::error_line;
using tycho::test::load_result;
using tycho::test::run_command;

// The MoS2 example with constant learning rates and a window of 5, the scan map not refined (its
// wait has a test of its own), the stated step, and no halving of the learning rates at the
// rule's verdicts (theirs too, unless a test sets plateau_halvings): the rule ends it after a few
// tens of iterations (27 here), which keeps these runs short.
class StoppingRuleRuns : public ::testing::Test {
 protected:
  command_result reconstruct(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(),
                                     "reconstruct",
                                     tycho::test::source_dir() + "/examples/mos2.toml",
                                     "--set",
                                     "reconstruct.iterations=\"auto\"",
                                     "--set",
                                     "reconstruct.stop_window=5",
                                     "--set",
                                     "reconstruct.object.schedule=\"constant\"",
                                     "--set",
                                     "reconstruct.probe.schedule=\"constant\"",
                                     "--set",
                                     "output.previews=false",
                                     // The stated step: the lattice's (0.9997 of it) moves the
                                     // trajectory enough to change a window-5 verdict here.
                                     "--set",
                                     "preprocess.scan_scale=\"stated\""};
    if (std::find(extra.begin(), extra.end(), "reconstruct.positions.refine_scan_map=true") == extra.end())
      argv.insert(argv.end(), {"--set", "reconstruct.positions.refine_scan_map=false"});
    if (std::none_of(extra.begin(), extra.end(), [](const std::string& e) { return e.starts_with("reconstruct.plateau_halvings"); }))
      argv.insert(argv.end(), {"--set", "reconstruct.plateau_halvings=0"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv);
  }
  static nlohmann::json manifest(const std::string& path) {
    return nlohmann::json::parse(load_result(path).manifest_json);
  }
  static std::vector<double> losses(const std::string& path) {
    const auto record = load_result(path);
    const auto& h = record.array("loss_history", path);
    return std::vector<double>(h.as<double>(), h.as<double>() + h.count());
  }
  static std::vector<uint8_t> object_bytes(const std::string& path) {
    const auto record = load_result(path);
    return record.array("object", path).bytes;
  }
  // The verdict the saved history and the manifest's settings give.
  static tycho::host::stopping_state verdict(const std::string& path) {
    const auto s = manifest(path).at("history").at("stopping");
    tycho::host::stopping_settings r;
    r.window = s.at("window");
    r.max_iterations = s.at("max_iterations");
    r.earliest = s.at("earliest");
    r.counting_noise = s.at("counting_noise");
    return tycho::host::stopping_state_of(losses(path), r);
  }
  // The iterations the rule halves the learning rates at, replayed on the saved history from the
  // first window, as the session does: each verdict with halvings left moves the next a window on.
  static std::vector<int64_t> halvings_replayed(const std::string& path, int64_t first_earliest) {
    const auto s = manifest(path).at("history").at("stopping");
    tycho::host::stopping_settings r;
    r.window = s.at("window");
    r.max_iterations = s.at("max_iterations");
    r.earliest = first_earliest;
    r.counting_noise = s.at("counting_noise");
    r.halvings_left = s.at("plateau_halvings");
    std::vector<int64_t> at;
    for (auto v = tycho::host::stopping_state_of(losses(path), r); v.halve;
         v = tycho::host::stopping_state_of(losses(path), r)) {
      at.push_back(v.plateau);
      r.halvings_left -= 1;
      r.earliest = v.plateau + r.window;
    }
    return at;
  }
  tycho::test::temp_folder tmp_;
};

TEST_F(StoppingRuleRuns, StopsByTheRuleAndSaysWhy) {
  const std::string a = tmp_ / "a.zip";
  auto r = reconstruct({"-o", a});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const auto m = manifest(a);
  const auto& h = m.at("history");
  const auto& s = h.at("stopping");
  const int64_t n = h.at("iterations");
  EXPECT_EQ(s.at("iterations"), "auto");
  EXPECT_EQ(s.at("reason"), "converged");
  EXPECT_EQ(s.at("plateau_iteration"), n);
  EXPECT_GE(n, 5);
  EXPECT_LT(n, 100);  // far from the cap: the loss stopped falling
  // σ_c of the MoS2 counts, mean loss per pattern: s·√(v/768), v from the bootstrap (1.56e-5).
  EXPECT_NEAR(s.at("counting_noise").get<double>(), 1.56e-5, 0.2e-5);
  EXPECT_LT(s.at("trend").at("predicted_fall").get<double>(), s.at("trend").at("noise").get<double>());
  // The saved history gives the same verdict at the same iteration, and not one iteration earlier.
  const auto v = verdict(a);
  EXPECT_TRUE(v.stop);
  EXPECT_EQ(v.plateau, n);
  EXPECT_EQ(r.out.find("done: " + std::to_string(n) + " iterations (converged)") != std::string::npos, true) << r.out;
  EXPECT_NE(r.err.find("stopped after " + std::to_string(n) + " iterations: converged"), std::string::npos) << r.err;
}

TEST_F(StoppingRuleRuns, AStageScheduledLaterKeepsItGoingAndResumeStopsWhereTheRunDid) {
  // The probe fixed until iteration 25: no window before it is judged (25 + 5 − 1 = 29).
  const std::vector<std::string> stage = {"--set", "reconstruct.probe.first_iteration=25"};
  const std::string whole = tmp_ / "whole.zip", part = tmp_ / "part.zip", rest = tmp_ / "rest.zip";
  auto add = [&](std::vector<std::string> v) {
    v.insert(v.end(), stage.begin(), stage.end());
    return v;
  };
  auto rw = reconstruct(add({"-o", whole}));
  ASSERT_TRUE(rw.exited_with(0)) << rw.describe();
  const auto mw = manifest(whole).at("history");
  const int64_t n = mw.at("iterations");
  EXPECT_EQ(mw.at("stopping").at("earliest"), 29);
  EXPECT_EQ(mw.at("stopping").at("waits_for"), "[reconstruct.probe] first_iteration = 25");
  EXPECT_GE(n, 29);
  EXPECT_EQ(mw.at("stopping").at("reason"), "converged");

  auto rp = reconstruct(add({"--stop-after", "12", "-o", part}));
  ASSERT_TRUE(rp.exited_with(0)) << rp.describe();
  EXPECT_EQ(manifest(part).at("history").at("iterations"), 12);
  EXPECT_EQ(manifest(part).at("history").at("stopping").at("reason"), "stop_after");
  // Continued without a count: the rule of the file, from its history, to the same iteration.
  auto rr = reconstruct(add({"--from", part, "-o", rest}));
  ASSERT_TRUE(rr.exited_with(0)) << rr.describe();
  EXPECT_EQ(manifest(rest).at("history").at("stopping"), manifest(whole).at("history").at("stopping"));
  EXPECT_EQ(losses(rest), losses(whole));
  EXPECT_TRUE(object_bytes(rest) == object_bytes(whole))
      << "the resumed run's object differs from the uninterrupted run's";

  // A file its rule has ended: refused without a count; --iterations N runs N more.
  auto again = reconstruct(add({"--from", whole, "-o", tmp_ / "again.zip"}));
  EXPECT_TRUE(again.exited_with(2)) << again.describe();
  EXPECT_NE(error_line(again).find("already ended by its stopping rule after iteration " + std::to_string(n)),
            std::string::npos)
      << again.err;
  auto more = reconstruct(add({"--from", whole, "--iterations", "2", "-o", tmp_ / "more.zip"}));
  ASSERT_TRUE(more.exited_with(0)) << more.describe();
  EXPECT_EQ(manifest(tmp_ / "more.zip").at("history").at("iterations"), n + 2);
  EXPECT_EQ(manifest(tmp_ / "more.zip").at("history").at("stopping").at("reason"), "fixed_count");
}

// With its schedule as long as its cap, a run by the rule that the rule does not end is a fixed
// count: the same bits (cosine schedules of the example, 12 iterations).
TEST_F(StoppingRuleRuns, TheRuleDecidesOnlyWhenToStop) {
  const std::string by_rule = tmp_ / "rule.zip", fixed = tmp_ / "fixed.zip";
  auto ra = reconstruct({"--set", "reconstruct.object.schedule=\"cosine\"", "--set",
                         "reconstruct.probe.schedule=\"cosine\"", "--set", "reconstruct.max_iterations=12", "--set",
                         "reconstruct.schedule_iterations=12", "-o", by_rule});
  ASSERT_TRUE(ra.exited_with(0)) << ra.describe();
  auto rb = reconstruct({"--set", "reconstruct.object.schedule=\"cosine\"", "--set",
                         "reconstruct.probe.schedule=\"cosine\"", "--iterations", "12", "-o", fixed});
  ASSERT_TRUE(rb.exited_with(0)) << rb.describe();
  const auto ma = manifest(by_rule).at("history"), mb = manifest(fixed).at("history");
  EXPECT_EQ(ma.at("stopping").at("reason"), "max_iterations");
  EXPECT_EQ(mb.at("stopping"), (nlohmann::json{{"iterations", 12}, {"reason", "fixed_count"}}));
  EXPECT_EQ(ma.at("schedule_iterations"), 12);
  EXPECT_EQ(mb.at("schedule_iterations"), 12);
  EXPECT_EQ(losses(by_rule), losses(fixed));
  EXPECT_EQ(losses(fixed).size(), 12u);
  EXPECT_TRUE(object_bytes(by_rule) == object_bytes(fixed));
}

// Two ranks (threads of one process), each with half of the patterns: both end by the rule after
// the same iteration, with the same verdict.
TEST_F(StoppingRuleRuns, EveryRankStopsAtTheSameIteration) {
  auto cfg = tycho::config_document::load_file(tycho::test::source_dir() + "/examples/mos2.toml");
  for (const char* set :
       {"reconstruct.iterations=\"auto\"", "reconstruct.stop_window=5", "reconstruct.object.schedule=\"constant\"",
        "reconstruct.probe.schedule=\"constant\"", "reconstruct.threads=1", "output.previews=false",
        "reconstruct.positions.refine_scan_map=false"})
    cfg.set_from_text(set);
  std::vector<DLDevice> cpus(2, DLDevice{kDLCPU, 0});
  std::mutex m;
  std::vector<int64_t> done;
  std::vector<std::string> reasons;
  tycho::host::run_local_ranks(cfg, tycho::host::registry::global(), cpus, [&](tycho::host::parallel_context& ctx) {
    tycho::host::session s(cfg.clone(), tycho::host::registry::global(), "", &ctx);
    s.run(0, {});
    std::lock_guard lock(m);
    done.push_back(s.iterations_done());
    reasons.push_back(s.end_reason());
  });
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0], done[1]);
  EXPECT_GE(done[0], 5);
  EXPECT_LT(done[0], 100);
  EXPECT_EQ(reasons[0], "converged");
  EXPECT_EQ(reasons[1], "converged");
}

// The scan map's refinement is a stage that runs until it converges: the rule waits for it, then
// judges the windows ending from its last step on; without the wait the same history would have
// ended the run before the map had settled.
// The map's refinement is a stage that runs until it converges (at iteration c): the rule judges
// from c. With correct = "after_scan_map" each position's own steps start at c + 1, and the rule
// gives them a window of their own: it judges from c + W.
TEST_F(StoppingRuleRuns, TheRuleWaitsForTheScanMapsRefinement) {
  const std::string a = tmp_ / "map.zip";
  auto r = reconstruct({"--set", "reconstruct.positions.refine_scan_map=true", "--set",
                        "reconstruct.positions.correct=false", "-o", a});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const auto m = manifest(a);
  const auto& s = m.at("history").at("stopping");
  const int64_t n = m.at("history").at("iterations");
  ASSERT_TRUE(m.contains("scan_map_refined"));
  ASSERT_EQ(m.at("scan_map_refined").at("converged"), true);
  const auto state = m.at("scan_map_refined").at("state").get<std::vector<double>>();
  const int64_t c = int64_t(state.at(49));  // the iteration its refinement converged at
  EXPECT_EQ(s.at("reason"), "converged");
  EXPECT_GE(n, c);
  EXPECT_EQ(s.at("earliest"), c);
  EXPECT_EQ(s.at("waits_for"), "the scan map's refinement, converged at iteration " + std::to_string(c));
  EXPECT_NE(r.err.find("the scan map's refinement converged at iteration " + std::to_string(c)), std::string::npos)
      << r.err;

  // "after_scan_map": the same run up to c (the per-position steps have not started), then each
  // position moves on its own, and the rule waits W more iterations.
  const std::string b = tmp_ / "positions.zip";
  auto rb = reconstruct({"--set", "reconstruct.positions.refine_scan_map=true", "--set",
                         "reconstruct.positions.correct=\"after_scan_map\"", "-o", b});
  ASSERT_TRUE(rb.exited_with(0)) << rb.describe();
  const auto mb = manifest(b);
  const auto& sb = mb.at("history").at("stopping");
  const int64_t w = sb.at("window");
  ASSERT_EQ(int64_t(mb.at("scan_map_refined").at("state").get<std::vector<double>>().at(49)), c);
  EXPECT_EQ(sb.at("earliest"), c + w);
  EXPECT_EQ(sb.at("waits_for"), "the scan map's refinement, converged at iteration " + std::to_string(c) +
                                    ", then each position corrected from iteration " + std::to_string(c + 1));
  EXPECT_NE(rb.err.find("each position is corrected from iteration " + std::to_string(c + 1)), std::string::npos)
      << rb.err;
  const auto la = losses(a), lb = losses(b);
  ASSERT_GE(lb.size(), std::size_t(c + w));
  for (int64_t i = 0; i < c; ++i) ASSERT_EQ(la.at(std::size_t(i)), lb.at(std::size_t(i))) << "iteration " << i + 1;
  // Moved one by one: the saved positions are no longer the map's raster (the default's).
  const auto record_a = load_result(a), record_b = load_result(b);
  const auto& pa = record_a.array("positions_px", a);
  const auto& pb = record_b.array("positions_px", b);
  ASSERT_EQ(pa.count(), pb.count());
  double largest = 0;
  for (int64_t k = 0; k < pa.count(); ++k) largest = std::max(largest, std::abs(pa.as<double>()[k] - pb.as<double>()[k]));
  EXPECT_GT(largest, 1e-3) << "px";
  // The verdict the saved history gives with the manifest's settings: the same iteration.
  EXPECT_EQ(verdict(a).plateau, n);
  // Judged from the map's own schedule alone (its first step at 10, two steps in a window of 5:
  // from iteration 19), the loss had stopped falling before the map converged.
  tycho::host::stopping_settings early;
  early.window = 5;
  early.max_iterations = 1000;
  early.earliest = 19;
  early.counting_noise = s.at("counting_noise");
  const auto h = losses(a);
  EXPECT_LT(tycho::host::stopping_state_of(h, early).plateau, c);
}

// plateau_halvings = 2: the rule's first two verdicts halve the object's and probe's learning rates
// (each logged), the third ends the run; the saved history replays the same iterations; a run
// stopped between the halvings and continued with --from ends as the whole run did, bit for bit;
// a manifest whose halvings no run writes is refused naming the key.
TEST_F(StoppingRuleRuns, VerdictsHalveTheLearningRatesBeforeTheyEndTheRun) {
  const std::string whole = tmp_ / "halved.zip", once = tmp_ / "once.zip", part = tmp_ / "part.zip",
                    rest = tmp_ / "rest.zip";
  const std::vector<std::string> two = {"--set", "reconstruct.plateau_halvings=2"};
  auto with = [&](std::vector<std::string> v) {
    v.insert(v.end(), two.begin(), two.end());
    return v;
  };
  auto ro = reconstruct({"-o", once});  // plateau_halvings = 0: ends at the first verdict
  ASSERT_TRUE(ro.exited_with(0)) << ro.describe();
  const int64_t first = manifest(once).at("history").at("iterations");
  auto rw = reconstruct(with({"-o", whole}));
  ASSERT_TRUE(rw.exited_with(0)) << rw.describe();
  const auto h = manifest(whole).at("history");
  const auto& s = h.at("stopping");
  const int64_t n = h.at("iterations"), w = s.at("window");
  EXPECT_EQ(s.at("plateau_halvings"), 2);
  const auto at = s.at("halved_at").get<std::vector<int64_t>>();
  ASSERT_EQ(at.size(), 2u);
  EXPECT_EQ(at[0], first);  // the verdict that ended the run without halvings
  EXPECT_GE(at[1], at[0] + w);
  EXPECT_GE(n, at[1] + w);
  EXPECT_EQ(s.at("earliest"), at[1] + w);
  EXPECT_EQ(s.at("reason"), "converged");
  EXPECT_EQ(halvings_replayed(whole, w), at);
  for (std::size_t k = 0; k < at.size(); ++k)
    EXPECT_NE(rw.err.find("iteration " + std::to_string(at[k]) + ": the loss "), std::string::npos) << rw.err;
  EXPECT_NE(rw.err.find("learning rates are halved, now 0.25 of their settings (2 of 2 halvings"), std::string::npos)
      << rw.err;
  EXPECT_NE(rw.err.find("(the learning rates halved after iterations " + std::to_string(at[0]) + ", " +
                        std::to_string(at[1]) + ")"),
            std::string::npos)
      << rw.err;
  // Up to the first halving the run is the one without: the same losses.
  const auto lo = losses(once), lw = losses(whole);
  for (int64_t i = 0; i < first; ++i) ASSERT_EQ(lo.at(std::size_t(i)), lw.at(std::size_t(i))) << i + 1;
  // Stopped between the halvings, continued: the same run, bit for bit.
  auto rp = reconstruct(with({"--stop-after", std::to_string(at[0] + 2), "-o", part}));
  ASSERT_TRUE(rp.exited_with(0)) << rp.describe();
  EXPECT_EQ(manifest(part).at("history").at("stopping").at("halved_at"), std::vector<int64_t>{at[0]});
  auto rr = reconstruct({"--from", part, "-o", rest});
  ASSERT_TRUE(rr.exited_with(0)) << rr.describe();
  EXPECT_EQ(manifest(rest).at("history").at("stopping"), s);
  EXPECT_EQ(losses(rest), lw);
  EXPECT_TRUE(object_bytes(rest) == object_bytes(whole)) << "the resumed run's object differs";
  // A fixed count from that file past where the rule halved again halves nothing.
  const int64_t more = at[1] - (at[0] + 2) + 2;
  auto rf = reconstruct({"--from", part, "--iterations", std::to_string(more), "-o", tmp_ / "fixed.zip"});
  ASSERT_TRUE(rf.exited_with(0)) << rf.describe();
  const auto sf = manifest(tmp_ / "fixed.zip").at("history").at("stopping");
  EXPECT_EQ(sf.at("reason"), "fixed_count");
  EXPECT_EQ(sf.at("halved_at"), std::vector<int64_t>{at[0]});
  EXPECT_EQ(rf.err.find("learning rates are halved"), std::string::npos) << rf.err;
  // Halvings no run writes: more than allowed, closer than a window, after the file's last iteration.
  const auto m = manifest(part);
  const int64_t done = m.at("history").at("iterations");
  const std::pair<std::string, std::string> bad[] = {
      {"[3, 9, 15]", "expected a list of at most 2 iterations (plateau_halvings)"},
      {"[" + std::to_string(at[0] - 1) + ", " + std::to_string(at[0]) + "]",
       "expected iterations each at least the window (5) after the one before"},
      {"[" + std::to_string(done + 1) + "]", "expected 1 integers from 1 to " + std::to_string(done)},
      {"[1]", "expected iterations from 5 on, the first the rule judges (its window of 5)"},
  };
  for (const auto& [value, want] : bad) {
    nlohmann::json edited = m;
    edited["history"]["stopping"]["halved_at"] = nlohmann::json::parse(value);
    const std::string crafted = tmp_ / "crafted.zip";
    tycho::test::write_zip_members(crafted, {{"manifest.json", edited.dump()}}, part);
    auto rc = reconstruct({"--from", crafted, "-o", tmp_ / "c.zip"});
    EXPECT_TRUE(rc.exited_with(2)) << value << "\n" << rc.describe();
    EXPECT_NE(error_line(rc).find("has history.stopping.halved_at = "), std::string::npos) << error_line(rc);
    EXPECT_NE(error_line(rc).find(want), std::string::npos) << value << "\n" << error_line(rc);
  }
  // Halvings in a file that allows none: without plateau_halvings.
  nlohmann::json without = m;
  without["history"]["stopping"].erase("plateau_halvings");
  tycho::test::write_zip_members(tmp_ / "without.zip", {{"manifest.json", without.dump()}}, part);
  auto rw2 = reconstruct({"--from", tmp_ / "without.zip", "-o", tmp_ / "c.zip"});
  EXPECT_TRUE(rw2.exited_with(2)) << rw2.describe();
  EXPECT_NE(error_line(rw2).find("has history.stopping.halved_at = [" + std::to_string(at[0]) +
                                 "], expected no halvings in a file without"),
            std::string::npos)
      << error_line(rw2);
}

TEST_F(StoppingRuleRuns, NewKeysRefuseBadValuesByName) {
  const std::pair<const char*, const char*> cases[] = {
      {"reconstruct.iterations=\"often\"",
       "tycho: error: [reconstruct] iterations must be a whole number from 0 to 1000000000 (a fixed count) or "
       "\"auto\" (the stopping rule), got \"often\""},
      {"reconstruct.iterations=2.5",
       "tycho: error: [reconstruct] iterations must be a whole number from 0 to 1000000000 (a fixed count) or "
       "\"auto\" (the stopping rule), got a number with a fraction"},
      {"reconstruct.iterations=-1", "tycho: error: [reconstruct] iterations must be from 0 to 1000000000, got -1"},
      {"reconstruct.max_iterations=0",
       "tycho: error: [reconstruct] max_iterations must be from 1 to 1000000000, got 0"},
      {"reconstruct.stop_window=2", "tycho: error: [reconstruct] stop_window must be from 3 to 1000 iterations, got 2"},
      {"reconstruct.positions.correct=\"sometimes\"",
       "tycho: error: [reconstruct.positions] correct must be true, false, \"after_scan_map\" (each position "
       "corrected once the scan map's refinement has converged) or \"auto\" (then kept only where the corrections "
       "exceed their counting noise), got \"sometimes\""},
      {"reconstruct.stop_window=1001",
       "tycho: error: [reconstruct] stop_window must be from 3 to 1000 iterations, got 1001"},
      {"reconstruct.schedule_iterations=0",
       "tycho: error: [reconstruct] schedule_iterations must be from 1 to 1000000000, got 0"},
      {"reconstruct.max_iterations=\"many\"", "config key 'max_iterations' in [reconstruct] must be an integer"},
      {"reconstruct.plateau_halvings=31", "tycho: error: [reconstruct] plateau_halvings must be from 0 to 30, got 31"},
      {"reconstruct.plateau_halvings=-1", "tycho: error: [reconstruct] plateau_halvings must be from 0 to 30, got -1"},
  };
  for (const auto& [set, expected] : cases) {
    auto r = run_command({tycho::test::tycho_exe(), "reconstruct", tycho::test::source_dir() + "/examples/mos2.toml",
                          "-q", "--set", set, "-o", tmp_ / "bad.zip"});
    EXPECT_TRUE(r.exited_with(2)) << set << "\n" << r.describe();
    EXPECT_NE(error_line(r).find(expected), std::string::npos) << set << "\n" << error_line(r);
  }
}

}  // namespace
