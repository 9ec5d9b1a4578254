// The HDF5 memory type of a DLPack dtype, for sources that read a dataset in its stored dtype
// (tycho_dataset_info::reads_stored_dtype, docs/plugin-guide.md): HDF5 then copies the stored
// values unconverted (only byte-swapped from a big-endian file). Call inside an h5_session.
#pragma once

#include <tycho/sdk.hpp>

#include <hdf5.h>

#include "h5_handle.hpp"

namespace tycho::h5 {

// A new type id (closed by h5_id) for uint8, uint16, float16 (IEEE binary16, little-endian as
// the host, built as h5py builds it: HDF5 before 1.14.4 predefines no 16-bit float) or float32.
// Throws TYCHO_ERR_INTERNAL for any other dtype.
inline h5_id memory_type_of(DLDataType t) {
  hid_t id = -1;
  if (t.code == kDLUInt && t.bits == 8) {
    id = H5Tcopy(H5T_NATIVE_UINT8);
  } else if (t.code == kDLUInt && t.bits == 16) {
    id = H5Tcopy(H5T_NATIVE_UINT16);
  } else if (t.code == kDLFloat && t.bits == 32) {
    id = H5Tcopy(H5T_NATIVE_FLOAT);
  } else if (t.code == kDLFloat && t.bits == 16) {
    id = H5Tcopy(H5T_IEEE_F32LE);
    if (id >= 0 && (H5Tset_fields(id, 15, 10, 5, 0, 10) < 0 || H5Tset_size(id, 2) < 0 || H5Tset_ebias(id, 15) < 0 ||
                    H5Tpack(id) < 0)) {
      H5Tclose(id);
      id = -1;
    }
  } else {
    sdk::fail(TYCHO_ERR_INTERNAL, "no HDF5 memory type for ", sdk::dtype_name(t));
  }
  if (id < 0) sdk::fail(TYCHO_ERR_INTERNAL, "HDF5 could not make the memory type for ", sdk::dtype_name(t));
  return h5_id(id);
}

}  // namespace tycho::h5
