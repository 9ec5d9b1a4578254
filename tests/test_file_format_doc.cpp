// docs/file-format.md checked against the writer: the members table and the manifest table
// (the tables whose first column is headed `member` and `key`) against two saved results, one
// rank with Adam's state (the `tycho` command) and two ranks as threads (the `parallel` keys).
// Every member and every manifest key (at every depth: `a.b`, `a[].b`) the writer emits must be
// documented; every documented row must be emitted by at least one of the results (no stale
// rows); every row marked required must be in both.
#include <gtest/gtest.h>

#include <tycho/sdk/npy.hpp>
#include <zip.h>

#include <tycho/host/parallel.hpp>
#include <tycho/host/session.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace {

using path = std::vector<std::string>;  // a manifest key, one name per level ("components[]")

struct documented {
  std::string name;  // as written in the first cell, without the backticks
  path parts;        // split on '.' (keys only)
  bool required = false;
  int line = 0;
};

struct doc_tables {
  std::vector<documented> members, keys;
};

// Splits a Markdown table row on the pipes that are not escaped (`\|` inside a cell).
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cur;
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (row[i] == '\\' && i + 1 < row.size() && row[i + 1] == '|') {
      cur += '|';
      ++i;
    } else if (row[i] == '|') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += row[i];
    }
  }
  out.push_back(cur);
  // "| a | b |" → "", " a ", " b ", "": drop the outer empties, trim.
  if (!out.empty() && out.front().find_first_not_of(' ') == std::string::npos) out.erase(out.begin());
  if (!out.empty() && out.back().find_first_not_of(' ') == std::string::npos) out.pop_back();
  for (auto& c : out) {
    const auto b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
    c = b == std::string::npos ? "" : c.substr(b, e - b + 1);
  }
  return out;
}

path split_key(const std::string& key) {
  path parts;
  std::string cur;
  for (char ch : key) {
    if (ch == '.') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  parts.push_back(cur);
  return parts;
}

doc_tables read_doc(const std::string& file) {
  std::ifstream in(file);
  EXPECT_TRUE(in) << "cannot read " << file;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  doc_tables t;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    if (lines[i].rfind("|", 0) != 0 || lines[i + 1].rfind("|---", 0) != 0) continue;
    const auto header = cells(lines[i]);
    if (header.empty() || (header[0] != "member" && header[0] != "key")) continue;
    const bool is_member = header[0] == "member";
    std::size_t required_column = header.size();
    for (std::size_t c = 0; c < header.size(); ++c)
      if (header[c] == "required") required_column = c;
    EXPECT_LT(required_column, header.size()) << file << ":" << i + 1 << ": the table has no 'required' column";
    for (std::size_t r = i + 2; r < lines.size() && lines[r].rfind("|", 0) == 0; ++r) {
      const auto row = cells(lines[r]);
      const int line = int(r + 1);
      std::smatch m;
      static const std::regex name_re("^`([^`]+)`$");
      if (row.size() != header.size() || !std::regex_match(row[0], m, name_re)) {
        ADD_FAILURE() << file << ":" << line << ": expected " << header.size()
                      << " cells, the first one name in backticks: " << lines[r];
        continue;
      }
      documented d;
      d.name = m[1];
      d.parts = split_key(d.name);
      d.line = line;
      const std::string& req = required_column < row.size() ? row[required_column] : std::string();
      EXPECT_TRUE(req == "yes" || req == "no") << file << ":" << line << ": required is '" << req << "'";
      d.required = req == "yes";
      (is_member ? t.members : t.keys).push_back(d);
    }
  }
  return t;
}

bool is_wildcard(const std::string& part) { return part.size() > 2 && part.front() == '<' && part.back() == '>'; }

// A documented member name with <...> → a regex on member names.
bool member_matches(const std::string& documented_name, const std::string& member) {
  static const std::regex wildcard("<[^>]+>");
  std::string re;
  std::size_t at = 0;
  for (std::sregex_iterator it(documented_name.begin(), documented_name.end(), wildcard), end; it != end; ++it) {
    for (std::size_t k = at; k < std::size_t(it->position()); ++k) {
      const char ch = documented_name[k];
      if (std::string(".[]{}()*+?^$|\\").find(ch) != std::string::npos) re += '\\';
      re += ch;
    }
    re += "[^/]+";
    at = std::size_t(it->position() + it->length());
  }
  for (std::size_t k = at; k < documented_name.size(); ++k) {
    const char ch = documented_name[k];
    if (std::string(".[]{}()*+?^$|\\").find(ch) != std::string::npos) re += '\\';
    re += ch;
  }
  return std::regex_match(member, std::regex(re));
}

