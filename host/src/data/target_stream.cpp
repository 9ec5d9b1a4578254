#include "data/target_stream.hpp"

#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/sdk/npy.hpp>

#include <algorithm>
#include <cstring>
#include <utility>

#include "data/detector_padding.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/preprocess.hpp"

namespace tycho::host {

stored_npy_member::stored_npy_member(const std::string& zip_path, const std::string& member)
    : where_(cat("'", zip_path, "': member '", member, "'")) {
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
    file_ = zip_fopen_index(zip_, st.index, 0);
    if (file_ == nullptr) fail(TYCHO_ERR_IO, where_, " cannot be opened: ", zip_strerror(zip_));
    auto read = [&](void* dst, std::size_t n) {
      if (zip_fread(file_, dst, n) != zip_int64_t(n)) fail(TYCHO_ERR_BAD_DATA, where_, " is truncated");
    };
    const sdk::npy::header h = sdk::npy::read_header(read, st.size, where_);
    const bool f32 = h.dtype && h.dtype->code == kDLFloat && h.dtype->bits == 32 && !h.big_endian;
    if (!f32 || h.fortran_order)
      fail(TYCHO_ERR_BAD_DATA, where_, " has dtype '", h.descr, "'", h.fortran_order ? " in Fortran order" : "",
           "; expected little-endian float32 in C order");
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

void stored_npy_member::read(uint64_t first, uint64_t count, float* dst) {
  const uint64_t offset = header_bytes_ + first * sizeof(float);
  if (zip_fseek(file_, zip_int64_t(offset), SEEK_SET) != 0)
    fail(TYCHO_ERR_IO, where_, ": cannot seek to byte ", offset, ": ", zip_file_strerror(file_));
  const uint64_t bytes = count * sizeof(float);
  if (zip_fread(file_, dst, bytes) != zip_int64_t(bytes))
    fail(TYCHO_ERR_IO, where_, ": reading ", bytes, " bytes at byte ", offset, " failed: ", zip_file_strerror(file_));
}

target_stream::target_stream(std::unique_ptr<stored_npy_member> member, int64_t first, int64_t patterns,
                             pattern_layout layout, batch_schedule schedule)
    : member_(std::move(member)), first_(first), patterns_(patterns), layout_(layout), schedule_(std::move(schedule)) {
  reader_.struct_size = sizeof reader_;
  reader_.dtype = {kDLFloat, 32, 1};
  reader_.shape[0] = patterns_;
  reader_.shape[1] = layout_.window0;
  reader_.shape[2] = layout_.window1;
  reader_.read = &target_stream::read_callback;
  reader_.context = this;
  stored_.resize(std::size_t(layout_.n0 * layout_.n1));
  shifted_.resize(stored_.size());
  if (schedule_) worker_ = std::thread([this] { worker_loop(); });
}

target_stream::~target_stream() {
  if (schedule_ && hits_ + misses_ > 0)
    log_info("targets", cat(hits_ + misses_, " batches read from disk, ", hits_, " of them read ahead"));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void target_stream::read_patterns(const int64_t* indices, int64_t count, float* dst) {
  const int64_t n = layout_.n0 * layout_.n1, m = layout_.window0 * layout_.window1;
  const bool padded = m != n;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t j = indices[i];
    if (j < 0 || j >= patterns_)
      fail(TYCHO_ERR_INVALID_ARGUMENT, member_->where(), ": pattern ", j, " asked for, outside [0, ", patterns_, ")");
    member_->read(uint64_t(first_ + j) * uint64_t(n), uint64_t(n), stored_.data());
    float* out = dst + i * m;
    ifftshift_pattern(stored_.data(), padded ? shifted_.data() : out, layout_.n0, layout_.n1);
    if (padded) pad_fft_order_pattern(shifted_.data(), layout_.n0, layout_.n1, out, layout_.window0, layout_.window1);
  }
}

void target_stream::read_range(int64_t first, int64_t count, float* dst) {
  std::vector<int64_t> indices(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) indices[std::size_t(i)] = first + i;
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !ahead_pending_; });  // the worker is idle: the member is free
  read_patterns(indices.data(), count, dst);
}

const float* target_stream::read(const int64_t* indices, int64_t count) {
  const int64_t m = layout_.window0 * layout_.window1;
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !ahead_pending_; });
  const bool hit = ahead_ready_ && int64_t(ahead_indices_.size()) == count &&
                   std::equal(ahead_indices_.begin(), ahead_indices_.end(), indices);
  if (ahead_error_ && hit) std::rethrow_exception(std::exchange(ahead_error_, nullptr));
  ahead_error_ = nullptr;
  if (hit) {
    current_.swap(ahead_);  // the engine's previous batch buffer becomes the next read-ahead's
    ++hits_;
  } else {
    current_.resize(std::size_t(std::max<int64_t>(count, 1) * m));
    read_patterns(indices, count, current_.data());
    ++misses_;
  }
  ahead_ready_ = false;
  ++next_;
  // Start the next batch, when the schedule knows one.
  if (schedule_ && schedule_(next_, ahead_indices_)) {
    ahead_pending_ = true;
    lock.unlock();
    cv_.notify_all();
  } else {
    ahead_indices_.clear();
  }
  return current_.data();
}

void target_stream::worker_loop() {
  const int64_t m = layout_.window0 * layout_.window1;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || ahead_pending_; });
    if (stop_) return;
    // The lock stays held while reading: read() waits for this batch anyway, and nothing else
    // touches the member meanwhile.
    try {
      ahead_.resize(ahead_indices_.size() * std::size_t(m));
      read_patterns(ahead_indices_.data(), int64_t(ahead_indices_.size()), ahead_.data());
    } catch (...) {
      ahead_error_ = std::current_exception();
    }
    ahead_pending_ = false;
    ahead_ready_ = true;
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
