// Typed settings (tycho/host/settings.hpp, tycho_component::settings of ABI 1.1): a third-party
// component's declared key refuses a value of another type naming the declared type, a value
// out of range or not allowed; `tycho plugins --keys` prints types, defaults and docs; and
// docs/config-reference.md agrees with the declarations of the runtime's tables and of the
// built-in components it documents (every declared key has a row with the type and default,
// every row names a declared key).
#include <gtest/gtest.h>

#include <tycho/host/registry.hpp>
#include <tycho/host/settings.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

using tycho::test::run_command;

namespace {

std::string example_config() { return tycho::test::source_dir() + "/examples/mos2.toml"; }
const std::vector<std::string> k_env = {std::string("TYCHO_PLUGIN_PATH=") + TYCHO_TEST_PLUGIN_DIR};

// `tycho plan` with the test plugin's engine and one --set.
tycho::test::command_result plan_with(const std::string& set) {
  return run_command({tycho::test::tycho_exe(), "plan", example_config(), "--device-memory", "141", "--set",
                      "reconstruct.engine=\"thirdparty_planned\"", "--set", set},
                     k_env);
}

TEST(Settings, ThirdPartyKeyOfAnotherTypeIsRefusedNamingTheDeclaredType) {
  auto r = plan_with("reconstruct.widgets=\"three\"");
  ASSERT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_NE(r.err.find("config key 'widgets' in [reconstruct] must be an integer (declared by engine "
                       "'thirdparty_planned'), got a string"),
            std::string::npos)
      << r.err;
  auto f = plan_with("reconstruct.widgets=2.5");
  ASSERT_TRUE(f.exited_with(2)) << f.describe();
  EXPECT_NE(f.err.find("config key 'widgets' in [reconstruct] must be an integer (declared by engine "
                       "'thirdparty_planned'), got a float"),
            std::string::npos)
      << f.err;
}

TEST(Settings, ThirdPartyRangeAndAllowedValuesAreChecked) {
  auto low = plan_with("reconstruct.widgets=0");
  ASSERT_TRUE(low.exited_with(2)) << low.describe();
  EXPECT_NE(low.err.find("config key 'widgets' in [reconstruct] must be >= 1 (declared by engine "
                         "'thirdparty_planned'), got 0"),
            std::string::npos)
      << low.err;
  auto mode = plan_with("reconstruct.mode=\"slow\"");
  ASSERT_TRUE(mode.exited_with(2)) << mode.describe();
  EXPECT_NE(mode.err.find("config key 'mode' in [reconstruct] must be \"fast\" or \"careful\" (declared by engine "
                          "'thirdparty_planned'), got \"slow\""),
            std::string::npos)
      << mode.err;
  // Good values pass: the plan is made.
  auto ok = plan_with("reconstruct.widgets=7");
  EXPECT_TRUE(ok.exited_with(0)) << ok.describe();
}

TEST(Settings, BuiltInKeysAreCheckedTheSameWay) {
  auto r = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--set", "reconstruct.threads=\"two\""});
  ASSERT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_NE(r.err.find("config key 'threads' in [reconstruct] must be an integer (declared by engine 'cpu'), got a "
                       "string"),
            std::string::npos)
      << r.err;
  auto b = run_command({tycho::test::tycho_exe(), "plan", example_config(), "--set",
                        "reconstruct.object.beta1=1.5"});
  ASSERT_TRUE(b.exited_with(2)) << b.describe();
  EXPECT_NE(b.err.find("config key 'beta1' in [reconstruct.object] must be >= 0 and < 1, i.e. in [0, 1) (declared by optimizer "
                       "'adam'), got 1.5"),
            std::string::npos)
      << b.err;
}

