// Saves one large record over a file through the zip format plugin, the way the host saves a
// result (host::save_record, overwrite mode): what tests/test_save_interrupted.cpp kills with
// SIGKILL in the middle of the save.
//
//   tycho_save_record_helper PLUGIN_DIR PATH MIB
//
// The record holds one float32 array "big" of MIB mebibytes (value k at index k, mod 2^24) and
// a small manifest. Exits 0 after the save, 2 with a message on stderr after an error.
#include <tycho/core/array.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/host/result_record.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PLUGIN_DIR PATH MIB\n", argv[0]);
    return 2;
  }
  try {
    tycho::host::registry reg;
    reg.load_directories({argv[1]});
    const std::string path = argv[2];
    const int64_t n = int64_t(std::atoll(argv[3])) << 18;  // float32 values in MIB MiB
    tycho::owned_array big;
    big.name = "big";
    big.dtype = {kDLFloat, 32, 1};
    big.shape = {n};
    big.bytes.resize(std::size_t(n) * 4);
    float* v = reinterpret_cast<float*>(big.bytes.data());
    for (int64_t k = 0; k < n; ++k) v[k] = float(k & 0xffffff);
    std::vector<tycho::owned_array> arrays;
    arrays.push_back(std::move(big));
    tycho::host::save_record(tycho::host::format_for_path(reg, path), arrays,
                             "{\"format\": \"tycho-save-helper\"}", path, TYCHO_SAVE_OVERWRITE);
    std::printf("saved %s\n", path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tycho_save_record_helper: %s\n", e.what());
    return 2;
  }
}
