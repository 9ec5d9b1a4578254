#include "pattern_reader.hpp"

#include <tycho/sdk.hpp>
#include <tycho/sdk/checked.hpp>

#include <algorithm>
#include <cstddef>

#include <tycho/sdk/hdf5/h5_memory_type.hpp>
#include <tycho/sdk/hdf5/h5_read.hpp>

namespace tycho::cxi {

using sdk::fail;

const char* role_name(axis_role r) {
  switch (r) {
    case axis_role::Rx: return "Rx";
    case axis_role::Ry: return "Ry";
    case axis_role::P: return "P";
    case axis_role::Qx: return "Qx";
    case axis_role::Qy: return "Qy";
  }
  return "?";
}

std::string roles_text(const std::vector<axis_role>& roles) {
  std::string s = "[";
  for (std::size_t i = 0; i < roles.size(); ++i) s += std::string(i ? ", " : "") + role_name(roles[i]);
  return s + "]";
}

std::vector<axis_role> parse_roles(const std::vector<std::string>& names, const std::string& key) {
  std::vector<axis_role> roles;
  for (const std::string& n : names) {
    if (n == "Rx") roles.push_back(axis_role::Rx);
    else if (n == "Ry") roles.push_back(axis_role::Ry);
    else if (n == "P") roles.push_back(axis_role::P);
    else if (n == "Qx") roles.push_back(axis_role::Qx);
    else if (n == "Qy") roles.push_back(axis_role::Qy);
    else
      fail(TYCHO_ERR_INVALID_ARGUMENT, key, ": unknown axis \"", n,
           "\"; the axes are Rx, Ry (scan), P (a list of patterns) and Qx, Qy (detector)");
  }
  return roles;
}

pattern_layout make_layout(const std::vector<axis_role>& roles, const std::vector<int64_t>& dims,
                           const std::string& what, const std::string& roles_from) {
  using R = axis_role;
  auto count = [&](R r) { return std::count(roles.begin(), roles.end(), r); };
  const bool four = roles.size() == 4 && count(R::Rx) == 1 && count(R::Ry) == 1 &&
                    count(R::Qx) == 1 && count(R::Qy) == 1;
  const bool three = roles.size() == 3 && count(R::P) == 1 && count(R::Qx) == 1 && count(R::Qy) == 1;
  if (!four && !three)
    fail(TYCHO_ERR_INVALID_ARGUMENT, roles_from, " = ", roles_text(roles),
         " must name each axis once: four axes Rx, Ry, Qx, Qy in the dataset's order (e.g. "
         "[\"Qx\", \"Qy\", \"Rx\", \"Ry\"]), or three axes P, Qx, Qy for a list of patterns");
  if (dims.size() != roles.size())
    fail(TYCHO_ERR_BAD_DATA, "'", what, "' has shape ", h5::shape_text(dims), " (", dims.size(),
         " axes), but ", roles_from, " = ", roles_text(roles), " describes ", roles.size(), " axes");
  if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d == 0; }))
    fail(TYCHO_ERR_BAD_DATA, "'", what, "' has shape ", h5::shape_text(dims), ", which holds no patterns");
  pattern_layout l;
  l.roles = roles;
  l.dims = dims;
  l.scan[1] = 1;
  for (std::size_t a = 0; a < roles.size(); ++a) {
    switch (roles[a]) {
      case R::Rx: case R::P: l.scan[0] = dims[a]; break;
      case R::Ry: l.scan[1] = dims[a]; break;
      case R::Qx: l.detector[0] = dims[a]; break;
      case R::Qy: l.detector[1] = dims[a]; break;
    }
  }
  sdk::check_data_shape(l.scan, l.detector, "'" + what + "'");
  return l;
}

