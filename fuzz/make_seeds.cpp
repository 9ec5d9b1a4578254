// Writes the seeds of the fuzz corpus that need tycho's own writers into <out>/<reader>/:
//   tycho_fuzz_make_seeds fuzz/corpus
// HDF5 files (emd, hdf5, cxi, arina) with the HDF5 C API (the tests' writers), Merlin .mib frames,
// DM files and EMPAD .xml (the tests' writers), results and a bare archive (zip) through the zip format plugin. The seeds are small and checked in
// (fuzz/corpus/README.md); the .npy/.npz seeds were written by numpy, the configs by hand.
#include <hdf5.h>

#include <tycho/core/error.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/tycho_components.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cxi_test_file.hpp"
#include "emd_test_file.hpp"
#include "arina_test_file.hpp"
#include "format_samples.hpp"
#include "mib_test_file.hpp"

namespace fs = std::filesystem;

namespace {

// Saves arrays + manifest through the zip format (a result-shaped record).
void save_zip(const tycho::host::registry& reg, const fs::path& p, const char* manifest, bool with_second) {
  std::vector<float> a(2 * 2 * 3 * 3, 1.0f), b(4, 0.5f);
  int64_t sa[4] = {2, 2, 3, 3}, sb[1] = {4};
  tycho_named_array arrays[2]{};
  arrays[0].name = "data";
  arrays[0].tensor = DLTensor{a.data(), {kDLCPU, 0}, 4, {kDLFloat, 32, 1}, sa, nullptr, 0};
  arrays[1].name = "loss_history";
  arrays[1].tensor = DLTensor{b.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, sb, nullptr, 0};
  tycho_record rec{};
  rec.struct_size = sizeof rec;
  rec.n_arrays = with_second ? 2 : 1;
  rec.arrays = arrays;
  rec.manifest_json = manifest;
  const auto* vt = reg.find(TYCHO_COMPONENT_FORMAT, "zip").as<tycho_format_vtable>();
  if (vt->save(&rec, p.c_str(), TYCHO_SAVE_OVERWRITE) != TYCHO_OK) std::fprintf(stderr, "save %s failed\n", p.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* r : {"emd", "hdf5", "cxi", "zip", "mib", "arina", "dm", "empad"}) fs::create_directories(out / r);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);

  std::vector<float> values(2 * 3 * 4 * 4);
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = float(k % 7);
  tycho::test::emd_file_spec spec{{2, 3, 4, 4}, tycho::test::emd_element::float32, values.data()};
  spec.calibration = tycho::test::emd_calibration{0.5, "A", 0.06, "A^-1"};
  spec.microscope = tycho::test::emd_microscope{80e3, 25, -150};
  tycho::test::write_emd_file((out / "emd" / "small.h5").string(), spec);
  spec.calibration.reset();
  spec.microscope.reset();
  tycho::test::write_emd_file((out / "emd" / "bare.h5").string(), spec);
  {
    tycho::test::h5_file_writer w((out / "hdf5" / "small.h5").string());
    w.dataset("/data", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {2, 3, 4, 4}, values.data());
  }
  {
    // A CXI 1.6 file: patterns (P, Qx, Qy), translations (P, 3) in metres, energy in joules.
    tycho::test::h5_file_writer w((out / "cxi" / "small.cxi").string());
    w.dataset("/entry_1/data_1/data", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {6, 4, 4}, values.data());
    std::vector<double> t(6 * 3);
    for (int j = 0; j < 6; ++j) t[std::size_t(3 * j)] = 1e-10 * j, t[std::size_t(3 * j + 1)] = 2e-10 * j;
    w.doubles("/entry_1/sample_1/geometry_1/translation", {6, 3}, t);
    w.number("/entry_1/instrument_1/source_1/energy", 80e3 * 1.602176634e-19);
    w.number("/entry_1/instrument_1/detector_1/distance", 0.1);
    w.number("/entry_1/instrument_1/detector_1/x_pixel_size", 5e-5);
    w.number("/entry_1/instrument_1/detector_1/y_pixel_size", 5e-5);
  }

  // Merlin .mib: one small frame of each storage (the harness gives no scan_shape, so a file
  // of several frames stops at the scan's shape; the per-frame checks are in the unit tests).
  {
    struct seed {
      const char* name;
      const char* type;
      int depth;
      int64_t rows, cols;
      bool quad;
    };
    for (const seed& sd : {seed{"u08.mib", "U08", 6, 16, 16, false}, seed{"u16.mib", "U16", 12, 32, 32, false},
                           seed{"u32.mib", "U32", 24, 8, 8, false}, seed{"raw1.mib", "R64", 1, 4, 64, false},
                           seed{"raw6.mib", "R64", 6, 4, 64, false}, seed{"raw12.mib", "R64", 12, 2, 64, false},
                           seed{"raw24.mib", "R64", 24, 2, 64, false}, seed{"quad_raw1.mib", "R64", 1, 512, 512, true}}) {
      tycho::test::mib_options o;
      o.type = sd.type;
      o.depth = sd.depth;
      o.rows = sd.rows;
      o.cols = sd.cols;
      o.quad = sd.quad;
      std::vector<uint32_t> frame(std::size_t(sd.rows * sd.cols));
      const uint32_t top = (uint32_t(1) << sd.depth) - 1;
      for (std::size_t k = 0; k < frame.size(); ++k) frame[k] = uint32_t(k * 2654435761u >> 7) & top;
      tycho::test::write_bytes((out / "mib" / sd.name).string(), tycho::test::mib_bytes(o, frame));
    }
  }

