// [reconstruct.probe] initial: the probe a run starts from, when it is not the optics' model —
// an .npy array, or a dataset of an HDF5 file such as a CXI file's illumination (docs/xray.md).
// The host reads the file itself (libtycho links HDF5 through tycho::sdk_hdf5): no source or ABI
// is involved, so any source's data can start from any probe, and a prepared file's run too.
#pragma once

#include <toml++/toml.h>

#include <complex>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tycho::host {

// nullopt when [reconstruct.probe] initial is absent or "model". Otherwise the probe of the file
// `initial` (relative to `base_dir`): an .npy (complex64, complex128, float32 or float64) or an
// HDF5 dataset (`initial_dataset`, by default CXI's /entry_1/instrument_1/source_1/illumination,
// else .../source_1/probe; complex as h5py stores it, a compound of two floats "r" and "i", or
// real), of shape (N0, N1) or (M, N0, N1) (its first mode is used), centred in its window as
// tycho's probe is; (N0, N1) must be the run's window. Returned (N0, N1) C order, scaled to
// Σ|P|² = 1 like the model's. Throws naming the file, the dataset and what was expected.
// The settings alone, before any data is read (session.cpp's checks of the config): "model" or
// absent gives nullopt; otherwise the resolved path of a file that exists, with initial_dataset
// only for an HDF5 file. Throws naming the key and the path.
std::optional<std::string> initial_probe_path(const toml::table& probe_t, const std::string& base_dir);

std::optional<std::vector<std::complex<float>>> initial_probe_from_file(const toml::table& probe_t,
                                                                        const std::string& base_dir, int64_t n0,
                                                                        int64_t n1);

}  // namespace tycho::host
