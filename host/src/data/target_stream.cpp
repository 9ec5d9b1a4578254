#include "data/target_stream.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/sdk/npy.hpp>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "data/detector_padding.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/preprocess.hpp"

namespace tycho::host {

stored_npy_member::stored_npy_member(const std::string& zip_path, const std::string& member, bool check_crc)
    : zip_path_(zip_path), member_(member), checked_(check_crc), where_(cat("'", zip_path, "': member '", member, "'")) {
  int err = 0;
  zip_ = zip_open(zip_path.c_str(), ZIP_RDONLY, &err);
  if (zip_ == nullptr) fail(TYCHO_ERR_IO, "'", zip_path, "' cannot be opened as a zip file (libzip error ", err, ")");
  try {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat(zip_, member.c_str(), 0, &st) != 0) fail(TYCHO_ERR_BAD_DATA, where_, " is missing");
    if ((st.valid & ZIP_STAT_COMP_METHOD) && st.comp_method != ZIP_CM_STORE)
      fail(TYCHO_ERR_BAD_DATA, where_, " is compressed (method ", st.comp_method,
           "); reading it per batch needs it stored: prepare the data again with this tycho (tycho preprocess)");
    if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE)
      fail(TYCHO_ERR_BAD_DATA, where_, " is encrypted");
    // Unchecked: the stored bytes as they are (ZIP_FL_COMPRESSED: for a stored member, its data),
    // so that libzip computes no CRC over reads that seek and read parts, which could never
    // complete it. Checked: libzip's CRC over reads in order from the start (check_crc_at_end).
    file_ = zip_fopen_index(zip_, st.index, checked_ ? 0 : ZIP_FL_COMPRESSED);
    if (file_ == nullptr) fail(TYCHO_ERR_IO, where_, " cannot be opened: ", zip_strerror(zip_));
    size_ = st.size;
    auto read = [&](void* dst, std::size_t n) {
      if (zip_fread(file_, dst, n) != zip_int64_t(n)) fail(TYCHO_ERR_BAD_DATA, where_, " is truncated");
      position_ += n;
    };
    sdk::npy::header h;
    try {
      h = sdk::npy::read_header(read, st.size, where_);
    } catch (const sdk::error& e) {  // the SDK's error type: rethrown as the host's, so the CLI names it
      fail(e.status, e.what());
    }
    const bool f32 = h.dtype && h.dtype->code == kDLFloat && h.dtype->bits == 32 && !h.big_endian;
    const bool u16 = h.dtype && h.dtype->code == kDLUInt && h.dtype->bits == 16 && !h.big_endian;
    const bool u8 = h.dtype && h.dtype->code == kDLUInt && h.dtype->bits == 8;
    if (!(f32 || u16 || u8) || h.fortran_order)
      fail(TYCHO_ERR_BAD_DATA, where_, " has dtype ",
           h.dtype ? sdk::npy::dtype_text(*h.dtype) : cat("'", sdk::printable(h.descr), "'"),
           h.big_endian ? " (big-endian)" : "", h.fortran_order ? " in Fortran order" : "",
           "; expected little-endian float32, uint16 or uint8 in C order");
    dtype_ = *h.dtype;
    if (h.header_bytes + h.data_bytes > st.size) fail(TYCHO_ERR_BAD_DATA, where_, " is truncated");
    header_bytes_ = h.header_bytes;
    shape_ = h.shape;
  } catch (...) {
    if (file_ != nullptr) zip_fclose(file_);
    zip_discard(zip_);
    throw;
  }
}

stored_npy_member::~stored_npy_member() {
  if (file_ != nullptr) zip_fclose(file_);
  if (zip_ != nullptr) zip_discard(zip_);
}

void stored_npy_member::read(uint64_t first, uint64_t count, void* dst) {
  const uint64_t value = dtype_.bits / 8u;
  const uint64_t offset = header_bytes_ + first * value;
  if (offset != position_) {  // a read that continues the last one needs no seek (and keeps a CRC going)
    in_order_ = false;
    if (zip_fseek(file_, zip_int64_t(offset), SEEK_SET) != 0)
      fail(TYCHO_ERR_IO, where_, ": cannot seek to byte ", offset, ": ", zip_file_strerror(file_));
  }
  const uint64_t bytes = count * value;
  if (zip_fread(file_, dst, bytes) != zip_int64_t(bytes))
    fail(TYCHO_ERR_IO, where_, ": reading ", bytes, " bytes at byte ", offset, " failed: ", zip_file_strerror(file_));
  position_ = offset + bytes;
}

