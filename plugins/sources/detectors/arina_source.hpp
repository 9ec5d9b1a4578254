// The `arina` source: a Dectris ARINA / EIGER NeXus master file (`<name>_master.h5`) and the data
// files its /entry/data links name (`<name>_data_000001.h5`, ...), frames concatenated in the
// links' order; the scan's metadata from the companion file the acquisition software writes
// beside them (`<name>.h5`, group "STEM Metadata") or the config.
//
// Chunks compressed with bitshuffle/LZ4 (HDF5 filter 32008) or LZ4 (32004) are decoded here
// (chunk_codecs.hpp), any other storage through libhdf5's own pipeline. The master's pixel mask
// (non-zero = bad) and the pixels whose flat-field factor is not finite and > 0 go to the host
// as the detector's mask (read_detector_mask: masked by the host's bad-pixel path, their values
// delivered as 0), and the flat field, when the detector did not apply it, multiplies the counts.
#pragma once

#include <tycho/sdk.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <tycho/sdk/hdf5/h5_handle.hpp>

#include "raw_file.hpp"

namespace tycho::detectors {

// One data dataset (a link of /entry/data) and how its chunks are read.
struct arina_part {
  std::string name;         // "data_000001"
  std::string where;        // "master.h5:/entry/data/data_000001 (-> data.h5:/entry/data/data)"
  h5::h5_id dataset;
  int64_t first = 0, frames = 0;  // global frame numbers [first, first + frames)
  // hdf5: libhdf5's pipeline (contiguous, or filters other than ours); raw: unfiltered chunks.
  enum class codec { hdf5, raw, bitshuffle_lz4, bitshuffle, lz4 } how = codec::hdf5;
  int64_t chunk_frames = 0;       // frames per chunk (direct decoding)
  std::shared_ptr<raw_file> file; // direct decoding: the file holding the chunks, read by offset
  uint64_t base_address = 0;      // its user block: HDF5 addresses count from its end
};

struct arina_data {
  std::string master, description;
  h5::h5_id master_file;
  std::vector<arina_part> parts;
  int64_t frames = 0, rows = 0, cols = 0;
  DLDataType element{};    // the stored integers
  bool big_endian = false;
  std::vector<float> gain;      // per pixel: 1 or the flat field's factor; empty: all 1
  std::vector<uint8_t> mask;    // per pixel: 1 = masked (pixel_mask, bad flat field); empty: none
  tycho_dataset_info info{};
  std::string report;       // what the open found, for the log
};

void open_arina(const sdk::config_view& config, arina_data& d);

class arina_source {
 public:
  using call_scope = h5::h5_session;
  explicit arina_source(const sdk::config_view& config);
  const tycho_dataset_info& info() const { return d_.info; }
  void read(int64_t first, int64_t count, float* dst);
  void read_stored(int64_t first, int64_t count, void* dst);
  // Stored counts only when nothing is scaled (a flat field's factor makes fractions); masked
  // pixels are 0 either way, and the host masks them (detector_mask).
  bool delivers_stored() const { return d_.gain.empty(); }
  const std::vector<uint8_t>& detector_mask() const { return d_.mask; }

 private:
  arina_source(const sdk::config_view& config, bool guarded);
  template <class T>
  void read_frames(int64_t first, int64_t count, T* dst);
  const unsigned char* frame_bytes(const arina_part& p, int64_t frame);  // from the decoded chunk cache

  arina_data d_;
  // The last decoded chunk: part, first frame, bytes.
  const arina_part* cached_part_ = nullptr;
  int64_t cached_first_ = -1;
  std::vector<unsigned char> chunk_, raw_;
};

extern const tycho_setting k_arina_settings[];
extern const char* const k_arina_keys[];

}  // namespace tycho::detectors
