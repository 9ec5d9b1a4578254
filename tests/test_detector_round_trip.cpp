// Each detector format carries a scan exactly: the shipped MoS2 counts (32 x 24 positions of
// 96 x 96) written by the tests' own writers as a Merlin .mib, an ARINA master + bitshuffle/LZ4
// data file, and a DM4 4-D data set reconstruct bit for bit as the EMD file does (3 iterations,
// one thread: object, probe, positions and loss history byte for byte); an EMPAD acquisition
// (128 x 128 frames, the counts in their middle) as the EMD file of the same frames. `tycho plan`
// lays out the same object from each, and `tycho preprocess --save-raw-data` writes the same
// patterns.
#include <gtest/gtest.h>

#include <tycho/core/array.hpp>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "arina_test_file.hpp"
#include "built_in_plugins.hpp"
#include "cxi_test_file.hpp"
#include "dm_test_file.hpp"
#include "emd_test_file.hpp"
#include "format_samples.hpp"
#include "mib_test_file.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"
#include "zip_members.hpp"

using tycho::test::run_command;

namespace {

// examples/mos2.toml's settings, calibrations in the config (the formats record them in other
// units or not at all), one thread, no previews.
std::string config_text(const std::string& data, int iterations) {
  return "[data]\n" + data +
         "scan_step_A = 0.5\ndetector_pixel_invA = 0.06\n"
         "\n[optics]\nenergy_eV = 80e3\nsemiangle_mrad = 25.0\nC10_A = -150.0\n"
         "\n[preprocess]\nobject_padding_px = 16\nscan_origin_A = [17.0, 19.0]\n"
         "\n[reconstruct]\nengine = \"cpu\"\nthreads = 1\niterations = " +
         std::to_string(iterations) +
         "\nbatch_size = 128\nloss = \"amplitude\"\nseed = 0\n"
         "\n[reconstruct.object]\noptimizer = \"adam\"\nlearning_rate = 5e-3\nschedule = \"cosine\"\n"
         "\n[reconstruct.probe]\noptimizer = \"adam\"\nlearning_rate = 5e-3\nschedule = \"cosine\"\n"
         "\n[output]\npreviews = false\n";
}

class DetectorRoundTrip : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(tycho::test::mos2_counts().size(), std::size_t(768) * 96 * 96); }

  std::string write_formats() {
    const auto& c = tycho::test::mos2_counts();
    std::vector<uint32_t> counts(c.begin(), c.end());
    // Merlin: 12-bit counts as U16 frames, the scan shape in the .hdr.
    tycho::test::mib_options o;
    o.rows = o.cols = 96;
    tycho::test::write_bytes(tmp_ / "mos2.mib", tycho::test::mib_bytes(o, counts));
    tycho::test::write_hdr(tmp_ / "mos2.hdr", {{"ScanX", "24"}, {"ScanY", "32"}});
    // ARINA: uint16 frames in bitshuffle/LZ4 chunks behind an external link, the metadata beside.
    tycho::test::arina_scan a;
    a.frames = 768;
    a.rows = a.cols = 96;
    a.values = counts;
    a.files = 1;
    a.spec.file_type = H5T_STD_U16LE;
    a.spec.mem_type = H5T_NATIVE_UINT16;
    a.scan_x = 24;
    a.scan_y = 32;
    EXPECT_FALSE(tycho::test::write_arina_scan(tmp_.path(), "mos2", a).empty());
    // DM4: (detector x, detector y, scan x, scan y).
    tycho::test::dm_image_spec d;
    d.data_type = 10;
    d.dims = {96, 96, 24, 32};
    d.data.assign(reinterpret_cast<const char*>(c.data()), c.size() * 2);
    d.order_swapped = 1;
    d.format = "Diffraction image";
    tycho::test::write_sample(tmp_.path() / "mos2.dm4", tycho::test::dm_bytes(4, true, {d}));
    // EMPAD: 128 x 130 float32 frames, the counts in the middle 96 x 96, a footer; and the same
    // 128 x 128 frames as an EMD file.
    std::string raw;
    std::vector<float> framed(std::size_t(768) * 128 * 128, 0.0f);
    for (int64_t p = 0; p < 768; ++p) {
      for (int64_t r = 0; r < 96; ++r)
        for (int64_t q = 0; q < 96; ++q)
          framed[std::size_t((p * 128 + r + 16) * 128 + q + 16)] = float(c[std::size_t((p * 96 + r) * 96 + q)]);
      raw.append(reinterpret_cast<const char*>(&framed[std::size_t(p * 128 * 128)]), 128 * 128 * 4);
      raw.append(std::string(2 * 128 * 4, '\0'));
    }
    tycho::test::write_sample(tmp_.path() / "scan_x24_y32.raw", raw);
    tycho::test::write_sample(tmp_.path() / "mos2_empad.xml", "<root><raw_file filename=\"scan_x24_y32.raw\"/></root>");
    tycho::test::emd_file_spec spec{{32, 24, 128, 128}, tycho::test::emd_element::float32, framed.data()};
    EXPECT_TRUE(tycho::test::write_emd_file(tmp_ / "framed.h5", spec));
    return tmp_ / "";
  }

  void run(const std::vector<std::string>& argv) {
    auto r = run_command(argv);
    ASSERT_TRUE(r.exited_with(0)) << r.describe();
  }

  tycho::test::temp_folder tmp_;
};

