#include <tycho/sdk/hdf5/h5_read.hpp>

#include <tycho/sdk/error.hpp>

#include <algorithm>
#include <filesystem>
#include <limits>

namespace tycho::h5 {

h5_id open_data_file(const std::string& path, const std::string& given, const std::string& reads) {
  using sdk::fail;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (std::filesystem::path(given).is_relative())
      fail(TYCHO_ERR_NOT_FOUND, "data file '", path, "' does not exist ([data] path = \"", given,
           "\" is relative to the config file's folder)");
    fail(TYCHO_ERR_NOT_FOUND, "data file '", path, "' does not exist");
  }
  if (std::filesystem::is_directory(path, ec))
    fail(TYCHO_ERR_BAD_DATA, "data file '", path, "' is a directory, expected an HDF5 file");
  if (H5Fis_hdf5(path.c_str()) <= 0) fail(TYCHO_ERR_BAD_DATA, "data file '", path, "' is not an HDF5 file (", reads, ")");
  h5_id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file) fail(TYCHO_ERR_IO, "could not open the HDF5 file '", path, "' for reading");
  return file;
}
namespace {

// An attribute or a dataset: both have a type, a dataspace and a read call, and EMD writers
// store metadata values as either.
struct h5_value {
  h5_id id;
  bool is_attribute = false;

  h5_id type() const { return h5_id(is_attribute ? H5Aget_type(id.get()) : H5Dget_type(id.get())); }
  h5_id space() const {
    return h5_id(is_attribute ? H5Aget_space(id.get()) : H5Dget_space(id.get()));
  }
  bool read(hid_t mem_type, void* buf) const {
    herr_t rc = is_attribute ? H5Aread(id.get(), mem_type, buf)
                             : H5Dread(id.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    return rc >= 0;
  }
  int64_t element_count() const {
    h5_id s = space();
    return s ? static_cast<int64_t>(H5Sget_simple_extent_npoints(s.get())) : -1;
  }
};

// An integer or floating-point type of at most 16 bytes: the file states a type's size, and
// libhdf5 converts through a buffer of that size per element (a crafted "float" of 1.9 GB made a
// one-element read allocate 1.9 GB: the emd fuzzer's finding).
bool plain_number_type(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  return (cls == H5T_INTEGER || cls == H5T_FLOAT) && size > 0 && size <= 16;
}

// The attribute `name` of `group`, else the dataset `name` inside it.
std::optional<h5_value> find_value(hid_t group, const std::string& name) {
  if (H5Aexists(group, name.c_str()) > 0) {
    h5_id a(H5Aopen(group, name.c_str(), H5P_DEFAULT));
    if (a) return h5_value{std::move(a), true};
  }
  h5_id obj = open_object(group, name);
  if (obj && is_dataset(obj.get())) return h5_value{std::move(obj), false};
  return std::nullopt;
}

std::optional<std::string> read_string_value(const h5_value& v) {
  h5_id file_type = v.type();
  if (!file_type || H5Tget_class(file_type.get()) != H5T_STRING || v.element_count() != 1)
    return std::nullopt;
  if (H5Tis_variable_str(file_type.get()) > 0) {
    h5_id mem_type(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem_type.get(), H5T_VARIABLE);
    H5Tset_cset(mem_type.get(), H5Tget_cset(file_type.get()));
    char* p = nullptr;
    if (!v.read(mem_type.get(), &p) || p == nullptr) return std::nullopt;
    std::string s(p);
    H5free_memory(p);  // allocated by the library's own allocator
    return s;
  }
  // Fixed length: read the bytes as stored, then cut at the first NUL and drop space padding.
  // The size is the file's word: a metadata string beyond 1 MiB is not one (nothing allocated).
  std::size_t size = H5Tget_size(file_type.get());
  if (size == 0 || size > (std::size_t(1) << 20)) return std::nullopt;
  std::vector<char> buf(size + 1, '\0');
  if (!v.read(file_type.get(), buf.data())) return std::nullopt;
  std::string s(buf.data());
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

struct visit_state {
  std::vector<dataset_entry> found;
};

herr_t visit_link(hid_t group, const char* name, const H5L_info_t* info, void* op_data) {
  // Soft and external links would list an array twice or leave the file: hard links only.
  if (info->type != H5L_TYPE_HARD) return 0;
  h5_id obj(H5Oopen(group, name, H5P_DEFAULT));
  if (obj && is_dataset(obj.get())) {
    static_cast<visit_state*>(op_data)->found.push_back(
        {std::string("/") + name, dataset_shape(obj.get())});
  }
  return 0;
}

}  // namespace

h5_id open_object(hid_t loc, const std::string& path) {
  if (path.empty()) return h5_id();
  return h5_id(H5Oopen(loc, path.c_str(), H5P_DEFAULT));
}

bool is_dataset(hid_t obj) { return H5Iget_type(obj) == H5I_DATASET; }
bool is_group(hid_t obj) { return H5Iget_type(obj) == H5I_GROUP; }

std::vector<int64_t> dataset_shape(hid_t dataset) {
  h5_id space(H5Dget_space(dataset));
  if (!space) return {};
  int ndim = H5Sget_simple_extent_ndims(space.get());
  if (ndim <= 0) return {};
  std::vector<hsize_t> dims(static_cast<std::size_t>(ndim));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::optional<DLDataType> dl_dtype(hid_t type) {
  std::size_t bytes = H5Tget_size(type);
  auto bits = static_cast<uint8_t>(bytes * 8);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8) return std::nullopt;
      return DLDataType{static_cast<uint8_t>(H5Tget_sign(type) == H5T_SGN_NONE ? kDLUInt : kDLInt),
                        bits, 1};
    case H5T_FLOAT:
      if (bytes != 2 && bytes != 4 && bytes != 8) return std::nullopt;
      return DLDataType{kDLFloat, bits, 1};
    default:
      return std::nullopt;
  }
}

std::string type_text(hid_t type) {
  if (auto dt = dl_dtype(type)) {
    const char* base = dt->code == kDLFloat ? "float" : dt->code == kDLInt ? "int" : "uint";
    return base + std::to_string(dt->bits);
  }
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: return std::to_string(H5Tget_size(type) * 8) + "-bit integer";
    case H5T_FLOAT: return std::to_string(H5Tget_size(type) * 8) + "-bit float";
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    case H5T_REFERENCE: return "reference";
    case H5T_TIME: return "time";
    default: return "unknown";
  }
}

