// Dectris ARINA / EIGER-style NeXus files written for the tests: a master with /entry/data links
// (external, to data files beside it, or datasets inside it), the detector group (pixel sizes,
// pixel mask, flat field) and the companion "STEM Metadata" file; data chunks encoded here,
// independently of the reader: bitshuffle + LZ4 (filter 32008), LZ4 (32004), or left to HDF5
// (none, gzip). Chunks are written raw (H5Dwrite_chunk), so no filter plugin is needed to write;
// a reader through HDF5 needs the plugins (the tests check both readings agree when present).
#pragma once

#include <hdf5.h>
#include <lz4.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace tycho::test {

enum class arina_codec { bitshuffle_lz4, lz4, none, gzip };

namespace arina_detail {
inline void put_be(std::string& out, uint64_t v, int bytes) {
  for (int b = bytes - 1; b >= 0; --b) out += char((v >> (8 * b)) & 0xff);
}
// Bitshuffle of n elements (n % 8 == 0): bit b of byte j of element i -> bit-row 8 j + b, bit i.
inline std::string bit_shuffle(const unsigned char* in, std::size_t n, std::size_t elem) {
  std::string out(n * elem, '\0');
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < elem; ++j)
      for (int b = 0; b < 8; ++b)
        if (in[i * elem + j] >> b & 1) out[(8 * j + std::size_t(b)) * (n / 8) + i / 8] |= char(1 << (i % 8));
  return out;
}
inline std::string lz4(const std::string& block) {
  std::string out(std::size_t(LZ4_compressBound(int(block.size()))), '\0');
  const int n = LZ4_compress_default(block.data(), out.data(), int(block.size()), int(out.size()));
  out.resize(std::size_t(n));
  return out;
}
}  // namespace arina_detail

// The filter-32008 chunk of `bytes` (elements of `elem` bytes), blocks of `block_elems` elements.
inline std::string bitshuffle_lz4_chunk(const std::string& bytes, std::size_t elem, std::size_t block_elems = 1024) {
  using namespace arina_detail;
  std::string out;
  put_be(out, bytes.size(), 8);
  put_be(out, block_elems * elem, 4);
  const std::size_t n = bytes.size() / elem;
  std::size_t done = 0;
  while (n - done >= 8) {
    const std::size_t m = std::min(block_elems, (n - done) / 8 * 8);
    const std::string c = lz4(bit_shuffle(reinterpret_cast<const unsigned char*>(bytes.data()) + done * elem, m, elem));
    put_be(out, c.size(), 4);
    out += c;
    done += m;
  }
  out += bytes.substr(done * elem);
  return out;
}

// The filter-32004 chunk: blocks of `block_bytes`, each LZ4 or stored when that is not smaller.
inline std::string lz4_chunk(const std::string& bytes, std::size_t block_bytes = 4096) {
  using namespace arina_detail;
  std::string out;
  put_be(out, bytes.size(), 8);
  put_be(out, block_bytes, 4);
  for (std::size_t at = 0; at < bytes.size(); at += block_bytes) {
    const std::string block = bytes.substr(at, block_bytes);
    std::string c = lz4(block);
    if (c.size() >= block.size()) c = block;
    put_be(out, c.size(), 4);
    out += c;
  }
  return out;
}

struct arina_data_spec {
  arina_codec codec = arina_codec::bitshuffle_lz4;
  int64_t chunk_frames = 1;
  hid_t file_type = H5T_STD_U32LE;  // the stored integers
  hid_t mem_type = H5T_NATIVE_UINT32;
};

