// `tycho preprocess` streams the patterns from the source into the prepared file as they are
// preprocessed (host/src/data/prepare_stream.hpp): its members are those the in-memory path
// writes, byte for byte (patterns, com, the manifest but its provenance time), for simulated
// counts (uint16), simulated fractions through a stage that crops, recentres and normalises
// (float32), and the MoS2 counts of an EMD file with a centre-of-mass fit that only measures; a
// run from the uint16 file, in memory or read per batch from disk, is the run from the config.
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/host/prepared.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/host/session.hpp>

#include <nlohmann/json.hpp>

#include <sstream>
#include <string>

#include "built_in_plugins.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"
#include "zip_members.hpp"

namespace {

using tycho::host::prepare_mode;

// Both ways of `tycho preprocess` on `config_text`, their members compared; returns the streamed
// file's path. `want_descr`: its patterns' npy dtype text; "" for a file that does not embed them
// (--save-raw-data not given: the streamed way then only counts the last pass, for the totals).
std::string prepare_both_ways(const tycho::test::temp_folder& tmp, const std::string& config_text,
                              const std::string& want_descr) {
  const bool embed = !want_descr.empty();
  const std::string config = tmp.write("c.toml", config_text);
  std::ostringstream out;
  for (const auto how : {prepare_mode::in_memory, prepare_mode::streamed}) {
    auto doc = tycho::config_document::load_file(config);
    const std::string path = tmp / (how == prepare_mode::streamed ? "streamed.zip" : "memory.zip");
    EXPECT_EQ(tycho::host::preprocess_command(std::move(doc), tycho::host::registry::global(), path, embed, out,
                                              TYCHO_SAVE_OVERWRITE, how),
              0);
  }
  for (const char* member : {"patterns.npy", "com.npy"}) {
    const auto a = tycho::test::read_zip_member(tmp / "memory.zip", member);
    const auto b = tycho::test::read_zip_member(tmp / "streamed.zip", member);
    EXPECT_EQ(a.has_value(), b.has_value()) << member;
    if (a && b) EXPECT_TRUE(*a == *b) << member << " differs (" << a->size() << " and " << b->size() << " bytes)";
  }
  auto manifest = [&](const char* file) {
    auto j = nlohmann::json::parse(*tycho::test::read_zip_member(tmp / file, "manifest.json"));
    j.erase("provenance");  // the time it was written
    return j;
  };
  EXPECT_EQ(manifest("memory.zip"), manifest("streamed.zip"));
  if (!embed) {
    EXPECT_FALSE(tycho::test::read_zip_member(tmp / "streamed.zip", "patterns.npy").has_value());
    EXPECT_GT(manifest("streamed.zip")["data"]["mean_total_intensity"].get<double>(), 0.0);
    return tmp / "streamed.zip";
  }
  const auto patterns = *tycho::test::read_zip_member(tmp / "streamed.zip", "patterns.npy");
  EXPECT_NE(patterns.substr(0, 128).find(want_descr), std::string::npos) << patterns.substr(0, 80);
  return tmp / "streamed.zip";
}

const std::string k_simulated = "[data]\nsource = \"simulate\"\nscan_shape = [13, 11]\ndetector_shape = [48, 48]\n"
                                "threads = 2\n";

// Counts are stored as uint16, or as uint8 where no count can pass 255 (the source's largest
// value; half the file and the disk's reads), and read back as the same uint16 counts.
void expect_counts_stored_as(const std::string& dose, const std::string& want_descr) {
  SCOPED_TRACE("dose " + dose);
  tycho::test::temp_folder tmp;
  // The geometry search off: at the low dose the parallax cannot measure the geometry and a run
  // from the config would search it, where a run from the prepared file keeps the file's.
  const std::string data = k_simulated + "dose_e_per_A2 = " + dose + "\n[preprocess]\nscan_geometry_search = false\n";
  const std::string prepared = prepare_both_ways(tmp, data, want_descr);
  // A run from the prepared counts, in memory and read per batch from disk, is the run from the
  // config (whose source delivers the same counts), bit for bit.
  const std::string config = tmp.write("run.toml", data);
  std::vector<std::vector<double>> losses;
  std::vector<std::string> objects;
  for (const std::string residency : {"", "device", "disk"}) {
    auto doc = tycho::config_document::load_file(config);
    doc.set_from_text("reconstruct.iterations=3");
    doc.set_from_text("reconstruct.batch_size=32");
    doc.set_from_text("reconstruct.threads=2");
    doc.set_from_text("output.previews=false");
    if (!residency.empty()) doc.set_from_text("reconstruct.target_residency=\"" + residency + "\"");
    tycho::host::session s(std::move(doc), tycho::host::registry::global(), residency.empty() ? "" : prepared);
    s.run(0, {});
    losses.push_back(s.loss_history());
    const tycho::owned_array object = s.get("object");
    objects.push_back(std::string(object.bytes.begin(), object.bytes.end()));
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(losses[0], losses[2]);
  EXPECT_TRUE(objects[0] == objects[1]);
  EXPECT_TRUE(objects[0] == objects[2]);
}

TEST(PrepareStream, SimulatedCountsAreWrittenAsTheInMemoryPathWritesThemUint8WhenTheyFit) {
  expect_counts_stored_as("2e4", "'descr': '|u1'");    // no pixel over 255 counts
  expect_counts_stored_as("2.5e5", "'descr': '<u2'");  // some over 255
}

TEST(PrepareStream, AStageThatCropsRecentresAndNormalisesWritesTheInMemoryFloat32) {
  tycho::test::temp_folder tmp;
  prepare_both_ways(tmp,
                    k_simulated + "[preprocess]\ncrop_detector = [40, 40]\ncom_fit = \"plane\"\nrecentre = true\n"
                                  "normalise = true\n",
                    "'descr': '<f4'");
  prepare_both_ways(tmp,
                    k_simulated + "[preprocess]\ncrop_detector = [40, 40]\ncom_fit = \"plane\"\nrecentre = true\n"
                                  "normalise = true\n",
                    "");
}

TEST(PrepareStream, TheMoS2CountsOfAnEmdFileWithAFitThatOnlyMeasures) {
  tycho::test::temp_folder tmp;
  const std::string data = tycho::test::source_dir() + "/examples/data/mos2_80kV_32x24_counts.h5";
  prepare_both_ways(tmp,
                    "[data]\nsource = \"emd\"\npath = \"" + data +
                        "\"\n[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 25.0\nC10_A = -150.0\n"
                        "[preprocess]\ncom_fit = \"plane\"\n",
                    "'descr': '|u1'");  // no MoS2 count passes 255
  prepare_both_ways(tmp,
                    "[data]\nsource = \"emd\"\npath = \"" + data +
                        "\"\n[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 25.0\nC10_A = -150.0\n"
                        "[preprocess]\ncom_fit = \"plane\"\n",
                    "");
}

}  // namespace
