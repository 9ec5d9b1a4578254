// load: every "*.npy" member becomes an array (named without ".npy", in member order),
// "manifest.json" the manifest; anything else is ignored. Reads what numpy.savez and
// numpy.savez_compressed write as well as what save writes.
#include <tycho/sdk.hpp>
#include <tycho/sdk/checked.hpp>
#include <tycho/sdk/npy.hpp>

#include <filesystem>
#include <limits>
#include <new>
#include <set>
#include <string_view>
#include <vector>

#include "zip_io.hpp"

namespace tycho::zip_plugin {
namespace {

namespace fs = std::filesystem;
using sdk::cat;
using sdk::fail;

// 64-byte aligned array memory, like the host allocator's, so engines can vectorise over it.
struct aligned_delete {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
};
using buffer = std::unique_ptr<std::byte[], aligned_delete>;

buffer allocate(uint64_t bytes) {
  if (bytes > std::numeric_limits<std::size_t>::max()) throw std::bad_alloc();
  return buffer(static_cast<std::byte*>(::operator new[](std::size_t(bytes), std::align_val_t{64})));
}

struct loaded_array {
  std::string name;
  std::vector<int64_t> shape;
  DLDataType dtype{};
  buffer data;
};

// Owns everything the record points to; `release` deletes it through the base pointer.
struct loaded_record : tycho_record {
  std::vector<loaded_array> arrays_owned;
  std::vector<tycho_named_array> views;
  std::string manifest;
  bool has_manifest = false;

  loaded_record() : tycho_record{} {}

