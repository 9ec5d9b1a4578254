// `tycho evaluate` and its truth file: members it does not use (a string array, an object
// array) are ignored; a truth whose scan differs from the result's gives warnings naming the
// difference, and still the figures; a truth without a required member is refused, listing
// what it has.
#include <gtest/gtest.h>

#include <cmath>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "npy_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"
#include "zip_members.hpp"

namespace fs = std::filesystem;
using tycho::test::run_command;
using tycho::test::bytes_of;
using tycho::test::npy_bytes;
using tycho::test::tycho_exe;

namespace {
// A copy of the shipped truth with members replaced or added (name without ".npy"), or only
// the given members when `fresh`.
void write_truth(const fs::path& out, const std::vector<std::pair<std::string, std::string>>& members, bool fresh = false) {
  tycho::test::zip_members named;
  for (const auto& [name, content] : members) named.emplace_back(name + ".npy", content);
  tycho::test::write_zip_members(out, named, fresh ? fs::path() : fs::path(tycho::test::example_data("mos2_ground_truth.npz")),
                                 /*stored=*/false);
}

class EvaluateTruth : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tycho_evaluate_truth_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // One iteration is enough: the figures are compared between truth files, not to a bound.
    auto r = run_command({tycho_exe(), "reconstruct", tycho::test::source_dir() + "/examples/mos2.toml", "-q",
                          "--iterations", "1", "-o", (dir_ / "r.zip").string(), "--set", "output.previews=false",
                          "--set", "reconstruct.positions.correct=false"});  // the raster's field of view
    ASSERT_TRUE(r.exited_with(0)) << r.describe();
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static tycho::test::command_result evaluate(const fs::path& truth) {
    return run_command({tycho_exe(), "evaluate", (dir_ / "r.zip").string(), "--truth", truth.string()});
  }
  static fs::path dir_;
};
fs::path EvaluateTruth::dir_;
}  // namespace

TEST_F(EvaluateTruth, MembersItDoesNotUseAreIgnored) {
  const fs::path plain = tycho::test::example_data("mos2_ground_truth.npz"), extra = dir_ / "extra.npz";
  write_truth(extra, {{"description", npy_bytes("<U4", "(1,)", bytes_of<char32_t>({U'M', U'o', U'S', U'2'}))},
                      {"meta", npy_bytes("|O", "(1,)", "\x80\x02N.")}});
  auto a = evaluate(plain), b = evaluate(extra);
  ASSERT_TRUE(a.exited_with(0)) << a.describe();
  ASSERT_TRUE(b.exited_with(0)) << b.describe();
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(ja.at("pearson"), jb.at("pearson"));
  EXPECT_EQ(ja.at("rms_rad"), jb.at("rms_rad"));
  EXPECT_EQ(b.err.find("warning"), std::string::npos) << b.err;  // the shipped truth matches the example's scan
}

TEST_F(EvaluateTruth, ScanMismatchWarnsAndStillScores) {
  const fs::path off = dir_ / "off.npz";
  write_truth(off, {{"scan_origin_A", npy_bytes("<f8", "(2,)", bytes_of<double>({18.0, 19.0}))},
                    {"scan_shape", npy_bytes("<i8", "(2,)", bytes_of<int64_t>({30, 22}))},
                    {"scan_step_A", npy_bytes("<f8", "()", bytes_of<double>({0.52}))}});
  // Within the result's scan (30 x 22 steps of 0.52 Å span less than 32 x 24 of 0.5 Å): warned
  // about, and scored; a truth scan the result does not cover is refused (test_hostile_results).
  auto r = evaluate(off);
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NO_THROW((void)nlohmann::json::parse(r.out).at("pearson").get<double>()) << r.out;
  for (const char* w :
       {"[tycho warning] evaluate: the result was laid out with scan_origin_A = [17, 19] Å, the truth has [18, 19] Å: "
        "the comparison aligns on the truth's origin and searches ±12 px around it\n",
        "[tycho warning] evaluate: the result's scan step is 0.5 Å, the truth's 0.52 Å: the positions do not match the "
        "truth's scan\n",
        "[tycho warning] evaluate: the result's scan is 32 x 24 positions, the truth's 30 x 22: only the overlap of the "
        "two scans is meaningful\n"})
    EXPECT_NE(r.err.find(w), std::string::npos) << w << "\n" << r.err;
}

// A cell of 80 x 80 px of 0.1736 Å (13.9 Å) against the 32 x 24 scan of 0.5 Å steps (15.5 x 11.5
// Å): the scan reaches beyond the cell, a warning; the 72 x 54 px compared fit in it. A 64 x 64 cell
// is smaller than the compared field: refused, where it was repeated to cover it (issue 28).
TEST_F(EvaluateTruth, LargerFieldOfViewThanTheCellWarnsAndASmallerTruthIsRefused) {
  auto phase = [](int n) {
    std::vector<float> v(std::size_t(n * n));
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = float(std::sin(0.37 * double(k)));
    return npy_bytes("<f4", "(" + std::to_string(n) + ", " + std::to_string(n) + ")", bytes_of(v));
  };
  const fs::path wider = dir_ / "wider.npz";
  write_truth(wider, {{"phase", phase(80)}});
  auto r = evaluate(wider);
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.err.find("evaluate: the scanned field of view (15.5 x 11.5 Å) is larger than the truth's cell (13.89 x "
                       "13.89 Å): the truth is repeated periodically to cover it"),
            std::string::npos)
      << r.describe();
  const fs::path small = dir_ / "small.npz";
  write_truth(small, {{"phase", phase(64)}});
  r = evaluate(small);
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_NE(r.err.find("the truth's cell (64 x 64 px) is smaller than the field of view it is compared on (72 x 54 px "
                       "of the object): a truth must cover that field; it is not repeated to fill it"),
            std::string::npos)
      << r.describe();
}

TEST_F(EvaluateTruth, MissingMemberIsRefusedListingWhatIsThere) {
  const fs::path bare = dir_ / "bare.npz";
  write_truth(bare, {{"pixel_size_A", npy_bytes("<f8", "()", bytes_of<double>({0.1736}))}}, /*fresh=*/true);
  auto r = evaluate(bare);
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_NE(r.err.find("truth file '" + bare.string() +
                       "' has no array 'phase' (it has pixel_size_A.npy); expected phase (or phase_total), pixel_size_A and "
                       "scan_origin_A"),
            std::string::npos)
      << r.err;
}