// A dataset `path` in `file` of `frames` frames rows x cols from `values` (native integers of the
// file type's size), chunked and encoded as `spec` says.
inline bool write_arina_frames(hid_t file, const std::string& path, const void* values, int64_t frames, int64_t rows,
                               int64_t cols, const arina_data_spec& spec) {
  const std::size_t elem = H5Tget_size(spec.file_type);
  hsize_t dims[3] = {hsize_t(frames), hsize_t(rows), hsize_t(cols)};
  hsize_t chunk[3] = {hsize_t(spec.chunk_frames), hsize_t(rows), hsize_t(cols)};
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 3, chunk);
  if (spec.codec == arina_codec::bitshuffle_lz4) {
    // The parameters as a file holds them: (plugin major, minor, element size, block size,
    // compression 2 = LZ4). Where the plugin is installed, its set_local prepends the first three
    // to what the writer gives (block size, compression), as a detector's HDF5 does.
    const unsigned cd[5] = {0, 3, unsigned(elem), 0, 2};
    if (H5Zfilter_avail(32008) > 0)
      H5Pset_filter(dcpl, 32008, H5Z_FLAG_OPTIONAL, 2, cd + 3);
    else
      H5Pset_filter(dcpl, 32008, H5Z_FLAG_OPTIONAL, 5, cd);
  } else if (spec.codec == arina_codec::lz4) {
    H5Pset_filter(dcpl, 32004, H5Z_FLAG_OPTIONAL, 0, nullptr);
  } else if (spec.codec == arina_codec::gzip) {
    H5Pset_deflate(dcpl, 4);
  }
  hid_t space = H5Screate_simple(3, dims, nullptr);
  hid_t d = H5Dcreate2(file, path.c_str(), spec.file_type, space, lcpl, dcpl, H5P_DEFAULT);
  bool ok = d >= 0;
  const std::size_t frame_bytes = std::size_t(rows * cols) * elem;
  if (ok && (spec.codec == arina_codec::none || spec.codec == arina_codec::gzip)) {
    ok = H5Dwrite(d, spec.mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) >= 0;
  } else if (ok) {
    for (int64_t f0 = 0; f0 < frames; f0 += spec.chunk_frames) {
      // A last chunk past the end holds zeros (HDF5's chunks are whole).
      std::string bytes(frame_bytes * std::size_t(spec.chunk_frames), '\0');
      const int64_t n = std::min(spec.chunk_frames, frames - f0);
      std::memcpy(bytes.data(), static_cast<const char*>(values) + std::size_t(f0) * frame_bytes,
                  std::size_t(n) * frame_bytes);
      if (H5Tget_order(spec.file_type) == H5T_ORDER_BE)  // a raw chunk is in the file's byte order
        for (std::size_t k = 0; k + elem <= bytes.size(); k += elem) std::reverse(&bytes[k], &bytes[k] + elem);
      const std::string c = spec.codec == arina_codec::lz4 ? lz4_chunk(bytes) : bitshuffle_lz4_chunk(bytes, elem);
      hsize_t offset[3] = {hsize_t(f0), 0, 0};
      ok = ok && H5Dwrite_chunk(d, H5P_DEFAULT, 0, offset, c.size(), c.data()) >= 0;
    }
  }
  if (d >= 0) H5Dclose(d);
  H5Sclose(space);
  H5Pclose(dcpl);
  H5Pclose(lcpl);
  return ok;
}

// A whole scan: a master, its data files (external links, or datasets inside it) and the
// companion "STEM Metadata" file, as an ARINA acquisition leaves them.
struct arina_scan {
  int64_t frames = 12, rows = 13, cols = 11;
  std::vector<uint32_t> values;  // frames x rows x cols
  int files = 2;
  bool external = true;          // data files beside the master, else datasets inside it
  arina_data_spec spec;
  std::vector<uint32_t> mask;    // rows x cols, empty: none
  std::vector<float> flat;       // rows x cols, empty: none
  int flat_applied = 0;
  double pixel_m = 100e-6;
  bool metadata = true;
  int64_t scan_x = 4, scan_y = 3;
  double pixel_nm = 0.139, high_tension_V = 300e3, camera_length_m = 0.115;
};

