// The `npy` source component: 4D-STEM diffraction data from a NumPy .npy file or one array of
// an .npz archive, shape (Rx, Ry, Qx, Qy) in C order, or a stack (N, Qx, Qy) of N = Rx·Ry frames
// with [data] scan_shape = [Rx, Ry]; calibrations come from the config
// ([data] scan_step_A / detector_pixel_invA, [optics]). Patterns are converted to float32 on
// read, and read() reads only the requested patterns (an .npz member stored uncompressed is
// read in place; a compressed one is inflated once, at open).
#include <tycho/sdk.hpp>
#include <tycho/sdk/source.hpp>
#include <tycho/sdk/npy.hpp>
#include <tycho/sdk/scan_shape.hpp>

#include <zip.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

static_assert(std::endian::native == std::endian::little, "the npy source assumes a little-endian host");

using tycho::sdk::cat;
using tycho::sdk::fail;
using tycho::sdk::printable;
namespace npy = tycho::sdk::npy;
namespace fs = std::filesystem;

namespace {

struct zip_closer {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct zip_file_closer {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};
using archive_ptr = std::unique_ptr<zip_t, zip_closer>;
using member_ptr = std::unique_ptr<zip_file_t, zip_file_closer>;

// The opened array and where its bytes are.
struct npy_data {
  std::string file_name;
  std::string array;        // .npz member without ".npy"; empty for a .npy file
  std::string description;  // "<file>" or "<file>:<array>", pointed to by info.description
  // Where the bytes are: a .npy file, a stored .npz member (read in place), or a buffer.
  std::ifstream file;
  archive_ptr archive;
  zip_uint64_t member_index = 0;
  std::vector<unsigned char> inflated;  // a compressed member, whole
  uint64_t data_offset = 0;             // start of the array data within the file / member
  DLDataType dtype{};
  int64_t scan[2] = {0, 0};
  int64_t detector[2] = {0, 0};
  // [data] scan_shape: the array is then a flat stack (N, Qx, Qy) of N = Rx·Ry frames.
  std::optional<tycho::sdk::scan_shape_t> stack_shape;
  tycho_dataset_info info{};
};

bool ends_with(const std::string& s, const char* suffix) {
  const std::size_t n = std::strlen(suffix);
  if (s.size() < n) return false;
  for (std::size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - n + i])) != suffix[i]) return false;
  return true;
}

void check_exists(const std::string& path, const std::string& given) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (fs::path(given).is_relative())
      fail(TYCHO_ERR_NOT_FOUND, "data file '", path, "' does not exist ([data] path = \"", given,
           "\" is relative to the config file's folder)");
    fail(TYCHO_ERR_NOT_FOUND, "data file '", path, "' does not exist");
  }
  if (fs::is_directory(path, ec))
    fail(TYCHO_ERR_BAD_DATA, "data file '", path, "' is a directory, expected a .npy or .npz file");
}

bool is_supported(DLDataType t) {
  using namespace tycho::sdk;
  return (t.code == kDLUInt && (t.bits == 8 || t.bits == 16 || t.bits == 32)) ||
         (t.code == kDLInt && (t.bits == 16 || t.bits == 32)) ||
         (t.code == kDLFloat && (t.bits == 16 || t.bits == 32 || t.bits == 64));
}