TEST(Settings, PluginsKeysPrintsTypesDefaultsAndDocs) {
  auto cpu = run_command({tycho::test::tycho_exe(), "plugins", "--keys", "cpu"});
  ASSERT_TRUE(cpu.exited_with(0)) << cpu.describe();
  EXPECT_NE(cpu.out.find("engine cpu "), std::string::npos) << cpu.out;
  EXPECT_NE(cpu.out.find("  threads              integer; default 0; >= 0\n      OpenMP threads for a batch"),
            std::string::npos)
      << cpu.out;
  EXPECT_NE(cpu.out.find("  fft_planning         string; default \"measure\"; one of \"estimate\" or \"measure\"\n"),
            std::string::npos)
      << cpu.out;
  auto third = run_command({tycho::test::tycho_exe(), "plugins", "--keys", "thirdparty_planned"}, k_env);
  ASSERT_TRUE(third.exited_with(0)) << third.describe();
  EXPECT_NE(third.out.find("  widgets  integer; default 3; >= 1\n      how many widgets the engine would use\n"),
            std::string::npos)
      << third.out;
  auto table = run_command({tycho::test::tycho_exe(), "plugins", "--keys", "[parallel]"});
  ASSERT_TRUE(table.exited_with(0)) << table.describe();
  EXPECT_NE(table.out.find("  timeout_s        number, s; default 600; >= 1 and <= 1000000000\n"), std::string::npos)
      << table.out;
  auto none = run_command({tycho::test::tycho_exe(), "plugins", "--keys", "nonesuch"});
  EXPECT_TRUE(none.exited_with(2)) << none.describe();
  EXPECT_NE(none.err.find("no component or runtime table named 'nonesuch'"), std::string::npos) << none.err;
}

// ---- docs/config-reference.md against the declarations

struct doc_row {
  std::string type, default_text;
  std::string only;  // "object" or "probe" when the meaning starts "**object only**" / "**probe only**"
};
// Section title (a "## " or "### " heading) → the rows of its tables, by key.
std::map<std::string, std::map<std::string, doc_row>> doc_sections() {
  std::ifstream in(tycho::test::source_dir() + "/docs/config-reference.md");
  std::map<std::string, std::map<std::string, doc_row>> out;
  std::string section, line;
  const std::regex row(R"(^\| `([A-Za-z0-9_]+)` \| ([^|]*) \| ((?:[^|\\]|\\.)*) \|)");
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0 || line.rfind("### ", 0) == 0) {
      section = line.substr(line.find(' ') + 1);
      continue;
    }
    std::smatch m;
    if (std::regex_search(line, m, row)) {
      const std::string meaning = m.suffix().str();
      const std::string only = meaning.rfind(" **object only**", 0) == 0 ? "object"
                               : meaning.rfind(" **probe only**", 0) == 0 ? "probe"
                                                                          : "";
      out[section][m[1]] = {m[2], m[3], only};
    }
  }
  return out;
}

// "### `engine = "cpu"`": how the reference titles a component's keys.
std::string cat_title(const std::string& kind, const std::string& name) {
  const std::string key = kind == "source" ? "source" : kind;
  return "`" + key + " = \"" + name + "\"`";
}

std::string without_backticks(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '`'), s.end());
  return s;
}

// The doc's type column starts with the declared type ("boolean" for bool, "array" for lists).
bool type_matches(const std::string& doc_type, tycho_setting_type type) {
  switch (type) {
    case TYCHO_SETTING_STRING: return doc_type.rfind("string", 0) == 0;
    case TYCHO_SETTING_INTEGER: return doc_type.rfind("integer", 0) == 0;
    case TYCHO_SETTING_NUMBER: return doc_type.rfind("number", 0) == 0;
    case TYCHO_SETTING_BOOL: return doc_type.rfind("bool", 0) == 0;
    case TYCHO_SETTING_INTEGER_LIST:
    case TYCHO_SETTING_NUMBER_LIST:
    case TYCHO_SETTING_STRING_LIST: return doc_type.rfind("array", 0) == 0;
    case TYCHO_SETTING_MIXED: return true;
  }
  return false;
}

void expect_documented(const std::map<std::string, doc_row>& rows, const std::vector<tycho::host::setting_decl>& decls,
                       const std::string& where) {
  std::set<std::string> declared;
  for (const auto& d : decls) {
    declared.insert(d.key);
    auto it = rows.find(d.key);
    if (it == rows.end()) {
      ADD_FAILURE() << where << ": declared key '" << d.key << "' has no row in docs/config-reference.md";
      continue;
    }
    EXPECT_TRUE(type_matches(it->second.type, d.type))
        << where << " " << d.key << ": declared " << tycho::host::setting_type_name(d.type) << ", documented '"
        << it->second.type << "'";
    // A mixed key's forms (what `tycho plugins --keys` prints) are the reference's type column.
    if (!d.forms.empty())
      EXPECT_EQ(without_backticks(it->second.type), d.forms) << where << " " << d.key << ": declared forms";
    if (d.default_text)
      EXPECT_EQ(without_backticks(it->second.default_text).rfind(*d.default_text, 0), 0u)
          << where << " " << d.key << ": declared default " << *d.default_text << ", documented '"
          << it->second.default_text << "'";
  }
  for (const auto& [key, row] : rows)
    EXPECT_TRUE(declared.count(key)) << where << ": documented key '" << key << "' is not declared";
}