bool key_matches(const path& documented_key, const path& key) {
  if (documented_key.size() != key.size()) return false;
  for (std::size_t i = 0; i < key.size(); ++i)
    if (!is_wildcard(documented_key[i]) && documented_key[i] != key[i]) return false;
  return true;
}

std::string joined(const path& p) {
  std::string s;
  for (const auto& part : p) s += (s.empty() ? "" : ".") + part;
  return s;
}

// Every key of the manifest at every depth; below an array of objects come its objects' keys,
// under the array's name with "[]" ("components[]", "role").
void flatten(const nlohmann::json& j, const path& at, std::set<path>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      path p = at;
      p.push_back(k);
      out.insert(p);
      flatten(v, p, out);
    }
  } else if (j.is_array() && !j.empty() && !at.empty()) {
    bool objects = true;
    for (const auto& e : j) objects = objects && e.is_object();
    if (!objects) return;
    path p = at;
    p.back() += "[]";
    for (const auto& e : j) flatten(e, p, out);
  }
}

struct saved {
  std::string name;
  std::set<std::string> members;
  std::set<path> keys;
};

saved inspect(const std::string& file, const std::string& name) {
  saved s;
  s.name = name;
  int err = 0;
  zip_t* z = zip_open(file.c_str(), ZIP_RDONLY, &err);
  EXPECT_NE(z, nullptr) << "cannot open " << file;
  if (!z) return s;
  for (zip_int64_t i = 0, n = zip_get_num_entries(z, 0); i < n; ++i) s.members.insert(zip_get_name(z, zip_uint64_t(i), 0));
  zip_discard(z);
  auto rec = tycho::test::load_result(file);
  flatten(nlohmann::json::parse(rec.manifest_json), {}, s.keys);
  return s;
}

tycho::config_document mos2_config() {
  auto doc = tycho::config_document::load_file(tycho::test::source_dir() + "/examples/mos2.toml");
  doc.set_from_text("reconstruct.iterations=1");
  doc.set_from_text("reconstruct.threads=1");
  doc.set_from_text("output.previews=false");
  return doc;
}

