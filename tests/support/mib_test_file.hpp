// Merlin .mib files written for the tests, independently of the reader: counts (U08, U16, U32,
// big-endian) and RAW frames (1/6/12/24 bits, one chip or a 2x2 quad) encoded as Merlin's
// readout stores them (the inverse of what docs/detector-formats.md describes), and the .hdr
// beside them. Frames are given as the reader delivers them (rows top to bottom as RosettaSciIO
// returns them); the writer stores their rows in reverse, as the detector does.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

namespace tycho::test {

struct mib_options {
  std::string type = "U16";  // U08, U16, U32 or R64
  int depth = 12;            // counter depth: 1, 6, 12, 24
  bool quad = false;         // a 2x2 quad (4 chips, 768-byte headers)
  int64_t rows = 256, cols = 256;  // delivered frame (a RAW quad: 512 x 512)
  int64_t first_sequence = 1;
  bool extended = true;      // MQ1A fields (time stamp, shutter, depth)
};

namespace mib_detail {
inline void put_be(std::string& out, uint32_t v, int bytes) {
  for (int b = bytes - 1; b >= 0; --b) out += char((v >> (8 * b)) & 0xff);
}
// One stored RAW row of `n` pixels `px` (already in stored pixel order): the inverse of the
// readout's grouping (64 / 8 / 4 pixels reversed; 1 bit LSB first; 12 bits big-endian).
inline std::string raw_row(int depth, const uint32_t* px, int64_t n) {
  std::string out;
  if (depth == 1) {
    out.assign(std::size_t(n / 8), '\0');
    for (int64_t g = 0; g < n / 64; ++g)
      for (int b = 0; b < 8; ++b) {
        unsigned v = 0;
        for (int bit = 0; bit < 8; ++bit) v |= (px[64 * g + 8 * b + bit] & 1u) << bit;
        out[std::size_t(g * 8 + 7 - b)] = char(v);
      }
  } else if (depth == 6) {
    out.assign(std::size_t(n), '\0');
    for (int64_t i = 0; i < n; ++i) out[std::size_t(i)] = char(px[(i / 8) * 8 + 7 - i % 8] & 0xff);
  } else {
    for (int64_t i = 0; i < n; ++i) put_be(out, px[(i / 4) * 4 + 3 - i % 4] & 0xfff, 2);
  }
  return out;
}
inline std::vector<uint32_t> reversed(const uint32_t* p, int64_t n) {
  return std::vector<uint32_t>(std::reverse_iterator<const uint32_t*>(p + n), std::reverse_iterator<const uint32_t*>(p));
}
}  // namespace mib_detail

// The header of frame `index` (sequence first_sequence + index), padded with NULs.
inline std::string mib_header(const mib_options& o, int64_t index) {
  const int64_t header_bytes = o.quad ? 768 : 384;
  const bool raw = o.type == "R64";
  int64_t x = o.cols, y = o.rows;
  if (raw && o.quad) x = 1024, y = 256;
  if (raw && !o.quad && o.depth == 24) y = 2 * o.rows;
  char head[128];
  std::snprintf(head, sizeof head, "MQ1,%06lld,%05lld,%02d,%04lld,%04lld,%s,%6s,%s,", (long long)(o.first_sequence + index),
                (long long)header_bytes, o.quad ? 4 : 1, (long long)x, (long long)y, o.type.c_str(), o.quad ? "2x2" : "1x1",
                o.quad ? "0F" : "01");
  std::string h = head;
  h += "2021-04-15 15:03:32.852759,0.001000,0,0,0,2.000000E+0,5.110000E+2,0.000000E+0,0.000000E+0,0.000000E+0,"
       "0.000000E+0,0.000000E+0,0.000000E+0,3RX,011,511,000,000,000,000,000,000,175,010,200,125,100,100,093,100,099,"
       "030,128,004,255,140,128,191,179,511,511";
  if (o.extended) h += ",MQ1A,2021-04-15T13:43:00.835428351Z,1000000ns," + std::to_string(o.depth) + ",";
  h.resize(std::size_t(header_bytes), '\0');
  return h;
}

// The stored pixel bytes of one frame given as delivered (rows x cols, row-major).
inline std::string mib_frame_data(const mib_options& o, const uint32_t* f) {
  using namespace mib_detail;
  std::string out;
  const int64_t R = o.rows, C = o.cols;
  // The frame as stored: rows in reverse.
  std::vector<uint32_t> s(std::size_t(R * C));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) s[std::size_t(r * C + c)] = f[(R - 1 - r) * C + c];
  if (o.type != "R64") {
    const int b = o.type == "U08" ? 1 : o.type == "U16" ? 2 : 4;
    for (uint32_t v : s) put_be(out, v, b);
    return out;
  }
  if (o.quad) {  // raw row y: chips 4 | 3 | 2 | 1; the bottom chips turned by 180°
    for (int64_t y = 0; y < 256; ++y) {
      const std::vector<uint32_t> c4 = reversed(&s[std::size_t((511 - y) * 512 + 256)], 256);
      const std::vector<uint32_t> c3 = reversed(&s[std::size_t((511 - y) * 512)], 256);
      out += raw_row(o.depth, c4.data(), 256);
      out += raw_row(o.depth, c3.data(), 256);
      out += raw_row(o.depth, &s[std::size_t(y * 512 + 256)], 256);
      out += raw_row(o.depth, &s[std::size_t(y * 512)], 256);
    }
    return out;
  }
  if (o.depth == 24) {  // the high 12 bits as one frame, then the low 12 bits
    std::vector<uint32_t> high(s.size()), low(s.size());
    for (std::size_t k = 0; k < s.size(); ++k) high[k] = s[k] >> 12, low[k] = s[k] & 0xfff;
    for (int64_t r = 0; r < R; ++r) out += raw_row(12, &high[std::size_t(r * C)], C);
    for (int64_t r = 0; r < R; ++r) out += raw_row(12, &low[std::size_t(r * C)], C);
    return out;
  }
  for (int64_t r = 0; r < R; ++r) out += raw_row(o.depth, &s[std::size_t(r * C)], C);
  return out;
}

// The whole file's bytes: `frames` frames of o.rows x o.cols counts, as delivered.
inline std::string mib_bytes(const mib_options& o, const std::vector<uint32_t>& frames) {
  const int64_t px = o.rows * o.cols;
  std::string out;
  for (int64_t k = 0; k < int64_t(frames.size()) / px; ++k) {
    out += mib_header(o, k);
    out += mib_frame_data(o, frames.data() + k * px);
  }
  return out;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// A .hdr with the given fields ("ScanX" -> "4", ...), in Merlin's "key:\tvalue" lines.
inline void write_hdr(const std::string& path, const std::map<std::string, std::string>& fields) {
  std::string text = "HDR,\t\n";
  for (const auto& [k, v] : fields) text += k + ":\t" + v + "\n";
  text += "End\t\n";
  write_bytes(path, text);
}

}  // namespace tycho::test