TEST(Settings, ConfigReferenceAgreesWithTheRuntimesDeclarations) {
  const auto sections = doc_sections();
  std::size_t checked = 0;
  for (const auto& table : tycho::host::host_setting_tables()) {
    // "[reconstruct.object]" and "[reconstruct.probe]" share one section (the object has one key more).
    const std::string title = table == "reconstruct.object" || table == "reconstruct.probe"
                                  ? "`[reconstruct.object]` and `[reconstruct.probe]`"
                                  : "`[" + table + "]`";
    auto it = sections.find(title);
    ASSERT_NE(it, sections.end()) << "no section " << title;
    auto rows = it->second;
    // A row whose meaning starts "**object only**" belongs to [reconstruct.object] alone, and the
    // same for the probe.
    const std::string other = table == "reconstruct.probe" ? "object" : table == "reconstruct.object" ? "probe" : "";
    for (auto r = rows.begin(); r != rows.end();) r = !other.empty() && r->second.only == other ? rows.erase(r) : std::next(r);
    expect_documented(rows, tycho::host::host_settings(table), title);
    checked += tycho::host::host_settings(table).size();
  }
  EXPECT_GE(checked, 40u);
}

// The section titled `title`, or "`title`: what it is" (the sources' headings).
std::map<std::string, std::map<std::string, doc_row>>::const_iterator find_section(
    const std::map<std::string, std::map<std::string, doc_row>>& sections, const std::string& title) {
  auto it = sections.find(title);
  if (it != sections.end()) return it;
  for (it = sections.begin(); it != sections.end(); ++it)
    if (it->first.rfind(title + ": ", 0) == 0) return it;
  return sections.end();
}

TEST(Settings, ConfigReferenceAgreesWithTheBuiltInComponentsDeclarations) {
  const auto sections = doc_sections();
  const auto& reg = tycho::test::plugins();
  int checked = 0;
  std::set<std::string> kinds;
  for (const auto& c : reg.components()) {
    if (c.settings.empty()) continue;
    const std::string kind = tycho::host::kind_name(c.kind);
    const std::string title = cat_title(kind, c.name);
    auto it = find_section(sections, title);
    if (it == sections.end()) {
      ADD_FAILURE() << kind << " '" << c.name << "' declares keys but docs/config-reference.md has no section "
                    << title;
      continue;
    }
    expect_documented(it->second, c.settings, title);
    ++checked;
    kinds.insert(kind);
  }
  // cpu, adam, sgd, poisson, emd, npy, cxi, hdf5, simulate (and nccl with CUDA).
  EXPECT_GE(checked, 9);
  for (const char* kind : {"source", "engine", "loss", "optimizer"})
    EXPECT_TRUE(kinds.count(kind)) << "no " << kind << " with keys checked";
}

// Every built-in component declares its keys: none is left to "(not declared: any type)", and a
// component without keys declares that too (an empty array: `tycho plugins --keys` says "(no keys)").
TEST(Settings, EveryBuiltInComponentDeclaresItsKeys) {
  const auto& reg = tycho::test::plugins();
  int seen = 0;
  for (const auto& c : reg.components()) {
    ++seen;
    std::set<std::string> declared;
    for (const auto& d : c.settings) declared.insert(d.key);
    for (const auto& key : c.config_keys)
      if (key != "batch_size")  // the runtime's key, which the cuda engine also reads
        EXPECT_TRUE(declared.count(key)) << tycho::host::kind_name(c.kind) << " '" << c.name << "' reads '" << key
                                         << "' without declaring it";
  }
  EXPECT_GE(seen, 12);
  for (const char* name : {"intensity", "mpi", "zip"}) {
    auto r = run_command({tycho::test::tycho_exe(), "plugins", "--keys", name});
    if (std::string(name) == "mpi" && r.out.find("reducer mpi ") == std::string::npos) continue;  // no MPI here
    ASSERT_TRUE(r.exited_with(0)) << r.describe();
    EXPECT_NE(r.out.find("\n  (no keys)\n"), std::string::npos) << r.out;
  }
}