inline void attr_double(hid_t obj, const char* name, double v) {
  hsize_t one = 1;
  hid_t s = H5Screate_simple(1, &one, nullptr);
  hid_t a = H5Acreate2(obj, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a);
  H5Sclose(s);
}
inline void attr_int(hid_t obj, const char* name, int64_t v) {
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Sclose(s);
}
inline void scalar(hid_t file, const std::string& path, hid_t type, hid_t mem, const void* v) {
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t d = H5Dcreate2(file, path.c_str(), type, s, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
  H5Dclose(d);
  H5Sclose(s);
  H5Pclose(lcpl);
}
inline void image(hid_t file, const std::string& path, hid_t type, hid_t mem, int64_t rows, int64_t cols, const void* v) {
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hsize_t dims[2] = {hsize_t(rows), hsize_t(cols)};
  hid_t s = H5Screate_simple(2, dims, nullptr);
  hid_t d = H5Dcreate2(file, path.c_str(), type, s, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
  H5Dclose(d);
  H5Sclose(s);
  H5Pclose(lcpl);
}

// <dir>/<name>_master.h5, its data files and <name>.h5 (the scan metadata); the master's path,
// "" when a data set could not be written.
inline std::string write_arina_scan(const std::filesystem::path& dir, const std::string& name, const arina_scan& s) {
  const std::string master = (dir / (name + "_master.h5")).string();
  hid_t m = H5Fcreate(master.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  bool ok = m >= 0;
  const std::size_t elem = H5Tget_size(s.spec.file_type);
  const int64_t px = s.rows * s.cols;
  // The values as native integers of the stored size.
  std::string native(std::size_t(s.frames * px) * elem, '\0');
  for (std::size_t k = 0; k < s.values.size(); ++k) {
    const uint32_t v = s.values[k];
    std::memcpy(&native[k * elem], &v, elem);  // little-endian host: the low bytes
  }
  const int64_t per_file = (s.frames + s.files - 1) / s.files;
  for (int f = 0; f * per_file < s.frames; ++f) {
    const int64_t first = f * per_file, n = std::min(per_file, s.frames - first);
    char link[32];
    std::snprintf(link, sizeof link, "data_%06d", f + 1);
    const char* at = native.data() + std::size_t(first * px) * elem;
    if (s.external) {
      char data_name[256];
      std::snprintf(data_name, sizeof data_name, "%s_%s.h5", name.c_str(), link);
      hid_t df = H5Fcreate((dir / data_name).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
      ok = ok && (write_arina_frames(df, "/entry/data/data", at, n, s.rows, s.cols, s.spec));
      H5Fclose(df);
      hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
      H5Pset_create_intermediate_group(lcpl, 1);
      H5Lcreate_external(data_name, "/entry/data/data", m, (std::string("/entry/data/") + link).c_str(), lcpl, H5P_DEFAULT);
      H5Pclose(lcpl);
    } else {
      ok = ok && (write_arina_frames(m, std::string("/entry/data/") + link, at, n, s.rows, s.cols, s.spec));
    }
  }
  const std::string det = "/entry/instrument/detector/";
  scalar(m, det + "x_pixel_size", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &s.pixel_m);
  scalar(m, det + "y_pixel_size", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &s.pixel_m);
  const double zero = 0;
  scalar(m, det + "detector_distance", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &zero);
  const int8_t applied = int8_t(s.flat_applied);
  scalar(m, det + "flatfield_correction_applied", H5T_STD_I8LE, H5T_NATIVE_INT8, &applied);
  const double photon = 200e3;
  scalar(m, det + "detectorSpecific/photon_energy", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &photon);
  if (!s.mask.empty())
    image(m, det + "detectorSpecific/pixel_mask", H5T_STD_U32LE, H5T_NATIVE_UINT32, s.rows, s.cols, s.mask.data());
  if (!s.flat.empty())
    image(m, det + "detectorSpecific/flatfield", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, s.rows, s.cols, s.flat.data());
  H5Fclose(m);
  if (s.metadata) {
    hid_t md = H5Fcreate((dir / (name + ".h5")).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(md, "STEM Metadata", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    attr_int(g, "NumPixelsX", s.scan_x);
    attr_int(g, "NumPixelsY", s.scan_y);
    attr_double(g, "Pixel Size", s.pixel_nm);
    attr_double(g, "High Tension", s.high_tension_V);
    attr_double(g, "Camera Length", s.camera_length_m);
    attr_double(g, "Rotation", 0.0);
    H5Gclose(g);
    H5Fclose(md);
  }
  return ok ? master : std::string();
}

}  // namespace tycho::test
