// The real detector files of ../shared/data/realformats (RosettaSciIO's public test data) and
// the reference values RosettaSciIO 0.15 computed from them (tests/realformats/reference.json,
// written by tests/realformats/make_reference.py). Tests skip with a message when ../shared is
// absent.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "zip_members.hpp"

namespace tycho::test {

inline std::string realformats_dir() { return source_dir() + "/../shared/data/realformats"; }
inline bool have_realformats() { return std::filesystem::is_directory(realformats_dir()); }

inline const nlohmann::json& realformats_reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(source_dir() + "/tests/realformats/reference.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

// Member `member` of the zip `zip_name` in the shared folder, written to `dir`; the path.
inline std::string extract_realformat(const std::string& zip_name, const std::string& member, const std::string& dir) {
  const auto bytes = read_zip_member(realformats_dir() + "/" + zip_name, member);
  if (!bytes) return "";
  const std::string path = dir + "/" + std::filesystem::path(member).filename().string();
  std::ofstream out(path, std::ios::binary);
  out.write(bytes->data(), std::streamsize(bytes->size()));
  return path;
}

// The checksums make_reference.py records, over values in C order: exact for integer counts.
struct value_checksums {
  int64_t sum = 0, weighted_sum = 0, max = 0;
  std::vector<int64_t> frame_sums;
};
inline value_checksums checksums_of(const std::vector<float>& v, int64_t frame_px, int64_t period) {
  value_checksums c;
  for (std::size_t k = 0; k < v.size(); ++k) {
    const auto x = int64_t(v[k]);
    c.sum += x;
    c.weighted_sum += x * (int64_t(k) % period + 1);
    c.max = std::max(c.max, x);
    if (int64_t(k) % frame_px == 0) c.frame_sums.push_back(0);
    c.frame_sums.back() += x;
  }
  return c;
}

inline void expect_checksums(const std::vector<float>& v, int64_t frame_px, const nlohmann::json& ref) {
  const auto c = checksums_of(v, frame_px, realformats_reference().at("weight_period").get<int64_t>());
  EXPECT_EQ(c.sum, ref.at("sum").get<int64_t>());
  EXPECT_EQ(c.weighted_sum, ref.at("weighted_sum").get<int64_t>());
  EXPECT_EQ(c.max, ref.at("max").get<int64_t>());
  EXPECT_EQ(c.frame_sums, ref.at("frame_sums").get<std::vector<int64_t>>());
}

}  // namespace tycho::test