// A wrongly typed value is refused naming the declared type and the component, for each kind
// that has keys; the reducer's and the format's declarations are printed.
TEST(Settings, EachKindsKeysAreTypedAndPrinted) {
  auto plan = [](std::vector<std::string> sets) {
    std::vector<std::string> args = {tycho::test::tycho_exe(), "plan", example_config()};
    for (auto& s : sets) {
      args.push_back("--set");
      args.push_back(std::move(s));
    }
    return run_command(args);
  };
  auto source = plan({"data.dataset=3"});
  ASSERT_TRUE(source.exited_with(2)) << source.describe();
  EXPECT_NE(source.err.find("config key 'dataset' in [data] must be a string (declared by source 'emd'), got an "
                            "integer"),
            std::string::npos)
      << source.err;
  auto npy = plan({"data.source=\"npy\"", "data.centred=\"yes\""});
  ASSERT_TRUE(npy.exited_with(2)) << npy.describe();
  EXPECT_NE(npy.err.find("config key 'centred' in [data] must be a bool (declared by source 'npy'), got a string"),
            std::string::npos)
      << npy.err;
  auto loss = plan({"reconstruct.loss=\"poisson\"", "reconstruct.poisson_epsilon=\"small\""});
  ASSERT_TRUE(loss.exited_with(2)) << loss.describe();
  EXPECT_NE(loss.err.find("config key 'poisson_epsilon' in [reconstruct] must be a number (declared by loss "
                          "'poisson'), got a string"),
            std::string::npos)
      << loss.err;

  auto cxi = run_command({tycho::test::tycho_exe(), "plugins", "--keys", "cxi"});
  ASSERT_TRUE(cxi.exited_with(0)) << cxi.describe();
  EXPECT_NE(cxi.out.find("  probe_position      array of strings; default [\"-y\", \"-x\"]\n"), std::string::npos)
      << cxi.out;
  auto simulate = run_command({tycho::test::tycho_exe(), "plugins", "--keys", "simulate"});
  ASSERT_TRUE(simulate.exited_with(0)) << simulate.describe();
  EXPECT_NE(simulate.out.find("  energy_eV            number, eV; default 80e3; > 0\n      beam energy\n"),
            std::string::npos)
      << simulate.out;
  auto nccl = run_command({tycho::test::tycho_exe(), "plugins", "--keys", "nccl"});
  if (nccl.exited_with(0))  // built with CUDA and NCCL
    EXPECT_NE(nccl.out.find("  timeout_s  number, s; default 600; > 0\n"), std::string::npos) << nccl.out;
  auto zip = run_command({tycho::test::tycho_exe(), "plugins", "--keys", "zip"});
  ASSERT_TRUE(zip.exited_with(0)) << zip.describe();
  EXPECT_NE(zip.out.find("format zip 1.0.0"), std::string::npos) << zip.out;
}

}  // namespace

// `tycho plugins --keys TABLE` prints a runtime key of several types by its forms, never "mixed".
TEST(Settings, EveryRuntimeKeyOfSeveralTypesNamesItsForms) {
  std::size_t mixed = 0;
  for (const auto& table : tycho::host::host_setting_tables())
    for (const auto& d : tycho::host::host_settings(table))
      if (d.type == TYCHO_SETTING_MIXED) {
        ++mixed;
        EXPECT_FALSE(d.forms.empty()) << "[" << table << "] " << d.key << " declares no forms";
      }
  EXPECT_GE(mixed, 7u);
  const std::string listing = tycho::host::settings_text(tycho::host::host_settings("optics"));
  EXPECT_NE(listing.find("refine_C10             boolean or \"auto\"; default \"auto\""), std::string::npos) << listing;
  EXPECT_EQ(listing.find("mixed"), std::string::npos) << listing;
}
