// The Quantum Detectors Merlin .mib format (Medipix3 readout): every frame is an ASCII header
// followed by its pixels, and a file is frames back to back. Header fields, comma-separated:
//   0 "MQ1"  1 sequence number (from 1)  2 header bytes (00384 single, 00768 quad)
//   3 chips  4 pixels per row (X)  5 rows (Y)  6 pixel type: U08, U16, U32 (big-endian counts)
//   or R64 (RAW: the chips' readout, bit-packed)  7 chip layout ("1x1", "2x2", "Nx1", "2x2G")
//   ... thresholds, DACs ..., and in newer files "MQ1A", time stamp, shutter ("1000000ns"),
//   counter depth (1, 6, 12, 24), then NUL padding up to the header's length.
// RAW frames (counter depth 1, 6, 12; 24 on one chip) are decoded as Merlin's software does:
// groups of 64, 8 or 4 pixels stored in reverse; 1-bit pixels LSB first; 24 bits as two 12-bit
// frames (high, then low). A RAW 2 x 2 quad stores each of its 256 rows as the rows of chips
// 4 | 3 | 2 | 1: the top chips (1, 2) as they are, the bottom ones (3, 4) turned by 180°.
//
// Pure functions over bytes: no file access, no state (thread-safe). Errors name `where` (the
// file and the offset of the frame) and what was expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace tycho::detectors::mib {

constexpr int64_t k_most_header_bytes = 65536;

struct frame_header {
  int64_t sequence = 0;      // field 1
  int64_t header_bytes = 0;  // field 2
  int64_t chips = 0;         // field 3
  int64_t width = 0;         // field 4: pixels per stored row (X)
  int64_t height = 0;        // field 5: stored rows (Y)
  std::string pixel_type;    // field 6: U08, U16, U32 or R64
  std::string layout;        // field 7 without blanks: 1x1, 2x2, Nx1, 2x2G, ...
  int counter_depth = 0;     // after MQ1A; 0 when the header does not record it
  double exposure_s = 0;     // the shutter time; 0 when not recorded
  std::string fixed;         // fields 2 to 7 as written: every frame of a file repeats them
};

// The header at the start of `bytes` (n of them: at least the header's own length, field 2).
frame_header parse_header(const unsigned char* bytes, std::size_t n, const std::string& where);

// Checks the header at `bytes` (n >= first.header_bytes) of frame `index` (from 0) against the
// first frame's: "MQ1", sequence number first.sequence + index (or its last six digits), the
// same fields 2 to 7. Throws TYCHO_ERR_BAD_DATA naming `where` and the field.
void check_frame_header(const unsigned char* bytes, std::size_t n, const frame_header& first, int64_t index,
                        const std::string& where);

// How a frame's pixels are stored and what they decode to.
struct frame_geometry {
  bool raw = false;           // R64: bit-packed chip readout
  int depth = 0;              // counter depth of RAW data (1, 6, 12, 24)
  int stored_bytes_per_px = 1;  // U08/U16/U32: 1, 2, 4 (big-endian)
  bool quad_raw = false;      // a RAW 2 x 2 quad, assembled from the chips' rows
  int64_t data_bytes = 0;     // the pixel bytes after each header
  int64_t rows = 0, cols = 0; // the decoded frame
  int out_bits = 8;           // 8, 16 or 32: the stored dtype of the decoded counts
};
// Throws naming `where` for a type, depth or layout this reader does not decode.
frame_geometry geometry_of(const frame_header& h, int hdr_counter_depth, const std::string& where);

// Decodes one frame's pixel bytes (g.data_bytes of them) into `out`, g.rows x g.cols counts in
// row-major order, rows as the file orders them (the source flips them as RosettaSciIO does).
void decode_frame(const frame_geometry& g, const unsigned char* data, uint32_t* out);

// The key/value lines of a .hdr acquisition header ("Counter Depth (number):\t12"), keys
// without their trailing colon, values trimmed.
std::map<std::string, std::string> parse_hdr(const std::string& text);

}  // namespace tycho::detectors::mib