void stored_npy_member::check_crc_at_end() {
  if (!checked_ || !in_order_ || position_ != size_) return;
  // libzip compares the CRC-32 it computed over the reads with the zip's when a read finds the end.
  unsigned char past_end = 0;
  if (zip_fread(file_, &past_end, 1) < 0)
    fail(TYCHO_ERR_BAD_DATA, where_, " does not match the CRC-32 the zip records for it (",
         zip_file_strerror(file_), "): the file is damaged; prepare the data again (tycho preprocess)");
}

std::unique_ptr<stored_npy_member> stored_npy_member::reopen() const {
  return std::make_unique<stored_npy_member>(zip_path_, member_);
}

target_stream::target_stream(std::unique_ptr<stored_npy_member> member, int64_t first, int64_t patterns,
                             pattern_layout layout, batch_schedule schedule)
    : first_(first), patterns_(patterns), layout_(layout), schedule_(std::move(schedule)) {
  reader_.struct_size = sizeof reader_;
  // float32, or uint16 counts (stored as uint16, or as uint8 and widened per pattern)
  reader_.dtype = member->counts() ? DLDataType{kDLUInt, 16, 1} : DLDataType{kDLFloat, 32, 1};
  reader_.shape[0] = patterns_;
  reader_.shape[1] = layout_.window0;
  reader_.shape[2] = layout_.window1;
  reader_.read = &target_stream::read_callback;
  reader_.context = this;
  for (pattern_reader* r : {&own_, &worker_reader_}) r->shifted.resize(std::size_t(layout_.n0 * layout_.n1) * value_bytes());
  if (schedule_) worker_reader_.member = member->reopen();
  own_.member = std::move(member);
  if (schedule_) worker_ = std::thread([this] { worker_loop(); });
}

