#include "tycho/core/object_tiles.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tycho/core/error.hpp"

namespace tycho {

object_tiles::object_tiles(int64_t height, int64_t width, int64_t tile) : height_(height), width_(width), tile_(tile) {
  if (height <= 0 || width <= 0 || tile <= 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "object tiles: a ", height, " x ", width, " px plane in tiles of ", tile, " px");
  rows_ = (height + tile - 1) / tile;
  cols_ = (width + tile - 1) / tile;
  marked_.assign(std::size_t(rows_ * cols_), 0);
  row_listed_.assign(std::size_t(rows_), 0);
  steps_.assign(std::size_t(rows_ * cols_), 0);
}

void object_tiles::mark_window(double c0, double c1, int64_t n0, int64_t n1) {
  const int64_t r0 = int64_t(std::floor(c0 - double(n0 / 2))), q0 = int64_t(std::floor(c1 - double(n1 / 2)));
  // A window partly outside the plane marks what lies inside (the engine refuses it anyway).
  const int64_t first_row = std::clamp<int64_t>(r0, 0, height_ - 1) / tile_;
  const int64_t last_row = std::clamp<int64_t>(r0 + n0 - 1, 0, height_ - 1) / tile_;
  const int64_t first_col = std::clamp<int64_t>(q0, 0, width_ - 1) / tile_;
  const int64_t last_col = std::clamp<int64_t>(q0 + n1 - 1, 0, width_ - 1) / tile_;
  for (int64_t r = first_row; r <= last_row; ++r) {
    if (!row_listed_[std::size_t(r)]) {
      row_listed_[std::size_t(r)] = 1;
      marked_rows_.push_back(r);
    }
    uint8_t* row = marked_.data() + r * cols_;
    std::fill(row + first_col, row + last_col + 1, uint8_t(1));
  }
}

void object_tiles::take_boxes(bool count_step, std::vector<int64_t>& boxes, std::vector<int64_t>& box_steps) {
  boxes.clear();
  box_steps.clear();
  std::sort(marked_rows_.begin(), marked_rows_.end());
  for (const int64_t r : marked_rows_) {
    row_listed_[std::size_t(r)] = 0;
    uint8_t* row = marked_.data() + r * cols_;
    int64_t* steps = steps_.data() + r * cols_;
    int64_t c = 0;
    while (c < cols_) {
      if (!row[c]) {
        ++c;
        continue;
      }
      if (count_step) ++steps[c];
      const int64_t start = c, count = steps[c];
      row[c++] = 0;
      while (c < cols_ && row[c] && steps[c] + (count_step ? 1 : 0) == count) {
        if (count_step) ++steps[c];
        row[c++] = 0;
      }
      boxes.insert(boxes.end(), {r * tile_, std::min((r + 1) * tile_, height_), start * tile_,
                                 std::min(c * tile_, width_)});
      box_steps.push_back(count);
    }
  }
  marked_rows_.clear();
}

void object_tiles::set_steps(const std::vector<int64_t>& steps) {
  if (steps.size() != steps_.size())
    fail(TYCHO_ERR_BAD_DATA, "object tiles: ", steps.size(), " step counts for ", rows_, " x ", cols_, " tiles");
  for (const int64_t s : steps)
    if (s < 0) fail(TYCHO_ERR_BAD_DATA, "object tiles: a negative step count (", s, ")");
  steps_ = steps;
}

namespace {
template <bool Pack>
void copy_boxes(unsigned char* array, int64_t planes, int64_t height, int64_t width, int64_t element_bytes,
                const std::vector<int64_t>& boxes, unsigned char* packed) {
  (void)height;
  for (std::size_t k = 0; k + 3 < boxes.size(); k += 4)
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t r = boxes[k]; r < boxes[k + 1]; ++r) {
        unsigned char* at = array + ((p * height + r) * width + boxes[k + 2]) * element_bytes;
        const std::size_t bytes = std::size_t((boxes[k + 3] - boxes[k + 2]) * element_bytes);
        if (Pack)
          std::memcpy(packed, at, bytes);
        else
          std::memcpy(at, packed, bytes);
        packed += bytes;
      }
}
int64_t packed_bytes(int64_t planes, int64_t element_bytes, const std::vector<int64_t>& boxes) {
  int64_t n = 0;
  for (std::size_t k = 0; k + 3 < boxes.size(); k += 4) n += (boxes[k + 1] - boxes[k]) * (boxes[k + 3] - boxes[k + 2]);
  return n * planes * element_bytes;
}
}  // namespace

void pack_boxes(const void* array, int64_t planes, int64_t height, int64_t width, int64_t element_bytes,
                const std::vector<int64_t>& boxes, std::vector<unsigned char>& packed) {
  packed.resize(std::size_t(packed_bytes(planes, element_bytes, boxes)));
  copy_boxes<true>(static_cast<unsigned char*>(const_cast<void*>(array)), planes, height, width, element_bytes, boxes,
                   packed.data());
}

void unpack_boxes(void* array, int64_t planes, int64_t height, int64_t width, int64_t element_bytes,
                  const std::vector<int64_t>& boxes, const std::vector<unsigned char>& packed) {
  if (packed.size() != std::size_t(packed_bytes(planes, element_bytes, boxes)))
    fail(TYCHO_ERR_INTERNAL, "unpack_boxes: ", packed.size(), " bytes for the boxes' ",
         packed_bytes(planes, element_bytes, boxes));
  copy_boxes<false>(static_cast<unsigned char*>(array), planes, height, width, element_bytes, boxes,
                    const_cast<unsigned char*>(packed.data()));
}

}  // namespace tycho
