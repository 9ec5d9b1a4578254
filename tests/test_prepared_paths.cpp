// A prepared file records its config's file paths absolute: a run from the prepared file alone
// (`tycho reconstruct --from prepared.zip`, no CONFIG) resolves them as the config that named
// them did, not against the prepared file's folder.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "npy_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using tycho::test::run_command;

TEST(PreparedPaths, ARelativeVacuumPatternIsFoundFromAnotherFolder) {
  tycho::test::temp_folder tmp;
  namespace fs = std::filesystem;
  fs::create_directories(tmp.path() / "config");
  fs::create_directories(tmp.path() / "elsewhere");
  // The MoS2 example's config in a folder of its own, beside its vacuum pattern (a 12 px disc on
  // the 96 x 96 detector), named relative to it.
  std::ifstream in(tycho::test::source_dir() + "/examples/mos2.toml");
  std::stringstream text;
  text << in.rdbuf();
  const std::string config = tmp.write("config/run.toml", text.str());
  std::vector<float> disc(96 * 96, 0.f);
  for (int i = 0; i < 96; ++i)
    for (int j = 0; j < 96; ++j) disc[std::size_t(i * 96 + j)] = std::hypot(i - 48, j - 48) <= 12 ? 1.f : 0.f;
  tycho::test::write_npy(tmp / "config/vacuum.npy", "<f4", {96, 96}, disc.data(), disc.size() * sizeof(float));
  const std::string data = tycho::test::source_dir() + "/examples/data/mos2_80kV_32x24_counts.h5";

  const std::string prepared = tmp / "elsewhere/prepared.zip";
  auto p = run_command({tycho::test::tycho_exe(), "preprocess", config, "-q", "--set", "data.path=\"" + data + "\"",
                        "--set", "reconstruct.probe.vacuum_pattern=\"vacuum.npy\"", "-o", prepared});
  ASSERT_TRUE(p.exited_with(0)) << p.describe();

  auto r = run_command({tycho::test::tycho_exe(), "reconstruct", "--from", prepared, "--iterations", "1", "--set",
                        "output.previews=false", "-o", tmp / "elsewhere/result.zip"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const std::string expected = (fs::absolute(tmp.path() / "config" / "vacuum.npy")).lexically_normal().string();
  EXPECT_NE(r.err.find("the aperture from the vacuum pattern '" + expected + "'"), std::string::npos) << r.describe();
}

}  // namespace
