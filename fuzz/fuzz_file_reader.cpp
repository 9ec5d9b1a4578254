// One libFuzzer harness for every file reader, compiled once and linked as one executable per
// reader, tycho_fuzz_<reader>, which picks the reader by its own name. The input becomes a file
// on /dev/shm that the reader opens as a user's file would be. Readers run in-process through the plugin registry, as the host runs them:
//
//   emd, hdf5, cxi, npy, npz   a source component: open, info, positions, the last patterns
//   mib, arina, dm, empad      the detectors plugin's sources, the same way (empad: the input is
//                              the .xml, beside a fixed .raw of one frame that it may name)
//   zip                        the zip format's load (results, prepared files, .npz)
//   config                     the TOML config: parse (with ${} expansion) and every table
//
// A reader may refuse an input (a status, an exception with a message): only crashes, hangs,
// leaks and sanitizer reports are findings. Reads are capped at 64 MiB per call so that a
// declared-but-absent huge shape is not an out-of-memory report (the host checks memory).
#include <tycho/core/config.hpp>
#include <tycho/core/error.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/sdk.hpp>
#include <tycho/tycho_components.h>

#include "../host/src/data/bad_pixels.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#ifndef TYCHO_FUZZ_PLUGIN_DIR
#error "define TYCHO_FUZZ_PLUGIN_DIR"
#endif

