// The guard process of the HDF5 sources (sdk/include/tycho/sdk/hdf5/h5_guard.hpp, issue 12):
// a file that crashes libhdf5 itself is refused with a message naming it, and the process that
// opened it lives on. The crafted file is real: an EMD file whose calibration unit (a
// variable-length string) points into a global heap whose object size was rewritten to 2^40
// bytes; libhdf5 1.10.8 follows it and dies of SIGSEGV in H5HG_read when read in-process.
#include <gtest/gtest.h>

#include <tycho/core/last_error.hpp>
#include <tycho/sdk/error.hpp>
#include <tycho/sdk/hdf5/h5_guard.hpp>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"
#include "emd_test_file.hpp"
#include "run_command.hpp"
#include "source_under_test.hpp"
#include "test_paths.hpp"

namespace {

namespace fs = std::filesystem;

std::string guard_error(const std::function<void()>& walk, double timeout_s = 60) {
  try {
    tycho::h5::guard_metadata_walk("crafted.h5", walk, timeout_s);
  } catch (const tycho::sdk::error& e) {
    EXPECT_EQ(e.status, TYCHO_ERR_BAD_DATA);
    return e.what();
  }
  return "";
}

TEST(Hdf5Guard, AWalkThatFinishesOrThrowsLetsTheOpenProceed) {
  EXPECT_EQ(guard_error([] {}), "");
  // An ordinary error: the source repeats the walk in-process and reports it there.
  EXPECT_EQ(guard_error([] { throw std::runtime_error("no such dataset"); }), "");
}

TEST(Hdf5Guard, ACrashInTheWalkIsRefusedNamingTheFile) {
  const std::string why = guard_error([] { raise(SIGSEGV); });
  EXPECT_NE(why.find("'crafted.h5'"), std::string::npos) << why;
  EXPECT_NE(why.find("crashed reading this file's metadata"), std::string::npos) << why;
  EXPECT_NE(why.find("tycho does not read it"), std::string::npos) << why;
}

TEST(Hdf5Guard, AWalkThatHangsIsStoppedAtTheLimit) {
  const std::string why = guard_error([] { pause(); }, 0.3);
  EXPECT_NE(why.find("did not finish reading this file's metadata in 0.3 s"), std::string::npos) << why;
}

TEST(Hdf5Guard, SwitchedOffItRunsNoChild) {
  ASSERT_EQ(setenv("TYCHO_HDF5_GUARD", "0", 1), 0);
  const std::string why = guard_error([] { raise(SIGSEGV); });  // not run at all
  unsetenv("TYCHO_HDF5_GUARD");
  EXPECT_EQ(why, "");
}

// An EMD file with a calibration whose unit string's global-heap object claims 2^40 bytes.
std::string write_heap_corrupted_emd(const fs::path& dir) {
  const std::string path = (dir / "heap_corrupted.h5").string();
  std::vector<float> values(2 * 2 * 8 * 8, 1.f);
  tycho::test::emd_file_spec spec;
  spec.dims = {2, 2, 8, 8};
  spec.values = values.data();
  spec.calibration = tycho::test::emd_calibration{0.5, "A", 0.02, "A^-1"};
  std::string why;
  if (!tycho::test::write_emd_file(path, spec, &why)) ADD_FAILURE() << why;
  std::vector<char> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // A global heap collection: "GCOL", version, 3 reserved, collection size (8); then each
  // object: index (2), reference count (2), reserved (4), size (8), data padded to 8 bytes
  // (HDF5 file format specification, "Global Heap"). The object holding R_pixel_units' "A"
  // gets the size 2^40.
  const std::string signature = "GCOL";
  const auto at = std::search(bytes.begin(), bytes.end(), signature.begin(), signature.end());
  bool patched = false;
  if (at != bytes.end()) {
    const std::size_t start = std::size_t(at - bytes.begin());
    uint64_t collection = 0;
    std::memcpy(&collection, &bytes[start + 8], 8);  // little-endian, as HDF5 stores it
    for (std::size_t p = start + 16; p + 16 < std::min(bytes.size(), start + collection);) {
      uint16_t index = 0;
      uint64_t size = 0;
      std::memcpy(&index, &bytes[p], 2);
      std::memcpy(&size, &bytes[p + 8], 8);
      if (index == 0 || size > bytes.size()) break;
      if (size == 1 && bytes[p + 16] == 'A') {
        const uint64_t huge = uint64_t(1) << 40;
        std::memcpy(&bytes[p + 8], &huge, 8);
        patched = true;
        break;
      }
      p += 16 + (size + 7) / 8 * 8;
    }
  }
  if (!patched) ADD_FAILURE() << "no global heap object \"A\" in " << path;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

class Hdf5GuardFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tycho_hdf5_guard_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(Hdf5GuardFile, AFileThatCrashesLibhdf5IsRefusedAndTheCallerLivesOn) {
  const std::string path = write_heap_corrupted_emd(dir_);
  tycho::test::source_under_test source;
  EXPECT_EQ(source.open(tycho::test::plugins(), "emd", "path = '" + path + "'\n", ""), TYCHO_ERR_BAD_DATA);
  const std::string why = tycho::last_error();
  EXPECT_NE(why.find("'" + path + "'"), std::string::npos) << why;
  EXPECT_NE(why.find("crashed reading this file's metadata"), std::string::npos) << why;
}

TEST_F(Hdf5GuardFile, TheCommandSaysWhyAndWritesNothing) {
  const std::string path = write_heap_corrupted_emd(dir_);
  const std::string config = (dir_ / "run.toml").string();
  std::ofstream(config) << "[data]\nsource = \"emd\"\npath = \"" << path << "\"\n";
  const std::string out = (dir_ / "result.zip").string();
  auto r = tycho::test::run_command({tycho::test::tycho_exe(), "reconstruct", config, "-o", out});
  EXPECT_TRUE(r.exited_with(2)) << r.status_text() << "\n" << r.err;
  EXPECT_NE(r.err.find("crashed reading this file's metadata"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