namespace {

// Whether the dataset's own C order is the destination's: (Rx, Ry, Qx, Qy) or (P, Qx, Qy).
bool canonical(const pattern_layout& l) {
  using R = axis_role;
  if (l.roles.size() == 4)
    return l.roles == std::vector<R>{R::Rx, R::Ry, R::Qx, R::Qy};
  return l.roles == std::vector<R>{R::P, R::Qx, R::Qy};
}

// Reads the box of scan rows [row, row + n_rows) x columns [col, col + n_cols) (whole detector)
// into dst, which holds those patterns in C order over (row, col), each (Qx, Qy), as elements
// of HDF5's `memory_type` (T: float, or an integer of the stored dtype's size).
template <class T>
void read_box(hid_t dataset, const pattern_layout& l, int64_t row, int64_t col, int64_t n_rows,
              int64_t n_cols, hid_t memory_type, T* dst, std::vector<T>& staging, const std::string& description) {
  const std::size_t rank = l.dims.size();
  std::vector<hsize_t> start(rank), count(rank);
  std::vector<int64_t> dst_stride(rank);  // elements of dst per step along each dataset axis
  const int64_t pattern = l.detector[0] * l.detector[1];
  for (std::size_t a = 0; a < rank; ++a) {
    switch (l.roles[a]) {
      case axis_role::Rx: case axis_role::P:
        start[a] = hsize_t(row), count[a] = hsize_t(n_rows), dst_stride[a] = n_cols * pattern;
        break;
      case axis_role::Ry: start[a] = hsize_t(col), count[a] = hsize_t(n_cols), dst_stride[a] = pattern; break;
      case axis_role::Qx: start[a] = 0, count[a] = hsize_t(l.detector[0]), dst_stride[a] = l.detector[1]; break;
      case axis_role::Qy: start[a] = 0, count[a] = hsize_t(l.detector[1]), dst_stride[a] = 1; break;
    }
  }
  const bool direct = canonical(l);
  const std::size_t n = std::size_t(n_rows * n_cols * pattern);
  if (!direct) staging.resize(n);
  T* buffer = direct ? dst : staging.data();
  h5::h5_id file_space(H5Dget_space(dataset));
  h5::h5_id mem_space(H5Screate_simple(int(rank), count.data(), nullptr));
  if (!file_space || !mem_space ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
      H5Dread(dataset, memory_type, mem_space.get(), file_space.get(), H5P_DEFAULT, buffer) < 0)
    fail(TYCHO_ERR_IO, "reading patterns [", row * l.scan[1] + col, ", ",
         row * l.scan[1] + col + n_rows * n_cols, ") of '", description,
         "' failed (the file may be truncated or use an unavailable filter)");
  if (direct) return;

  // Transpose: walk the staging buffer in the dataset's C order (an odometer over its axes,
  // the last axis innermost) and scatter to dst.
  std::vector<int64_t> index(rank, 0);
  const int64_t inner = int64_t(count[rank - 1]), inner_stride = dst_stride[rank - 1];
  int64_t offset = 0;  // dst offset of `index` with the last axis at 0
  for (std::size_t k = 0; k < n; k += std::size_t(inner)) {
    const T* src = buffer + k;
    T* out = dst + offset;
    for (int64_t j = 0; j < inner; ++j) out[j * inner_stride] = src[j];
    for (std::size_t a = rank - 1; a-- > 0;) {  // advance the outer axes
      if (++index[a] < int64_t(count[a])) {
        offset += dst_stride[a];
        break;
      }
      offset -= (index[a] - 1) * dst_stride[a];
      index[a] = 0;
    }
  }
}

template <class T>
void read_patterns_as(hid_t dataset, const pattern_layout& l, int64_t first, int64_t count, hid_t memory_type, T* dst,
                      const std::string& description) {
  const int64_t ry = l.scan[1], pattern = l.detector[0] * l.detector[1];
  // Patterns per read: bounded so that a transposing read's staging buffer stays near 16 MiB.
  const int64_t most = std::max<int64_t>(1, (int64_t(16) << 20) / (pattern * int64_t(sizeof(T))));
  std::vector<T> staging;
  int64_t pos = first;
  const int64_t end = first + count;
  while (pos < end) {
    const int64_t row = pos / ry, col = pos % ry;
    int64_t n_rows = 1, n_cols = 0;
    if (col != 0 || end - pos < ry || ry > most) {
      n_cols = std::min({ry - col, end - pos, most});  // part of one row
    } else {
      n_cols = ry;  // whole rows
      n_rows = std::min((end - pos) / ry, std::max<int64_t>(1, most / ry));
    }
    read_box(dataset, l, row, col, n_rows, n_cols, memory_type, dst + (pos - first) * pattern, staging, description);
    pos += n_rows * n_cols;
  }
}

}  // namespace

void read_patterns(hid_t dataset, const pattern_layout& l, int64_t first, int64_t count, float* dst,
                   const std::string& description) {
  read_patterns_as(dataset, l, first, count, H5T_NATIVE_FLOAT, dst, description);
}

void read_stored_patterns(hid_t dataset, const pattern_layout& l, int64_t first, int64_t count, DLDataType stored,
                          void* dst, const std::string& description) {
  const h5::h5_id type = h5::memory_type_of(stored);
  if (stored.bits == 8) {
    read_patterns_as(dataset, l, first, count, type.get(), static_cast<uint8_t*>(dst), description);
  } else if (stored.bits == 16) {
    read_patterns_as(dataset, l, first, count, type.get(), static_cast<uint16_t*>(dst), description);
  } else {
    read_patterns_as(dataset, l, first, count, type.get(), static_cast<float*>(dst), description);
  }
}

}  // namespace tycho::cxi
