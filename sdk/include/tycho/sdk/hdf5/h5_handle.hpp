// Ownership of HDF5 identifiers, and the scope every HDF5 call of a plugin runs in. Shared by
// the HDF5 plugins (emd, cxi); each plugin library holds its own copy (and its own lock).
#pragma once

#include <hdf5.h>

#include <mutex>
#include <utility>

namespace tycho::h5 {

// Owns one HDF5 identifier of any kind (file, group, dataset, attribute, dataspace, datatype)
// and releases it with H5Idec_ref, which closes the object whatever its kind.
class h5_id {
 public:
  h5_id() = default;
  explicit h5_id(hid_t id) : id_(id) {}
  h5_id(h5_id&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
  h5_id& operator=(h5_id&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  h5_id(const h5_id&) = delete;
  h5_id& operator=(const h5_id&) = delete;
  ~h5_id() { reset(); }

  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0) H5Idec_ref(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Held around every HDF5 call: Debian's libhdf5 is the serial (not thread-safe) build, so the
// plugin's calls are serialised (per plugin library: two HDF5 plugins used at once from
// different threads are not serialised against each other); and HDF5's automatic error printing is switched off, because
// every failure is turned into a tycho error that names the file and the path instead. The
// previous printing handler is restored afterwards, so other HDF5 users in the process keep it.
class h5_session {
 public:
  h5_session() : lock_(mutex()) {
    H5Eget_auto2(H5E_DEFAULT, &old_func_, &old_data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~h5_session() { H5Eset_auto2(H5E_DEFAULT, old_func_, old_data_); }
  h5_session(const h5_session&) = delete;
  h5_session& operator=(const h5_session&) = delete;

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  std::lock_guard<std::mutex> lock_;
  H5E_auto2_t old_func_ = nullptr;
  void* old_data_ = nullptr;
};

}  // namespace tycho::h5
