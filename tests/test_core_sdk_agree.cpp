// core depends on the ABI only (DESIGN.md), so the few rules it shares with the SDK are written
// twice: the config path rule (tycho::resolve_path, tycho::sdk::resolve_path) and the message
// text of errors (tycho::cat, tycho::sdk::cat). Here they must agree, case by case.
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>
#include <tycho/sdk/source.hpp>

#include <string>
#include <utility>
#include <vector>

namespace {

TEST(CoreAndSdk, ResolveConfigPathsAlike) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/data/run", "scan.h5"},          {"/data/run", "../other/scan.h5"}, {"/data/run", "/abs/scan.h5"},
      {"", "scan.h5"},                   {"", "../scan.h5"},                {"/data/run/", "./a/./b/../c.npy"},
      {"relative/base", "x/y.h5"},       {"/", "scan.h5"},
  };
  for (const auto& [base, path] : cases)
    EXPECT_EQ(tycho::resolve_path(base, path), tycho::sdk::resolve_path(base, path)) << base << " + " << path;
  EXPECT_EQ(tycho::resolve_path("/data/run", "../other/scan.h5"), "/data/other/scan.h5");
  EXPECT_EQ(tycho::resolve_path("/data/run", "/abs/scan.h5"), "/abs/scan.h5");
  EXPECT_EQ(tycho::resolve_path("", "../scan.h5"), "../scan.h5");
}

TEST(CoreAndSdk, ErrorMessagesAreWrittenAlike) {
  EXPECT_EQ(tycho::cat("x = ", 1.0 / 3.0, ", n = ", 42, ", ", 2.5e-12),
            tycho::sdk::cat("x = ", 1.0 / 3.0, ", n = ", 42, ", ", 2.5e-12));
  EXPECT_EQ(tycho::cat(1.0 / 3.0), "0.3333333333");
  try {
    tycho::fail(TYCHO_ERR_BAD_DATA, "array '", "probe", "' has ", 3, " dimensions");
    FAIL() << "fail() returned";
  } catch (const tycho::error& e) {
    EXPECT_EQ(e.status, TYCHO_ERR_BAD_DATA);
    EXPECT_STREQ(e.what(), "array 'probe' has 3 dimensions");
  }
}

}  // namespace