  // ARINA / EIGER masters of one frame with their data inside (the harness gives one file):
  // bitshuffle/LZ4, LZ4 and plain chunks, a pixel mask, a flat field, a pixel size and energy.
  {
  struct seed { const char* name; tycho::test::arina_codec codec; hid_t ft, mt; };
  for (const seed& sd : {seed{"bslz4_u32.h5", tycho::test::arina_codec::bitshuffle_lz4, H5T_STD_U32LE, H5T_NATIVE_UINT32},
                         seed{"lz4_u16.h5", tycho::test::arina_codec::lz4, H5T_STD_U16LE, H5T_NATIVE_UINT16},
                         seed{"plain_u8.h5", tycho::test::arina_codec::none, H5T_STD_U8LE, H5T_NATIVE_UINT8}}) {
    hid_t f = H5Fcreate((out / "arina" / sd.name).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<uint32_t> v32(8 * 8);
    for (std::size_t k = 0; k < v32.size(); ++k) v32[k] = uint32_t(k * 37 % 200);
    std::vector<char> native(v32.size() * H5Tget_size(sd.ft));
    for (std::size_t k = 0; k < v32.size(); ++k) std::memcpy(&native[k * H5Tget_size(sd.ft)], &v32[k], H5Tget_size(sd.ft));
    tycho::test::arina_data_spec spec;
    spec.codec = sd.codec;
    spec.file_type = sd.ft;
    spec.mem_type = sd.mt;
    tycho::test::write_arina_frames(f, "/entry/data/data_000001", native.data(), 1, 8, 8, spec);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hsize_t dims[2] = {8, 8};
    hid_t s2 = H5Screate_simple(2, dims, nullptr);
    std::vector<uint32_t> mask(64, 0);
    mask[9] = 1;
    hid_t d = H5Dcreate2(f, "/entry/instrument/detector/detectorSpecific/pixel_mask", H5T_STD_U32LE, s2, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, mask.data());
    H5Dclose(d);
    std::vector<float> flat(64, 1.0f);
    flat[3] = 2.0f;
    d = H5Dcreate2(f, "/entry/instrument/detector/detectorSpecific/flatfield", H5T_IEEE_F32LE, s2, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat.data());
    H5Dclose(d);
    hid_t s0 = H5Screate(H5S_SCALAR);
    const double px = 75e-6, e = 200e3;
    d = H5Dcreate2(f, "/entry/instrument/detector/x_pixel_size", H5T_IEEE_F64LE, s0, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &px);
    H5Dclose(d);
    d = H5Dcreate2(f, "/entry/instrument/detector/detectorSpecific/photon_energy", H5T_IEEE_F64LE, s0, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &e);
    H5Dclose(d);
    H5Sclose(s0);
    H5Sclose(s2);
    H5Pclose(lcpl);
    H5Fclose(f);
  }
  }

  {
    using namespace tycho::test;
  // dm: a thumbnail + a 4-D uint16 scan (DM4), two 4-D scans (DM4), one 3-D frame (DM3, big-endian).
  const fs::path tmp = out / "tmp-samples";
  write_format_samples(tmp);
  fs::copy_file(tmp / "gen_4d.dm4", out / "dm" / "scan_4d.dm4", fs::copy_options::overwrite_existing);
  fs::copy_file(tmp / "gen_multi.dm4", out / "dm" / "two_images.dm4", fs::copy_options::overwrite_existing);
  dm_image_spec one{2, {6, 5, 1}, sample_bytes<float>(30, 100), {{0, 0.1, "1/nm"}, {0, 0.1, "1/nm"}, {0, 1, ""}}, "Diffraction image", -1, 200e3, "one"};
  write_sample(out / "dm" / "frame_3d.dm3", dm_bytes(3, false, {one}));
  fs::remove_all(tmp);
  // empad: .xml files naming scan_x1_y1.raw (the harness writes that frame beside them).
  write_sample(out / "empad" / "v122.xml",
               "<root name=\"seed\"><timestamp isoformat=\"2026-03-25T16:47:52\"/><raw_file filename=\"scan_x1_y1.raw\"/>"
               "<scan_parameters mode=\"acquire\"><scan_resolution_y>1</scan_resolution_y><scan_resolution_x>1</scan_resolution_x>"
               "</scan_parameters><iom_measurements><scan_rotation>0.0</scan_rotation><full_scan_field_of_view>"
               "<scale_factor>0.72</scale_factor><x>7.2e-10</x><y>7.2e-10</y></full_scan_field_of_view>"
               "<nominal_camera_length>0.369</nominal_camera_length><high_voltage>300000.0</high_voltage></iom_measurements></root>");
  write_sample(out / "empad" / "old.xml",
               "<root><raw_file filename=\"scan_x1_y1.raw\"/><pix_x>1</pix_x><pix_y>1</pix_y><iom_measurements>"
               "<optics><get_full_scan_field_of_view>[1e-9, 1e-9]</get_full_scan_field_of_view></optics>"
               "<calibrated_pixelsize>3.3e-10</calibrated_pixelsize></iom_measurements></root>");
  write_sample(out / "empad" / "series.xml",
               "<root><raw_file filename=\"scan_x1_y1.raw\"/><scan_parameters mode=\"acquire\"><series_count>1</series_count>"
               "</scan_parameters></root>");
  }

  tycho::host::registry reg;
  reg.load_directories({TYCHO_FUZZ_PLUGIN_DIR});
  save_zip(reg, out / "zip" / "result.zip",
           R"({"format": "tycho-result", "format_version": 1, "history": {"iterations": 4, "schedule_iterations": 8}})",
           true);
  save_zip(reg, out / "zip" / "bare.zip", nullptr, true);

  std::printf("seeds written to %s\n", out.c_str());
  return 0;
}