std::vector<dataset_entry> list_datasets(hid_t file) {
  visit_state state;
  H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, &visit_link, &state);
  std::sort(state.found.begin(), state.found.end(),
            [](const dataset_entry& a, const dataset_entry& b) { return a.path < b.path; });
  return state.found;
}

std::optional<double> read_number(hid_t group, const std::string& name) {
  auto v = find_value(group, name);
  if (!v) return std::nullopt;
  h5_id type = v->type();
  if (!type) return std::nullopt;
  if (!plain_number_type(type.get()) || v->element_count() != 1) return std::nullopt;
  double x = std::numeric_limits<double>::quiet_NaN();
  if (!v->read(H5T_NATIVE_DOUBLE, &x)) return std::nullopt;
  return x;
}

std::optional<std::string> read_string(hid_t group, const std::string& name) {
  auto v = find_value(group, name);
  if (!v) return std::nullopt;
  return read_string_value(*v);
}

std::optional<std::string> read_string_attribute(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) return std::nullopt;
  h5_value v{h5_id(H5Aopen(obj, name.c_str(), H5P_DEFAULT)), true};
  if (!v.id) return std::nullopt;
  return read_string_value(v);
}

std::optional<std::vector<double>> read_numbers(hid_t loc, const std::string& path) {
  h5_id obj = open_object(loc, path);
  if (!obj || !is_dataset(obj.get())) return std::nullopt;
  h5_value v{std::move(obj), false};
  h5_id type = v.type();
  if (!type) return std::nullopt;
  int64_t n = v.element_count();
  if (!plain_number_type(type.get()) || n < 0) return std::nullopt;
  // The count is the file's word: a table of positions or calibrations beyond 2^27 values
  // (1 GiB as float64) is refused before it is allocated.
  if (n > (int64_t(1) << 27)) {
    char file[4096] = "";
    H5Fget_name(loc, file, sizeof file);
    sdk::fail(TYCHO_ERR_BAD_DATA, "'", file, ":", path, "' holds ", n,
              " values, more than the 134217728 (2^27) a table of positions or calibrations may hold");
  }
  std::vector<double> values(static_cast<std::size_t>(n));
  if (n > 0 && !v.read(H5T_NATIVE_DOUBLE, values.data())) return std::nullopt;
  return values;
}

std::optional<std::vector<double>> read_first_numbers(hid_t loc, const std::string& path, int64_t count) {
  h5_id obj = open_object(loc, path);
  if (!obj || !is_dataset(obj.get()) || count < 0) return std::nullopt;
  h5_id type(H5Dget_type(obj.get()));
  if (!type) return std::nullopt;
  h5_id file_space(H5Dget_space(obj.get()));
  if (!plain_number_type(type.get()) || !file_space || H5Sget_simple_extent_ndims(file_space.get()) != 1)
    return std::nullopt;
  hsize_t n = 0;
  if (H5Sget_simple_extent_dims(file_space.get(), &n, nullptr) != 1) return std::nullopt;
  const hsize_t take = std::min<hsize_t>(n, hsize_t(count));
  std::vector<double> values(static_cast<std::size_t>(take));
  if (take == 0) return values;
  const hsize_t start = 0;
  h5_id mem_space(H5Screate_simple(1, &take, nullptr));
  if (!mem_space || H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &take, nullptr) < 0 ||
      H5Dread(obj.get(), H5T_NATIVE_DOUBLE, mem_space.get(), file_space.get(), H5P_DEFAULT, values.data()) < 0)
    return std::nullopt;
  return values;
}

}  // namespace tycho::h5
