// The object's plane cut into square tiles, and the part of it one mini-batch touches: the
// tiles under the batch's probe windows, as boxes for the engine (where to form the object
// gradient), the reducer (what to sum), the optimizer (what to update) and the constraints
// (what changed). Each tile counts the optimizer steps it has taken: a tile steps only in the
// batches that touch it, so its bias correction counts its own steps.
#pragma once

#include <cstdint>
#include <vector>

namespace tycho {

class object_tiles {
 public:
  static constexpr int64_t default_tile_px = 16;
  // An object plane of height × width px in tiles of tile × tile px (the last row and column of
  // tiles clipped to the plane).
  object_tiles(int64_t height, int64_t width, int64_t tile = default_tile_px);

  int64_t rows() const { return rows_; }  // tiles along axis 0
  int64_t cols() const { return cols_; }  // tiles along axis 1
  int64_t tile() const { return tile_; }

  // Marks the tiles under the window of n0 × n1 px whose centre is (c0, c1) px: top-left
  // floor(c − n/2), the engines' convention; clipped to the plane.
  void mark_window(double c0, double c1, int64_t n0, int64_t n1);
  // The marked tiles as disjoint boxes [row0, row1, col0, col1) in px, row of tiles by row of
  // tiles, each box a run of marked tiles with one step count; with `count_step`, every marked
  // tile first counts one step more. box_steps: each box's count. Clears the marks.
  void take_boxes(bool count_step, std::vector<int64_t>& boxes, std::vector<int64_t>& box_steps);

  // The steps each tile has taken ((rows, cols), row-major): saved with a result, so that a
  // resumed run continues the bias corrections.
  const std::vector<int64_t>& steps() const { return steps_; }
  void set_steps(const std::vector<int64_t>& steps);  // throws unless rows·cols entries >= 0

 private:
  int64_t height_, width_, tile_, rows_, cols_;
  std::vector<uint8_t> marked_;
  std::vector<uint8_t> row_listed_;   // per tile row: in marked_rows_
  std::vector<int64_t> marked_rows_;  // tile rows with a mark (unsorted, once each)
  std::vector<int64_t> steps_;
};

// Host tensor helpers for boxes of a (..., H, W) array of `element_bytes` per element: copies
// every box's rows of every leading plane into `packed` (in box, plane, row order) or back.
void pack_boxes(const void* array, int64_t planes, int64_t height, int64_t width, int64_t element_bytes,
                const std::vector<int64_t>& boxes, std::vector<unsigned char>& packed);
void unpack_boxes(void* array, int64_t planes, int64_t height, int64_t width, int64_t element_bytes,
                  const std::vector<int64_t>& boxes, const std::vector<unsigned char>& packed);

}  // namespace tycho