  // Points the C view at the owned storage; called once nothing will move any more.
  void finish() {
    for (auto& a : arrays_owned) {
      tycho_named_array v{};
      v.name = a.name.c_str();
      v.tensor.data = a.data.get();
      v.tensor.device = DLDevice{kDLCPU, 0};
      v.tensor.ndim = int32_t(a.shape.size());
      v.tensor.dtype = a.dtype;
      v.tensor.shape = a.shape.data();
      views.push_back(v);
    }
    struct_size = sizeof(tycho_record);
    n_arrays = int64_t(views.size());
    arrays = views.data();
    manifest_json = has_manifest ? manifest.c_str() : nullptr;
    release = [](tycho_record* self) { delete static_cast<loaded_record*>(self); };
  }
};

// Reads exactly `n` bytes of the open member; libzip checks the CRC once the end is reached.
void read_exact(zip_file_t* f, void* dst, uint64_t n, const std::string& where) {
  auto* p = static_cast<std::byte*>(dst);
  while (n > 0) {
    const zip_int64_t got = zip_fread(f, p, std::min<uint64_t>(n, uint64_t(1) << 30));
    if (got < 0) fail(TYCHO_ERR_BAD_DATA, where, ": ", zip_file_strerror(f));
    if (got == 0) fail(TYCHO_ERR_BAD_DATA, where, ": the member ends early");
    p += got;
    n -= uint64_t(got);
  }
}

// Reads to the end, which makes libzip verify the member's CRC.
void expect_end(zip_file_t* f, const std::string& where) {
  std::byte extra;
  const zip_int64_t got = zip_fread(f, &extra, 1);
  if (got < 0) fail(TYCHO_ERR_BAD_DATA, where, ": ", zip_file_strerror(f));
  if (got > 0) fail(TYCHO_ERR_BAD_DATA, where, ": the member is longer than its header says");
}

// The member's declared size, checked against what its compressed bytes can inflate to, before
// anything that size is allocated. libzip reads no more than the declared size (and checks the
// CRC at the end), so a member that inflates beyond it is refused while reading.
void check_declared_size(const zip_stat_t& st, const std::string& where) {
  const bool encrypted = (st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE;
  if ((st.valid & ZIP_STAT_COMP_SIZE) && (st.valid & ZIP_STAT_COMP_METHOD) && !encrypted)
    sdk::check_member_size(st.size, st.comp_size, int(st.comp_method), where);
}

// manifest.json is a few KB; a bound keeps a crafted one from sizing a huge string.
constexpr uint64_t k_most_manifest_bytes = uint64_t(64) << 20;

member_ptr open_member(zip_t* za, zip_uint64_t index, const std::string& where) {
  member_ptr f(zip_fopen_index(za, index, 0));
  if (!f) fail(TYCHO_ERR_BAD_DATA, where, ": cannot open it: ", zip_strerror(za));
  return f;
}

loaded_array read_array(zip_t* za, const zip_stat_t& st, std::string name, const std::string& path) {
  const std::string where = cat("member '", st.name, "' of ", path);
  check_declared_size(st, where);
  member_ptr f = open_member(za, st.index, where);
  const auto read = [&](void* dst, std::size_t n) { read_exact(f.get(), dst, n, where); };
  sdk::npy::stored_header h = sdk::npy::read_stored_header(read, st.size, where);

  loaded_array a{std::move(name), std::move(h.shape), h.dtype, allocate(h.data_bytes)};
  if (h.fortran_order && a.shape.size() > 1) {
    // numpy writes Fortran-ordered arrays (np.asfortranarray, transposes) as they are in
    // memory; records are C order, so such an array is reordered once here.
    buffer staging = allocate(h.data_bytes);
    read_exact(f.get(), staging.get(), h.data_bytes, where);
    sdk::npy::fortran_to_c_order(staging.get(), a.data.get(), a.shape, a.dtype.bits / 8u);
  } else {
    read_exact(f.get(), a.data.get(), h.data_bytes, where);
  }
  expect_end(f.get(), where);
  return a;
}

std::string read_text(zip_t* za, const zip_stat_t& st, const std::string& path) {
  const std::string where = cat("member '", st.name, "' of ", path);
  check_declared_size(st, where);
  if (st.size > k_most_manifest_bytes)
    fail(TYCHO_ERR_BAD_DATA, where, " is ", st.size, " bytes, expected a manifest of at most ", k_most_manifest_bytes);
  member_ptr f = open_member(za, st.index, where);
  std::string text(std::size_t(st.size), '\0');
  read_exact(f.get(), text.data(), text.size(), where);
  expect_end(f.get(), where);
  return text;
}

archive_ptr open_archive(const std::string& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) fail(TYCHO_ERR_NOT_FOUND, "cannot load ", path, ": no such file");
  if (fs::is_directory(status)) fail(TYCHO_ERR_BAD_DATA, "cannot load ", path, ": it is a folder, expected a .zip file");
  // libzip opens an empty file as an empty archive; it is not one.
  if (fs::is_regular_file(status) && fs::file_size(path, ec) == 0)
    fail(TYCHO_ERR_BAD_DATA, "cannot load ", path, ": the file is empty, expected a zip archive");
  int code = 0;
  archive_ptr za(zip_open(path.c_str(), ZIP_RDONLY, &code));
  if (za) return za;
  const tycho_status status_code = code == ZIP_ER_NOZIP || code == ZIP_ER_INCONS ? TYCHO_ERR_BAD_DATA
                                   : code == ZIP_ER_NOENT                        ? TYCHO_ERR_NOT_FOUND
                                   : code == ZIP_ER_MEMORY                       ? TYCHO_ERR_OUT_OF_MEMORY
                                                                                 : TYCHO_ERR_IO;
  fail(status_code, "cannot load ", path, ": ", zip_error_text(code),
       status_code == TYCHO_ERR_BAD_DATA ? " (expected a zip archive such as an .npz)" : "");
}

}  // namespace

tycho_record* load_record(const char* path_c) {
  const std::string path = path_c;
  archive_ptr za = open_archive(path);
  auto rec = std::make_unique<loaded_record>();
  std::set<std::string> names;
  const zip_int64_t entries = zip_get_num_entries(za.get(), 0);
  for (zip_int64_t i = 0; i < entries; ++i) {
    zip_stat_t st;
    if (zip_stat_index(za.get(), zip_uint64_t(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
        !(st.valid & ZIP_STAT_SIZE))
      fail(TYCHO_ERR_BAD_DATA, "cannot load ", path, ": entry #", i, ": ", zip_strerror(za.get()));
    const std::string_view member = st.name;
    if (member == "manifest.json") {
      if (rec->has_manifest)
        fail(TYCHO_ERR_BAD_DATA, "cannot load ", path, ": member 'manifest.json' appears twice");
      rec->manifest = read_text(za.get(), st, path);
      rec->has_manifest = true;
    } else if (member.size() > 4 && member.ends_with(".npy")) {
      std::string name(member.substr(0, member.size() - 4));
      if (!names.insert(name).second)
        fail(TYCHO_ERR_BAD_DATA, "cannot load ", path, ": member '", sdk::printable(member), "' appears twice");
      rec->arrays_owned.push_back(read_array(za.get(), st, std::move(name), path));
    }
  }
  rec->finish();
  return rec.release();
}

}  // namespace tycho::zip_plugin
