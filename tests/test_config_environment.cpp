// "${NAME}" in config strings comes from the environment (one config or batch script for many
// jobs), in the file and in --set values; an unset variable is an error naming the key.
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>

#include <toml++/toml.h>

#include <cstdlib>

namespace {

TEST(ConfigEnvironment, ExpandsVariablesInStrings) {
  setenv("TYCHO_TEST_JOB", "4711", 1);
  auto doc = tycho::config_document::parse(
      "[output]\npath = \"run-${TYCHO_TEST_JOB}.zip\"\n[data]\npath = \"literal $${HOME} and ${TYCHO_TEST_JOB}\"\n",
      "<test>", "");
  EXPECT_EQ(doc.table_at("output")["path"].value<std::string>(), "run-4711.zip");
  EXPECT_EQ(doc.table_at("data")["path"].value<std::string>(), "literal ${HOME} and 4711");
  doc.set_from_text("output.path=\"again-${TYCHO_TEST_JOB}.zip\"");
  EXPECT_EQ(doc.table_at("output")["path"].value<std::string>(), "again-4711.zip");
}

TEST(ConfigEnvironment, AnUnsetVariableNamesTheKey) {
  unsetenv("TYCHO_TEST_UNSET");
  try {
    tycho::config_document::parse("[output]\npath = \"run-${TYCHO_TEST_UNSET}.zip\"\n", "job.toml", "");
    FAIL() << "an unset variable was accepted";
  } catch (const tycho::error& e) {
    EXPECT_NE(std::string(e.what()).find("job.toml: config key 'output.path' uses the environment variable "
                                         "TYCHO_TEST_UNSET, which is not set"),
              std::string::npos)
        << e.what();
  }
  auto doc = tycho::config_document::parse("", "job.toml", "");
  try {
    doc.set_from_text("output.path=\"${TYCHO_TEST_UNSET}\"");
    FAIL() << "an unset variable was accepted in --set";
  } catch (const tycho::error& e) {
    EXPECT_NE(std::string(e.what()).find("config key 'output.path' uses"), std::string::npos) << e.what();
  }
}

}  // namespace