TEST(FileFormatDoc, EveryMemberAndKeyIsDocumented) {
  const std::string doc_file = tycho::test::source_dir() + "/docs/file-format.md";
  const doc_tables doc = read_doc(doc_file);
  ASSERT_GE(doc.members.size(), 8u);
  ASSERT_GE(doc.keys.size(), 40u);
  tycho::test::temp_folder tmp;

  // One rank through the `tycho` command: Adam's state, the mask, no `parallel`; two slices, so
  // calibration.slice_thickness_A is written too; the scan map refined once (scan_map_refined),
  // C10 with it (refine_C10 = true: "auto" holds it with several slices).
  auto r = tycho::test::run_command({tycho::test::tycho_exe(), "reconstruct",
                                     tycho::test::source_dir() + "/examples/mos2.toml", "--iterations", "1", "-q",
                                     "--set", "output.previews=false", "--set", "reconstruct.slices=2", "--set",
                                     "reconstruct.slice_thickness_A=1.0", "--set", "reconstruct.positions.refine_scan_map=true",
                                     "--set", "reconstruct.positions.scan_map_first_iteration=1",
                                     "--set", "optics.refine_C10=true", "-o", tmp / "one.zip"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  // Two ranks as threads: the `parallel` keys, and the preprocessing stage's `preprocess` object;
  // the stopping rule's keys; compact batches: the object stepped in tiles (object_tile_steps.npy,
  // batching.tile_px > 0); the probe's aperture from a vacuum pattern (initial_probe): a disc of
  // 12 px on the 96 x 96 detector.
  {
    std::vector<float> disc(96 * 96, 0.f);
    for (int i = 0; i < 96; ++i)
      for (int j = 0; j < 96; ++j) disc[std::size_t(i * 96 + j)] = std::hypot(i - 48, j - 48) <= 12 ? 1.f : 0.f;
    const int64_t shape[2] = {96, 96};
    tmp.write("vacuum.npy", tycho::sdk::npy::write_header({kDLFloat, 32, 1}, shape, 2) +
                                std::string(reinterpret_cast<const char*>(disc.data()), disc.size() * sizeof(float)));
    auto cfg = mos2_config();
    cfg.set_from_text("reconstruct.probe.vacuum_pattern=\"" + tmp / "vacuum.npy" + "\"");
    cfg.set_from_text("preprocess.normalise=true");
    cfg.set_from_text("reconstruct.batching=\"compact\"");
    // By the stopping rule, 3 iterations at most: history.stopping's keys of "auto", its trend.
    cfg.set_from_text("reconstruct.iterations=\"auto\"");
    cfg.set_from_text("reconstruct.max_iterations=3");
    cfg.set_from_text("reconstruct.stop_window=3");
    cfg.set_from_text("reconstruct.object.schedule=\"constant\"");  // no stage later than iteration 3
    cfg.set_from_text("reconstruct.probe.schedule=\"constant\"");
    cfg.set_from_text("reconstruct.positions.refine_scan_map=false");
    std::vector<DLDevice> cpus(2, DLDevice{kDLCPU, 0});
    std::mutex m;
    tycho::host::run_local_ranks(cfg, tycho::host::registry::global(), cpus, [&](tycho::host::parallel_context& ctx) {
      tycho::host::session s(cfg.clone(), tycho::host::registry::global(), "", &ctx);
      s.run(0, {});
      std::lock_guard lock(m);
      if (ctx.is_root()) s.save(tmp / "two.zip", TYCHO_SAVE_OVERWRITE);
    });
  }
  // Each position corrected once the map has converged and weighed 20 iterations later
  // (correct = "auto"): position_correction with its curvature scale and weighing.
  auto rw = tycho::test::run_command({tycho::test::tycho_exe(), "reconstruct",
                                      tycho::test::source_dir() + "/examples/mos2.toml", "-q", "--set",
                                      "output.previews=false", "--set", "reconstruct.iterations=\"auto\"", "--set",
                                      "reconstruct.schedule_iterations=40", "-o", tmp / "weighed.zip"});
  ASSERT_TRUE(rw.exited_with(0)) << rw.describe();
  // Patterns held out of the batches (validation_fraction): the manifest's `validation`.
  auto rv = tycho::test::run_command({tycho::test::tycho_exe(), "reconstruct",
                                      tycho::test::source_dir() + "/examples/mos2.toml", "-q", "--iterations", "1",
                                      "--set", "output.previews=false", "--set", "reconstruct.validation_fraction=0.1",
                                      "--set", "reconstruct.positions.correct=false", "--set",
                                      "reconstruct.positions.refine_scan_map=false", "-o", tmp / "validated.zip"});
  ASSERT_TRUE(rv.exited_with(0)) << rv.describe();
  const std::vector<saved> results = {inspect(tmp / "one.zip", "one rank"), inspect(tmp / "two.zip", "two ranks"),
                                      inspect(tmp / "weighed.zip", "positions weighed"),
                                      inspect(tmp / "validated.zip", "patterns held out")};
  ASSERT_TRUE(results[0].members.count("optimizer.object.m.npy")) << "the run saved no optimizer state";
  ASSERT_TRUE(results[0].members.count("mask.npy")) << "the run saved no mask";

  for (const auto& res : results) {
    SCOPED_TRACE(res.name);
    for (const auto& member : res.members) {
      bool found = false;
      for (const auto& d : doc.members) found = found || member_matches(d.name, member);
      EXPECT_TRUE(found) << "member '" << member << "' is not in the members table of " << doc_file;
    }
    for (const auto& key : res.keys) {
      bool found = false;
      for (const auto& d : doc.keys) found = found || key_matches(d.parts, key);
      EXPECT_TRUE(found) << "manifest key '" << joined(key) << "' is not in the manifest table of " << doc_file;
    }
    for (const auto& d : doc.members)
      if (d.required)
        EXPECT_TRUE(res.members.count(d.name)) << doc_file << ":" << d.line << ": required member '" << d.name
                                               << "' is missing";
    for (const auto& d : doc.keys)
      if (d.required) {
        bool found = false;
        for (const auto& key : res.keys) found = found || key_matches(d.parts, key);
        EXPECT_TRUE(found) << doc_file << ":" << d.line << ": required key '" << d.name << "' is missing";
      }
  }
  // No stale rows: each documented member and key is emitted by one of the results.
  for (const auto& d : doc.members) {
    bool found = false;
    for (const auto& res : results)
      for (const auto& member : res.members) found = found || member_matches(d.name, member);
    EXPECT_TRUE(found) << doc_file << ":" << d.line << ": member '" << d.name << "' is documented but never written";
  }
  for (const auto& d : doc.keys) {
    bool found = false;
    for (const auto& res : results)
      for (const auto& key : res.keys) found = found || key_matches(d.parts, key);
    EXPECT_TRUE(found) << doc_file << ":" << d.line << ": key '" << d.name << "' is documented but never written";
  }
}

// The parser itself, on a made-up page: escaped pipes, wildcards, arrays of objects.
TEST(FileFormatDoc, ParserConventions) {
  tycho::test::temp_folder tmp;
  const std::string page = tmp.write("page.md",
                                     "# x\n\n| member | dtype | required | content |\n|---|---|---|---|\n"
                                     "| `a.npy` | \\|u1 | yes | one \\| two |\n| `opt.<name>.npy` | f4 | no | |\n\n"
                                     "| key | type | required | content |\n|---|---|---|---|\n"
                                     "| `p.list[].k` | string | yes | |\n| `arrays.<member>` | string | no | |\n");
  const doc_tables t = read_doc(page);
  ASSERT_EQ(t.members.size(), 2u);
  EXPECT_TRUE(t.members[0].required);
  EXPECT_FALSE(t.members[1].required);
  EXPECT_TRUE(member_matches(t.members[1].name, "opt.m.npy"));
  EXPECT_FALSE(member_matches(t.members[1].name, "opt.npy"));
  EXPECT_FALSE(member_matches(t.members[0].name, "aXnpy"));
  ASSERT_EQ(t.keys.size(), 2u);
  std::set<path> keys;
  flatten(nlohmann::json::parse(R"({"p": {"list": [{"k": 1}, {"k": 2, "j": [1, 2]}]}, "arrays": {"optimizer.object.m": "x"}})"),
          {}, keys);
  EXPECT_TRUE(keys.count({"p", "list[]", "k"}));
  EXPECT_TRUE(keys.count({"p", "list[]", "j"}));
  EXPECT_FALSE(keys.count({"p", "list[]", "j[]"}));
  EXPECT_TRUE(key_matches(t.keys[0].parts, {"p", "list[]", "k"}));
  EXPECT_TRUE(key_matches(t.keys[1].parts, {"arrays", "optimizer.object.m"}));
  EXPECT_FALSE(key_matches(t.keys[1].parts, {"arrays"}));
}

}  // namespace

namespace {

// The first cells (names in backticks) of the tables of `file` headed `header`.
std::vector<std::string> documented_names(const std::string& file, const std::string& header) {
  std::ifstream in(file);
  std::vector<std::string> lines, names;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  static const std::regex name_re("^`([^`]+)`$");
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    if (lines[i].rfind("|", 0) != 0 || lines[i + 1].rfind("|---", 0) != 0) continue;
    const auto head = cells(lines[i]);
    if (head.empty() || head[0] != header) continue;
    for (std::size_t r = i + 2; r < lines.size() && lines[r].rfind("|", 0) == 0; ++r) {
      std::smatch m;
      const auto row = cells(lines[r]);
      if (!row.empty() && std::regex_match(row[0], m, name_re)) names.push_back(m[1]);
    }
  }
  return names;
}

// A prepared file (tycho preprocess, patterns embedded, the COM computed): every member it holds
// is in the "prepared member" table, and every manifest key, at the top level and one level
// into `data`, is in the "prepared key" table; every documented top-level key is written.
TEST(FileFormatDoc, PreparedFileMembersAndKeysAreDocumented) {
  const std::string doc_file = tycho::test::source_dir() + "/docs/file-format.md";
  const auto members = documented_names(doc_file, "prepared member");
  const auto keys = documented_names(doc_file, "prepared key");
  ASSERT_GE(members.size(), 3u);
  ASSERT_GE(keys.size(), 10u);
  tycho::test::temp_folder tmp;
  const std::string out = tmp / "prepared.zip";
  auto r = tycho::test::run_command({tycho::test::tycho_exe(), "preprocess",
                                     tycho::test::source_dir() + "/examples/mos2.toml", "-q", "--save-raw-data",
                                     "--set", "preprocess.com_fit=\"plane\"", "-o", out});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  const saved s = inspect(out, "prepared");
  const auto manifest = nlohmann::json::parse(tycho::test::load_result(out).manifest_json);
  for (const auto& m : s.members)
    EXPECT_TRUE(std::find(members.begin(), members.end(), m) != members.end())
        << "member '" << m << "' of a prepared file is not in the prepared member table of " << doc_file;
  std::set<std::string> documented_top, documented_data;
  for (const auto& k : keys) {
    documented_top.insert(k.substr(0, k.find('.')));
    if (k.rfind("data.", 0) == 0) documented_data.insert(k.substr(5));
  }
  for (const auto& [k, v] : manifest.items()) {
    EXPECT_TRUE(documented_top.count(k)) << "manifest key '" << k << "' of a prepared file is not documented";
    if (k == "data")
      for (const auto& [dk, dv] : v.items())
        EXPECT_TRUE(documented_data.count(dk)) << "manifest key 'data." << dk << "' of a prepared file is not documented";
  }
  for (const auto& k : documented_top)
    EXPECT_TRUE(manifest.contains(k)) << "documented key '" << k << "' is not written in a prepared file";
}

}  // namespace
