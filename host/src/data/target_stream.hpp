// Targets read per mini-batch ([reconstruct] target_residency = "disk", docs/streaming.md): a
// prepared file's embedded patterns (the zip member patterns.npy, stored uncompressed) are read
// in place, a run of consecutive patterns per request (a compact batch's rows; libzip's raw reads
// of the stored member, no CRC), for each batch the engine asks for through its
// tycho_target_reader (ABI 1.3), while a worker thread reads the next batch ahead into a second
// buffer. The host holds two batches, never the scan; the engine reads them in place.
//
// The worker reads at idle priority (SCHED_IDLE), so it runs on the cores the engine leaves
// idle and does not slow one of the engine's threads, which the others would wait for. It
// cannot starve the run: when the engine asks for a batch still being read, the asking thread
// claims the remaining patterns itself (one shared counter), through its own handle on the file.
#pragma once

#include <tycho/tycho_components.h>

#include <zip.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tycho::host {

// A stored (uncompressed) little-endian C-order float32, uint16 or uint8 .npy member of a zip file, read
// in place through libzip's seek on stored members: no decompression, no copy of the whole member.
// Not thread-safe: one thread per handle (target_stream gives each thread its own, reopen()).
class stored_npy_member {
 public:
  // Throws TYCHO_ERR_BAD_DATA naming the file and member when it is missing, compressed, or not
  // float32, uint16 or uint8 in C order. Unless `check_crc`, the bytes are read raw: libzip
  // computes no CRC over them (reads that seek could never complete one).
  stored_npy_member(const std::string& zip_path, const std::string& member, bool check_crc = false);
  ~stored_npy_member();
  stored_npy_member(const stored_npy_member&) = delete;
  stored_npy_member& operator=(const stored_npy_member&) = delete;

  const std::vector<int64_t>& shape() const { return shape_; }
  DLDataType dtype() const { return dtype_; }  // float32, uint16 or uint8 (as stored)
  bool counts() const { return dtype_.code == kDLUInt; }
  // `count` values (of dtype()) from element `first` of the array into dst.
  void read(uint64_t first, uint64_t count, void* dst);
  const std::string& where() const { return where_; }
  // A checked handle (check_crc) read in order from its start to its end: throws
  // TYCHO_ERR_BAD_DATA naming the file and member when the bytes do not match the CRC-32 the zip
  // records (a damaged file); read otherwise (a seek, not to the end), it checks nothing.
  void check_crc_at_end();
  // Another handle on the same member, independent of this one (for a second thread).
  std::unique_ptr<stored_npy_member> reopen() const;

 private:
  std::string zip_path_, member_;
  zip_t* zip_ = nullptr;
  zip_file_t* file_ = nullptr;
  uint64_t header_bytes_ = 0;
  uint64_t size_ = 0, position_ = 0;  // the member's bytes, and where the next read starts
  bool checked_ = false, in_order_ = true;
  std::vector<int64_t> shape_;
  DLDataType dtype_{kDLFloat, 32, 1};
  std::string where_;
};

// What turns a stored pattern into the engine's target: centred → FFT order (ifftshift), then
// padded into the window with zeros (detector padding, masked). As prepared_dataset and
// pad_detector do on a whole array, value for value.
struct pattern_layout {
  int64_t n0 = 0, n1 = 0;          // stored detector
  int64_t window0 = 0, window1 = 0;  // the engine's window (>= n0, n1)
};

// The batches the driver will ask for, in order: batch k (0-based, over the whole run, the
// first iteration of this session's driver first) as this rank's local indices. Returns false
// past the end.
using batch_schedule = std::function<bool(int64_t k, std::vector<int64_t>& local_indices)>;

class target_stream {
 public:
  // Patterns [first, first + patterns) of the member's (Rx, Ry, n0, n1) array are this rank's
  // local 0 .. patterns-1.
  target_stream(std::unique_ptr<stored_npy_member> member, int64_t first, int64_t patterns, pattern_layout layout,
                batch_schedule schedule);
  ~target_stream();
  target_stream(const target_stream&) = delete;
  target_stream& operator=(const target_stream&) = delete;

  // The local patterns `indices` as targets (count, window0, window1) of the member's dtype
  // (float32, or uint16 counts), in the stream's own buffer (valid until the next call): the
  // batch read ahead when it is the one asked for, else read now; then the next batch is read
  // ahead into the other buffer.
  const void* read(const int64_t* indices, int64_t count);
  // Local patterns [first, first + count) as targets, now (the startup pass; not while read() runs).
  void read_range(int64_t first, int64_t count, void* dst);
  DLDataType dtype() const { return reader_.dtype; }

  // The ABI's view: valid as long as this stream.
  const tycho_target_reader* reader() const { return &reader_; }
  int64_t batches_read_ahead() const { return hits_; }  // how many batches came from read-ahead
  int64_t batches_read_now() const { return misses_; }
  int64_t batches_finished_by_engine() const { return shared_; }  // read-ahead the asking thread joined

 private:
  // One thread's way to the file: its handle and scratch.
  struct pattern_reader {
    std::unique_ptr<stored_npy_member> member;
    std::vector<unsigned char> stored;   // a run of patterns as stored
    std::vector<unsigned char> shifted;  // one pattern in FFT order, before the padding
  };
  // Consecutive local patterns are read in one request, at most this many (a compact batch's
  // rows: one request per row instead of one per pattern).
  static constexpr int64_t k_run_patterns = 64;
  // Local patterns [j, j + count) into `out` (count x window0 x window1 values of dtype()), one request.
  void read_run(pattern_reader& r, int64_t j, int64_t count, unsigned char* out) const;
  // The listed local patterns into `out`, in that order, a run of consecutive ones per request.
  void read_listed(pattern_reader& r, const int64_t* indices, int64_t count, unsigned char* out) const;
  // The end of the run of consecutive indices that starts at i (at most k_run_patterns long).
  static int64_t run_end(const int64_t* indices, int64_t i, int64_t count);
  // One stored pattern (centred) as a target: FFT order, padded to the window, widened.
  template <class Stored, class T>
  void convert_pattern(pattern_reader& r, const Stored* stored, T* out) const;
  std::size_t value_bytes() const { return reader_.dtype.bits / 8; }
  // Claims patterns of the read-ahead batch (claim_) and reads them until none is left;
  // returns the first error, if any.
  std::exception_ptr read_claimed(pattern_reader& r);
  void worker_loop();
  static tycho_status read_callback(void* context, const int64_t* indices, int64_t count, const void** batch);

  int64_t first_, patterns_;
  pattern_layout layout_;
  batch_schedule schedule_;
  tycho_target_reader reader_{};
  pattern_reader own_, worker_reader_;  // the engine's thread's, the worker's

  std::mutex mutex_;  // guards the job state below (not the patterns' reading)
  std::condition_variable cv_;
  int64_t next_ = 0;                       // the batch number the engine should ask for next
  std::vector<int64_t> ahead_indices_;     // the batch being read ahead (empty: none)
  std::vector<unsigned char> ahead_;       // its targets
  std::vector<unsigned char> current_;     // the batch handed to the engine
  std::atomic<int64_t> claim_{0};          // the next pattern of ahead_indices_ to read
  bool job_open_ = false;      // a read-ahead is issued and not yet complete
  bool worker_in_job_ = false; // the worker is reading patterns of it
  bool stop_ = false;
  std::exception_ptr ahead_error_;
  int64_t hits_ = 0, misses_ = 0, shared_ = 0;
  mutable std::atomic<int64_t> patterns_read_{0};  // by either thread (read_pattern checks each is this block's)
  std::thread worker_;
};

}  // namespace tycho::host