target_stream::~target_stream() {
  if (schedule_ && hits_ + misses_ > 0)
    log_info("targets", cat(hits_ + misses_, " batches read from disk, ", hits_, " of them read ahead (", shared_,
                            " finished by the engine's thread); ", patterns_read_.load(), " patterns read, all of ",
                            "this process's block [", first_, ", ", first_ + patterns_, ") of the file"));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

template <class Stored, class T>
void target_stream::convert_pattern(pattern_reader& r, const Stored* stored, T* out) const {
  if (layout_.window0 * layout_.window1 == layout_.n0 * layout_.n1) {
    ifftshift_pattern(stored, out, layout_.n0, layout_.n1);
  } else {
    T* shifted = reinterpret_cast<T*>(r.shifted.data());
    ifftshift_pattern(stored, shifted, layout_.n0, layout_.n1);
    pad_fft_order_pattern(shifted, layout_.n0, layout_.n1, out, layout_.window0, layout_.window1);
  }
}

void target_stream::read_run(pattern_reader& r, int64_t j, int64_t count, unsigned char* out) const {
  const int64_t n = layout_.n0 * layout_.n1, m = layout_.window0 * layout_.window1;
  if (j < 0 || count < 0 || count > patterns_ - j)
    fail(TYCHO_ERR_INVALID_ARGUMENT, r.member->where(), ": patterns [", j, ", ", j + count, ") asked for, outside [0, ",
         patterns_, ")");
  const std::size_t stored_bytes = r.member->dtype().bits / 8u;
  r.stored.resize(std::size_t(count * n) * stored_bytes);
  r.member->read(uint64_t(first_ + j) * uint64_t(n), uint64_t(count * n), r.stored.data());
  patterns_read_.fetch_add(count, std::memory_order_relaxed);
  for (int64_t l = 0; l < count; ++l) {
    const unsigned char* p = r.stored.data() + std::size_t(l * n) * stored_bytes;
    unsigned char* o = out + std::size_t(l * m) * value_bytes();
    if (reader_.dtype.code == kDLFloat)
      convert_pattern(r, reinterpret_cast<const float*>(p), reinterpret_cast<float*>(o));
    else if (stored_bytes == 1)
      convert_pattern(r, reinterpret_cast<const uint8_t*>(p), reinterpret_cast<uint16_t*>(o));
    else
      convert_pattern(r, reinterpret_cast<const uint16_t*>(p), reinterpret_cast<uint16_t*>(o));
  }
}

int64_t target_stream::run_end(const int64_t* indices, int64_t i, int64_t count) {
  int64_t e = i + 1;
  while (e < count && e - i < k_run_patterns && indices[e] == indices[e - 1] + 1) ++e;
  return e;
}

void target_stream::read_listed(pattern_reader& r, const int64_t* indices, int64_t count, unsigned char* out) const {
  const int64_t m = layout_.window0 * layout_.window1;
  for (int64_t i = 0; i < count;) {
    const int64_t e = run_end(indices, i, count);
    read_run(r, indices[i], e - i, out + std::size_t(i * m) * value_bytes());
    i = e;
  }
}

std::exception_ptr target_stream::read_claimed(pattern_reader& r) {
  const int64_t m = layout_.window0 * layout_.window1, count = int64_t(ahead_indices_.size());
  std::exception_ptr error;
  // Runs of consecutive patterns (a compact batch's rows), each claimed whole and read in one request.
  for (int64_t i = claim_.load(); i < count;) {
    const int64_t e = run_end(ahead_indices_.data(), i, count);
    if (!claim_.compare_exchange_weak(i, e)) continue;  // i now holds the other reader's claim
    if (!error) {  // after an error, claim the rest so that the other reader stops too
      try {
        read_run(r, ahead_indices_[std::size_t(i)], e - i, ahead_.data() + std::size_t(i * m) * value_bytes());
      } catch (...) {
        error = std::current_exception();
      }
    }
    i = e;
  }
  return error;
}

void target_stream::read_range(int64_t first, int64_t count, void* dst) {
  const int64_t m = layout_.window0 * layout_.window1;
  for (int64_t i = 0; i < count; i += k_run_patterns)
    read_run(own_, first + i, std::min(k_run_patterns, count - i),
             static_cast<unsigned char*>(dst) + std::size_t(i * m) * value_bytes());
}

const void* target_stream::read(const int64_t* indices, int64_t count) {
  const int64_t m = layout_.window0 * layout_.window1;
  std::unique_lock<std::mutex> lock(mutex_);
  if (job_open_) {
    // The engine needs the batch now: read what the worker has not claimed yet, then wait for
    // the patterns it is reading (at most one).
    lock.unlock();
    std::exception_ptr error = read_claimed(own_);
    lock.lock();
    if (error && !ahead_error_) ahead_error_ = error;
    cv_.wait(lock, [&] { return !worker_in_job_; });
    if (job_open_) {
      job_open_ = false;
      ++shared_;
    }
  }
  const bool hit = !ahead_indices_.empty() && int64_t(ahead_indices_.size()) == count &&
                   std::equal(ahead_indices_.begin(), ahead_indices_.end(), indices);
  if (ahead_error_ && hit) std::rethrow_exception(std::exchange(ahead_error_, nullptr));
  ahead_error_ = nullptr;
  if (hit) {
    current_.swap(ahead_);  // the engine's previous batch buffer becomes the next read-ahead's
    ++hits_;
  } else {
    current_.resize(std::size_t(std::max<int64_t>(count, 1) * m) * value_bytes());
    read_listed(own_, indices, count, current_.data());
    ++misses_;
  }
  ++next_;
  // Start the next batch, when the schedule knows one.
  if (schedule_ && schedule_(next_, ahead_indices_)) {
    ahead_.resize(ahead_indices_.size() * std::size_t(m) * value_bytes());
    claim_.store(0);
    job_open_ = true;
    lock.unlock();
    cv_.notify_all();
  } else {
    ahead_indices_.clear();
  }
  return current_.data();
}

void target_stream::worker_loop() {
  // Idle priority: this thread runs on a core the engine leaves idle (its serial steps, its
  // waits). At normal priority it would take time from one of the engine's threads, which the
  // others then wait for at the batch's end (measured on 2 cores: +20 % wall for +6 % CPU).
  // Best effort: refused, it stays a normal thread. It cannot starve the run (read()).
  sched_param none{};
  (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || job_open_; });
    if (stop_) return;
    worker_in_job_ = true;
    lock.unlock();
    std::exception_ptr error = read_claimed(worker_reader_);
    lock.lock();
    if (error && !ahead_error_) ahead_error_ = error;
    worker_in_job_ = false;
    job_open_ = false;
    cv_.notify_all();
  }
}

tycho_status target_stream::read_callback(void* context, const int64_t* indices, int64_t count, const void** batch) {
  try {
    *batch = static_cast<target_stream*>(context)->read(indices, count);
    return TYCHO_OK;
  } catch (const error& e) {
    return set_last_error(e.status, e.what());
  } catch (const std::exception& e) {
    return set_last_error(TYCHO_ERR_INTERNAL, e.what());
  }
}

}  // namespace tycho::host