// Checks what the header describes and fills the shapes.
void accept_header(npy_data& s, const npy::header& h) {
  const std::string& d = s.description;
  if (h.big_endian)
    fail(TYCHO_ERR_BAD_DATA, "'", d, "' is big-endian (dtype '", printable(h.descr),
         "'), expected little-endian data (convert with arr.astype(arr.dtype.newbyteorder('<')))");
  if (!h.dtype || !is_supported(*h.dtype))
    fail(TYCHO_ERR_BAD_DATA, "'", d, "' has dtype '", printable(h.descr),
         "', expected uint8, uint16, uint32, int16, int32, float16, float32 or float64");
  const std::size_t rank = s.stack_shape ? 3 : 4;
  if (h.shape.size() != rank)
    fail(TYCHO_ERR_BAD_DATA, "'", d, "' has shape ", npy::shape_text(h.shape),
         s.stack_shape ? ", expected a 3-D stack of frames (N, Qx, Qy), as [data] scan_shape says"
                       : ", expected a 4-D array (Rx, Ry, Qx, Qy) (a 3-D stack (N, Qx, Qy) needs [data] scan_shape)");
  if (std::any_of(h.shape.begin(), h.shape.end(), [](int64_t v) { return v == 0; }))
    fail(TYCHO_ERR_BAD_DATA, "'", d, "' has shape ", npy::shape_text(h.shape),
         ", which holds no patterns");
  if (h.fortran_order)
    fail(TYCHO_ERR_BAD_DATA, "'", d,
         "' is stored in Fortran order, expected a C-order (Rx, Ry, Qx, Qy) array (save "
         "np.ascontiguousarray(arr))");
  s.dtype = *h.dtype;
  if (s.stack_shape) {
    const auto& r = *s.stack_shape;
    if (r[0] * r[1] != h.shape[0])  // (checked_mul'd when read)
      fail(TYCHO_ERR_INVALID_ARGUMENT, "config key 'scan_shape' = [", r[0], ", ", r[1], "] makes ", r[0] * r[1],
           " positions, but '", d, "' holds ", h.shape[0], " frames ", npy::shape_text(h.shape),
           ": the shape must multiply to the frame count");
    s.scan[0] = r[0];
    s.scan[1] = r[1];
  } else {
    s.scan[0] = h.shape[0];
    s.scan[1] = h.shape[1];
  }
  s.detector[0] = h.shape[rank - 2];
  s.detector[1] = h.shape[rank - 1];
  tycho::sdk::check_data_shape(s.scan, s.detector, "'" + s.description + "'");
  s.data_offset = h.header_bytes;
}

void open_npy_file(npy_data& s) {
  std::error_code ec;
  const uint64_t size = fs::file_size(s.file_name, ec);
  if (ec) fail(TYCHO_ERR_IO, "cannot read '", s.file_name, "': ", ec.message());
  s.file.open(s.file_name, std::ios::binary);
  if (!s.file) fail(TYCHO_ERR_IO, "cannot open '", s.file_name, "' for reading");
  const auto read = [&](void* dst, std::size_t n) {
    if (!s.file.read(static_cast<char*>(dst), std::streamsize(n)))
      fail(TYCHO_ERR_BAD_DATA, "'", s.description, "' is truncated in its .npy header");
  };
  accept_header(s, npy::read_header(read, size, cat("'", s.description, "'")));
}

archive_ptr open_archive(const std::string& path) {
  int code = 0;
  archive_ptr za(zip_open(path.c_str(), ZIP_RDONLY, &code));
  if (!za) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    std::string text = zip_error_strerror(&e);
    zip_error_fini(&e);
    fail(code == ZIP_ER_NOZIP || code == ZIP_ER_INCONS ? TYCHO_ERR_BAD_DATA : TYCHO_ERR_IO,
         "cannot open '", path, "' as an .npz (zip) archive: ", text);
  }
  return za;
}

// Reads the first bytes of member `index` (its .npy header) to see whether it is 4-D.
// The shape a member's .npy header declares; `error` receives why it cannot be read (a header
// that lies about its shape, a truncated member) instead.
std::vector<int64_t> member_shape(zip_t* za, const zip_stat_t& st, const std::string& where, std::string& error) {
  member_ptr f(zip_fopen_index(za, st.index, 0));
  if (!f) {
    error = cat(where, ": cannot be opened: ", zip_strerror(za));
    return {};
  }
  try {
    const auto read = [&](void* dst, std::size_t n) {
      if (zip_fread(f.get(), dst, n) != zip_int64_t(n)) fail(TYCHO_ERR_BAD_DATA, where, ": ends inside its .npy header");
    };
    return npy::read_header(read, st.size, where).shape;
  } catch (const tycho::sdk::error& e) {
    error = e.what();
    return {};
  }
}

