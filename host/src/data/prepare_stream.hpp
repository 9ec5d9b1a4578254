// `tycho preprocess` in bounded memory: the source's patterns read in chunks (chunked_source),
// the stage's statistics taken in passes before the file is written (plan_preprocess_stage),
// then the last pass produced pattern by pattern into the prepared file's patterns member while
// the format writes it (tycho_array_producer, ABI 1.3): the host holds a chunk of the source
// and one pattern, never the scan. The bytes are those the in-memory path writes (the same
// per-pattern code in the same order), centred, float32 or, when the results stay whole counts
// below 65536, uint16 (uint8 when none can pass 255: stored_count_bytes).
#pragma once

#include <tycho/tycho_components.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "data/chunked_preprocess.hpp"
#include "data/preprocess_stage.hpp"
#include "tycho/host/dataset.hpp"
#include "tycho/host/preprocess.hpp"

namespace tycho::host {

class streamed_patterns {
 public:
  // Opens the source, reads its first pass (bad pixels) and the stage's statistics; refuses
  // bad pixels (a prepared file carries no mask yet, `refuse` is called with the header).
  streamed_patterns(const component_ref& source, const tycho_config* data_table, const config_document& doc,
                    const std::function<void(const dataset&)>& refuse, int64_t chunk_bytes = int64_t(4) << 20);
  // The data after the stage (shape, calibration); its totals once every pattern is produced.
  const dataset& header() const { return after_; }
  const tycho_dataset_info& source_info() const { return source_info_; }
  const preprocess_report& report() const { return plan_.report; }
  bool counts() const { return counts_; }  // produced as counts (else float32)
  // uint8 or uint16 counts (stored_count_bytes), or float32.
  DLDataType dtype() const {
    return counts_ ? DLDataType{kDLUInt, uint8_t(8 * count_bytes_), 1} : DLDataType{kDLFloat, 32, 1};
  }
  const std::string& read_as() const { return src_.read_as(); }
  int64_t passes() const { return src_.passes(); }
  // The producer of the (Rx, Ry, N0, N1) centred patterns, valid while this object lives.
  tycho_array_producer producer() { return {&streamed_patterns::produce_callback, this}; }
  bool complete() const { return produced_ == total_patterns_; }
  // Every pattern produced and dropped: the header's totals, for a file that does not embed them.
  void drain();

 private:
  void produce(unsigned char* dst, uint64_t bytes);
  void next_pattern();  // the next centred pattern into pattern_bytes_
  static tycho_status produce_callback(void* context, void* dst, size_t bytes);
  chunked_source src_;
  dataset after_;  // the header after the stage (the source's own stays as it reads)
  tycho_dataset_info source_info_{};
  stage_plan plan_;
  bool counts_ = false;
  int count_bytes_ = 2;  // with counts_: 1 (uint8) or 2 (uint16)
  double normalised_to_ = 0;
  int64_t total_patterns_ = 0, produced_ = 0;
  double total_ = 0;
  pattern_scratch scratch_;
  std::vector<float> out_, centred_;
  std::vector<uint16_t> counts_out_, counts_centred_;
  std::vector<unsigned char> pattern_bytes_;
  std::size_t at_ = 0;  // bytes of pattern_bytes_ already given
};

}  // namespace tycho::host