namespace {

// emd, hdf5, cxi, npy, npz, mib, arina, dm, empad, zip or config: from the executable's name (LLVMFuzzerInitialize).
std::string k_reader;

const tycho::host::registry& plugins() {
  static auto* reg = [] {
    auto* r = new tycho::host::registry;
    r->load_directories({TYCHO_FUZZ_PLUGIN_DIR});
    return r;
  }();
  return *reg;
}

std::string input_path() {
  if (k_reader == "empad") {
    // The .xml in a folder of its own, beside one EMPAD frame (128 x 130 float32) it may name.
    const std::string dir = "/dev/shm/tycho-fuzz-empad-" + std::to_string(getpid());
    mkdir(dir.c_str(), 0700);
    std::vector<float> frame(128 * 130);
    for (std::size_t k = 0; k < frame.size(); ++k) frame[k] = float(k % 97);
    if (FILE* f = std::fopen((dir + "/scan_x1_y1.raw").c_str(), "wb")) {
      std::fwrite(frame.data(), sizeof(float), frame.size(), f);
      std::fclose(f);
    }
    static std::string made;  // removed at exit, with the frame
    made = dir;
    std::atexit([] { std::filesystem::remove_all(made); });
    return dir + "/scan.xml";
  }
  const char* ext = k_reader == "npy"   ? ".npy"
                    : k_reader == "npz" ? ".npz"
                    : k_reader == "zip" ? ".zip"
                    : k_reader == "mib" ? ".mib"
                    : k_reader == "dm"  ? ".dm4"
                                        : ".h5";
  return "/dev/shm/tycho-fuzz-" + std::to_string(getpid()) + ext;
}

bool write_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

constexpr int64_t k_most_read_bytes = int64_t(64) << 20;

void run_source(const std::string& path) {
  std::string toml = "path = \"" + path + "\"\n";
  if (k_reader == "hdf5") toml += "dataset = \"/data\"\naxes = [\"Rx\", \"Ry\", \"Qx\", \"Qy\"]\n";
  const std::string component = k_reader == "npz" ? "npy" : k_reader;
  auto doc = tycho::config_document::parse("[data]\nsource = \"" + component + "\"\n" + toml, "<fuzz>", "");
  tycho_config cfg{&doc.table_at("data"), "[data]", doc.base_dir()};
  const auto* vt = plugins().find(TYCHO_COMPONENT_SOURCE, component).as<tycho_source_vtable>();
  tycho_source* src = nullptr;
  if (vt->open(&cfg, &src) != TYCHO_OK) return;
  std::unique_ptr<tycho_source, void (*)(tycho_source*)> guard(src, vt->close);
  tycho_dataset_info info{};
  info.struct_size = sizeof info;
  if (vt->info(src, &info) != TYCHO_OK) return;
  const int64_t patterns = info.scan_shape[0] * info.scan_shape[1];  // checked by the source
  const int64_t pixels = info.detector_shape[0] * info.detector_shape[1];
  if (patterns < 1 || pixels < 1) __builtin_trap();  // a source must refuse an empty shape at open
  if (vt->read_positions != nullptr && patterns * 16 <= k_most_read_bytes) {
    std::vector<double> pos(std::size_t(2 * patterns));
    tycho::sdk::tensor_view t(pos.data(), DLDataType{kDLFloat, 64, 1}, {patterns, 2});
    vt->read_positions(src, t.get());
  }
  if (vt->struct_size >= offsetof(tycho_source_vtable, read_detector_mask) + sizeof(void*) &&
      vt->read_detector_mask != nullptr && pixels <= k_most_read_bytes) {
    std::vector<uint8_t> mask(static_cast<std::size_t>(pixels));
    tycho::sdk::tensor_view t(mask.data(), DLDataType{kDLUInt, 8, 1}, {info.detector_shape[0], info.detector_shape[1]});
    vt->read_detector_mask(src, t.get());
  }
  const int64_t count = std::min<int64_t>(patterns, 2);
  if (count * pixels * 4 > k_most_read_bytes) return;
  std::vector<float> buf(std::size_t(count * pixels));
  int64_t shape[3] = {count, info.detector_shape[0], info.detector_shape[1]};
  DLTensor t{};
  t.data = buf.data();
  t.device = {kDLCPU, 0};
  t.ndim = 3;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  vt->read(src, patterns - count, count, &t);
}

void run_zip(const std::string& path) {
  const auto* vt = plugins().find(TYCHO_COMPONENT_FORMAT, "zip").as<tycho_format_vtable>();
  tycho_record* rec = nullptr;
  if (vt->load(path.c_str(), &rec) == TYCHO_OK && rec != nullptr && rec->release != nullptr) rec->release(rec);
}

void run_config(const uint8_t* data, size_t size) {
  try {
    auto doc = tycho::config_document::parse(std::string(reinterpret_cast<const char*>(data), size), "<fuzz>", "/");
    (void)doc.to_toml();
    for (const char* t : {"data", "optics", "preprocess", "reconstruct", "reconstruct.object", "output"})
      (void)doc.table_at(t);
    // [preprocess]'s bad-pixel keys (saturation_value, bad_pixels, ...), read as a run reads them.
    (void)tycho::host::read_bad_pixel_settings(doc.table_at("preprocess"), "<fuzz>", DLDataType{kDLUInt, 16, 1});
    doc.set_from_text("reconstruct.iterations=3");
  } catch (const tycho::error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  const std::string self = *argc > 0 ? (*argv)[0] : "";
  const std::string prefix = "tycho_fuzz_";
  const auto at = self.rfind(prefix);
  k_reader = at == std::string::npos ? "" : self.substr(at + prefix.size());
  for (const char* r : {"emd", "hdf5", "cxi", "npy", "npz", "mib", "arina", "dm", "empad", "zip", "config"})
    if (k_reader == r) return 0;
  std::fprintf(stderr, "%s: name the executable tycho_fuzz_<reader>, reader one of emd, hdf5, cxi, npy, npz, mib, arina, dm, empad, zip, config\n",
               self.c_str());
  std::exit(2);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (k_reader == "config") {
    run_config(data, size);
    return 0;
  }
  static const std::string path = input_path();
  if (!write_file(path, data, size)) return 0;
  try {
    if (k_reader == "zip")
      run_zip(path);
    else
      run_source(path);
  } catch (const tycho::error&) {
  }
  std::remove(path.c_str());
  return 0;
}