struct format_case {
  const char* name;
  std::string data;     // [data] lines
  std::string against;  // the EMD run it must equal
};

std::vector<format_case> cases(const tycho::test::temp_folder& tmp) {
  const std::string emd = "source = \"emd\"\npath = \"" + tycho::test::example_data("mos2_80kV_32x24_counts.h5") + "\"\n";
  return {{"mib", "source = \"mib\"\npath = \"" + (tmp / "mos2.mib") + "\"\n", emd},
          {"arina", "source = \"arina\"\npath = \"" + (tmp / "mos2_master.h5") + "\"\n", emd},
          {"dm", "source = \"dm\"\npath = \"" + (tmp / "mos2.dm4") + "\"\n", emd},
          {"empad", "source = \"empad\"\npath = \"" + (tmp / "mos2_empad.xml") + "\"\n",
           "source = \"emd\"\npath = \"" + (tmp / "framed.h5") + "\"\n"}};
}

TEST_F(DetectorRoundTrip, EachFormatReconstructsAsTheEmdFileBitForBit) {
  write_formats();
  std::map<std::string, std::string> emd_runs;  // [data] of an EMD run -> its result (one run each)
  for (const format_case& c : cases(tmp_)) {
    SCOPED_TRACE(c.name);
    const std::string zip = tmp_ / (std::string(c.name) + ".zip");
    std::string& emd_zip = emd_runs[c.against];
    if (emd_zip.empty()) {
      emd_zip = tmp_ / (std::string(c.name) + "_emd.zip");
      run({tycho::test::tycho_exe(), "reconstruct",
           tmp_.write(std::string(c.name) + "_emd.toml", config_text(c.against, 3)), "-q", "-o", emd_zip});
    }
    run({tycho::test::tycho_exe(), "reconstruct", tmp_.write(std::string(c.name) + ".toml", config_text(c.data, 3)), "-q",
         "-o", zip});
    auto a = tycho::test::load_result(emd_zip);
    auto b = tycho::test::load_result(zip);
    for (const char* name : {"positions_px", "object", "probe", "loss_history"}) {
      const auto& x = a.array(name, "emd");
      const auto& y = b.array(name, c.name);
      EXPECT_EQ(x.shape, y.shape) << name;
      EXPECT_TRUE(x.bytes == y.bytes) << name << " differs from the EMD run's";
    }
  }
}

// `tycho plan` lays out the same object from each format as from the EMD file, and `tycho
// preprocess --save-raw-data` writes the same patterns.
TEST_F(DetectorRoundTrip, PlanAndPreprocessWorkOnEachFormat) {
  write_formats();
  const auto object_line = [&](const std::string& name, const std::string& data) {
    auto r = run_command({tycho::test::tycho_exe(), "plan", tmp_.write(name + "_plan.toml", config_text(data, 1))});
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
    for (const auto& line : r.out_lines())
      if (line.rfind("object", 0) == 0) return line;
    ADD_FAILURE() << "no object line in:\n" << r.out;
    return std::string();
  };
  std::map<std::string, std::string> emd_prepared;  // [data] of an EMD file -> its prepared file
  for (const format_case& c : cases(tmp_)) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(object_line(c.name, c.data), object_line(std::string(c.name) + "_emd", c.against));
    const std::string p = tmp_ / (std::string(c.name) + "_prepared.zip");
    run({tycho::test::tycho_exe(), "preprocess", tmp_.write(std::string(c.name) + "_pre.toml", config_text(c.data, 1)), "-q",
         "--save-raw-data", "-o", p});
    std::string& q = emd_prepared[c.against];
    if (q.empty()) {
      q = tmp_ / (std::string(c.name) + "_emd_prepared.zip");
      run({tycho::test::tycho_exe(), "preprocess", tmp_.write(std::string(c.name) + "_emd_pre.toml", config_text(c.against, 1)),
           "-q", "--save-raw-data", "-o", q});
    }
    const auto x = tycho::test::read_zip_member(p, "patterns.npy"), y = tycho::test::read_zip_member(q, "patterns.npy");
    ASSERT_TRUE(x && y);
    // Counts where the source delivers counts: uint8, as no MoS2 count passes 255; EMPAD's float32
    // stays float32.
    const bool u8 = x->substr(0, 128).find("'descr': '|u1'") != std::string::npos;
    const bool f4 = x->substr(0, 128).find("'descr': '<f4'") != std::string::npos;
    EXPECT_TRUE(std::string(c.name) == "empad" ? f4 : u8) << x->substr(0, 80);
    EXPECT_GT(x->size(), std::size_t(768) * 96 * 96 * (u8 ? 1 : 4));
    EXPECT_TRUE(*x == *y) << "the prepared patterns differ from the EMD file's";
  }
}

}  // namespace