void open_npz_member(npy_data& s, const std::optional<std::string>& wanted) {
  s.archive = open_archive(s.file_name);
  zip_t* za = s.archive.get();
  struct member {
    std::string name;
    zip_stat_t st;
  };
  std::vector<member> arrays;
  const zip_int64_t entries = zip_get_num_entries(za, 0);
  for (zip_int64_t i = 0; i < entries; ++i) {
    zip_stat_t st;
    if (zip_stat_index(za, zip_uint64_t(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
        !(st.valid & ZIP_STAT_SIZE))
      continue;
    const std::string name = st.name;
    if (name.size() > 4 && name.ends_with(".npy")) {
      for (const auto& a : arrays)
        if (a.name + ".npy" == name)
          fail(TYCHO_ERR_BAD_DATA, "'", s.file_name, "': member '", printable(name),
               "' appears twice; expected each member once (readers disagree which one is meant)");
      arrays.push_back({name.substr(0, name.size() - 4), st});
    }
  }
  std::string listed;
  for (const auto& a : arrays) listed += cat(listed.empty() ? "" : ", ", "'", a.name, "'");
  if (listed.empty()) listed = "none";

  const member* chosen = nullptr;
  if (wanted) {
    for (const auto& a : arrays)
      if (a.name == *wanted) chosen = &a;
    if (!chosen)
      fail(TYCHO_ERR_NOT_FOUND, "'", s.file_name, "' has no array '", *wanted,
           "' ([data] array); its arrays: ", listed);
  } else {
    // The only 4-D array; with [data] scan_shape, the only 3-D stack of frames.
    const std::size_t rank = s.stack_shape ? 3 : 4;
    const char* kind = s.stack_shape ? "3-D array" : "4-D array";
    std::vector<const member*> found;
    std::string shapes, first_error;
    for (const auto& a : arrays) {
      std::string error;
      auto shape = member_shape(za, a.st, cat("'", s.file_name, "': member '", printable(a.st.name), "'"), error);
      shapes += cat(shapes.empty() ? "" : ", ", "'", printable(a.name), "' ",
                    error.empty() ? npy::shape_text(shape) : std::string("(unreadable)"));
      if (first_error.empty()) first_error = error;
      if (error.empty() && shape.size() == rank) found.push_back(&a);
    }
    // A member whose header cannot be read (it lies about its shape, it is truncated) is named
    // as such, not counted as "no 4-D array".
    if (found.empty() && !first_error.empty()) fail(TYCHO_ERR_BAD_DATA, first_error);
    if (found.size() != 1)
      fail(found.empty() ? TYCHO_ERR_NOT_FOUND : TYCHO_ERR_BAD_DATA, "'", s.file_name, "' holds ",
           found.empty() ? cat("no ", kind) : cat("several ", kind, "s"),
           "; set [data] array to one of its arrays: ", shapes.empty() ? "none" : shapes);
    chosen = found.front();
  }
  s.array = chosen->name;
  s.description = s.file_name + ":" + s.array;
  s.member_index = chosen->st.index;
  const zip_stat_t& st = chosen->st;
  const bool stored = (!(st.valid & ZIP_STAT_COMP_METHOD) || st.comp_method == ZIP_CM_STORE) &&
                      (!(st.valid & ZIP_STAT_ENCRYPTION_METHOD) || st.encryption_method == ZIP_EM_NONE);

  const bool encrypted = (st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE;
  if ((st.valid & ZIP_STAT_COMP_SIZE) && (st.valid & ZIP_STAT_COMP_METHOD) && !encrypted)
    tycho::sdk::check_member_size(st.size, st.comp_size, int(st.comp_method),
                                  cat("'", s.description, "' (member '", st.name, "')"));
  member_ptr f(zip_fopen_index(za, st.index, 0));
  if (!f) fail(TYCHO_ERR_BAD_DATA, "cannot open '", s.description, "': ", zip_strerror(za));
  const auto read_exact = [&](void* dst, std::size_t n) {
    if (zip_fread(f.get(), dst, n) != zip_int64_t(n))
      fail(TYCHO_ERR_BAD_DATA, "'", s.description, "' is truncated or corrupt: ", zip_file_strerror(f.get()));
  };
  npy::header h = npy::read_header(read_exact, st.size, cat("'", s.description, "'"));
  accept_header(s, h);
  if (!stored) {
    // A compressed member cannot be sought in: inflate the array data once.
    s.inflated.resize(std::size_t(h.data_bytes));
    read_exact(s.inflated.data(), s.inflated.size());
    // Reading past the end makes libzip compare the member's CRC-32 with the inflated bytes:
    // a corrupt member is refused here instead of being read as garbage.
    unsigned char extra = 0;
    const zip_int64_t more = zip_fread(f.get(), &extra, 1);
    if (more < 0)
      fail(TYCHO_ERR_BAD_DATA, "'", s.description, "' is corrupt: ", zip_file_strerror(f.get()),
           " (member '", st.name, "')");
    if (more > 0)
      fail(TYCHO_ERR_BAD_DATA, "'", s.description, "' is corrupt: member '", st.name,
           "' inflates to more bytes than its header declares");
    s.data_offset = 0;
    s.archive.reset();
  }
}

void fill_info(npy_data& s, bool centred) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  tycho_dataset_info& i = s.info;
  i.struct_size = sizeof(tycho_dataset_info);
  std::copy(std::begin(s.scan), std::end(s.scan), i.scan_shape);
  std::copy(std::begin(s.detector), std::end(s.detector), i.detector_shape);
  i.stored_dtype = s.dtype;
  i.scan_step_A[0] = i.scan_step_A[1] = nan;  // from [data] scan_step_A
  i.detector_pixel_invA[0] = i.detector_pixel_invA[1] = nan;
  i.energy_eV = i.semiangle_mrad = i.C10_A = nan;  // from [optics]
  i.patterns_centred = centred ? 1 : 0;
  i.description = s.description.c_str();
}

// Copies `bytes` bytes at `offset` (from the start of the array data) into `dst`.
void read_bytes(npy_data& s, uint64_t offset, std::size_t bytes, unsigned char* dst) {
  if (!s.inflated.empty()) {
    std::memcpy(dst, s.inflated.data() + offset, bytes);
    return;
  }
  const uint64_t at = s.data_offset + offset;
  if (s.archive) {
    member_ptr f(zip_fopen_index(s.archive.get(), s.member_index, 0));
    if (!f || zip_fseek(f.get(), zip_int64_t(at), SEEK_SET) != 0 ||
        zip_fread(f.get(), dst, bytes) != zip_int64_t(bytes))
      fail(TYCHO_ERR_IO, "reading '", s.description, "' failed: ",
           f ? zip_file_strerror(f.get()) : zip_strerror(s.archive.get()));
    return;
  }
  s.file.clear();
  s.file.seekg(std::streamoff(at));
  if (!s.file.read(reinterpret_cast<char*>(dst), std::streamsize(bytes)))
    fail(TYCHO_ERR_IO, "reading '", s.description, "' failed (the file may be truncated)");
}

// The component, as tycho/sdk/source.hpp adapts it.
class npy_source {
 public:
  explicit npy_source(const tycho::sdk::config_view& config) {
    const std::string given = config.require_string("path");
    const std::string path = tycho::sdk::resolve_path(config.base_dir(), given);
    std::optional<std::string> array = config.get_string("array");
    const bool centred = config.get_bool("centred").value_or(true);
    if (array && array->ends_with(".npy")) array->resize(array->size() - 4);
    s_.stack_shape = tycho::sdk::config_scan_shape(config);

    s_.file_name = path;
    s_.description = path;
    check_exists(path, given);
    if (ends_with(path, ".npz")) {
      open_npz_member(s_, array);
    } else {
      if (array)
        fail(TYCHO_ERR_INVALID_ARGUMENT, "[data] array = \"", *array, "\" is for .npz archives; '",
             path, "' is read as a single .npy array");
      open_npy_file(s_);
    }
    fill_info(s_, centred);
    tycho::sdk::log(TYCHO_LOG_INFO, "npy",
                    cat("opened '", s_.description, "': ", s_.scan[0], " x ", s_.scan[1],
                        " patterns of ", s_.detector[0], " x ", s_.detector[1], " ",
                        tycho::sdk::dtype_name(s_.dtype)));
  }

  const tycho_dataset_info& info() const { return s_.info; }

  void read(int64_t first, int64_t count, float* outp) {
    npy_data& s = s_;
    const uint64_t element = s.dtype.bits / 8;
    const uint64_t pattern = uint64_t(s.detector[0] * s.detector[1]);
    // In chunks of at most ~16 MiB of stored bytes, so a float32 file is read straight into
    // the destination and others through a bounded staging buffer.
    const uint64_t per_chunk = std::max<uint64_t>(1, (uint64_t(16) << 20) / (pattern * element));
    std::vector<unsigned char> staging;
    for (int64_t pos = 0; pos < count;) {
      const uint64_t n = std::min<uint64_t>(per_chunk, uint64_t(count - pos));
      const std::size_t bytes = std::size_t(n * pattern * element);
      float* d = outp + uint64_t(pos) * pattern;
      const uint64_t offset = uint64_t(first + pos) * pattern * element;
      if (s.dtype.code == kDLFloat && s.dtype.bits == 32) {
        read_bytes(s, offset, bytes, reinterpret_cast<unsigned char*>(d));
      } else {
        staging.resize(bytes);
        read_bytes(s, offset, bytes, staging.data());
        npy::convert_values(s.dtype, staging.data(), d, std::size_t(n * pattern));
      }
      pos += int64_t(n);
    }
  }

  // The stored values, unconverted (uint8, uint16, float16: the SDK offers these to the host):
  // little-endian like the host, so the file's bytes are the patterns.
  void read_stored(int64_t first, int64_t count, void* outp) {
    npy_data& s = s_;
    const uint64_t element = s.dtype.bits / 8;
    const uint64_t pattern = uint64_t(s.detector[0] * s.detector[1]);
    read_bytes(s, uint64_t(first) * pattern * element, std::size_t(uint64_t(count) * pattern * element),
               static_cast<unsigned char*>(outp));
  }

 private:
  npy_data s_;
};

// "source", "scan_step_A" and "detector_pixel_invA" are the host's keys.
const char* const k_config_keys[] = {"path", "array", "centred", "scan_shape", nullptr};
const tycho_setting k_settings[] = {
    tycho::sdk::setting("path", TYCHO_SETTING_STRING, nullptr,
                        "a .npy file or an .npz archive (by its extension), relative to the config file's folder; "
                        "required"),
    tycho::sdk::setting("array", TYCHO_SETTING_STRING, nullptr,
                        "an .npz archive's member without .npy; default: its only 4-D array"),
    tycho::sdk::setting("centred", TYCHO_SETTING_BOOL, "true",
                        "true: zero frequency at index N/2 of each pattern (fftshift order); false: at index 0"),
    tycho::sdk::scan_shape_setting(),
    tycho::sdk::end_of_settings()};

const tycho_component k_components[] = {tycho::sdk::with_settings(
    tycho::sdk::component(TYCHO_COMPONENT_SOURCE, "npy", "1.0.0",
                          "4D-STEM data (Rx, Ry, Qx, Qy) from a NumPy .npy file or one array of an .npz; calibrations "
                          "from [data] scan_step_A / detector_pixel_invA and [optics]",
                          TYCHO_DEVICE_BIT(kDLCPU), k_config_keys, tycho::sdk::source_vtable<npy_source>("npy")),
    k_settings)};

}  // namespace

TYCHO_PLUGIN("npy", "1.0.0", k_components)
