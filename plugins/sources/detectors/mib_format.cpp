#include "mib_format.hpp"

#include <tycho/sdk.hpp>
#include <tycho/sdk/checked.hpp>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <vector>

namespace tycho::detectors::mib {

using sdk::cat;
using sdk::fail;

namespace {

// The header's fields (up to its length or a NUL), split at commas.
std::vector<std::string> fields_of(const unsigned char* bytes, std::size_t n) {
  std::vector<std::string> out(1);
  for (std::size_t i = 0; i < n && bytes[i] != 0; ++i) {
    if (bytes[i] == ',') {
      out.emplace_back();
    } else {
      out.back() += char(bytes[i]);
    }
  }
  return out;
}

std::string trimmed(const std::string& s) {
  std::size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::string printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 40)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  return out + (s.size() > 40 ? "..." : "");
}

// A field of decimal digits (at most 12, so no overflow), or throws.
int64_t digits(const std::string& field, const char* what, const std::string& where) {
  const std::string t = trimmed(field);
  if (t.empty() || t.size() > 12 || !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
    fail(TYCHO_ERR_BAD_DATA, where, ": the MIB header's ", what, " is \"", printable(field),
         "\", expected a whole number");
  return std::stoll(t);
}

}  // namespace

frame_header parse_header(const unsigned char* bytes, std::size_t n, const std::string& where) {
  if (n < 4 || std::memcmp(bytes, "MQ1,", 4) != 0)
    fail(TYCHO_ERR_BAD_DATA, where, ": expected a Merlin frame header starting \"MQ1,\", found \"",
         printable(std::string(reinterpret_cast<const char*>(bytes), std::min<std::size_t>(n, 8))),
         "\": not a .mib file, or the frames are misaligned");
  // The header's length is field 2; the fields after it are read within that length only.
  const std::vector<std::string> lead = fields_of(bytes, std::min<std::size_t>(n, 64));
  if (lead.size() < 4) fail(TYCHO_ERR_BAD_DATA, where, ": the MIB header ends before its length field (field 2)");
  frame_header h;
  h.header_bytes = digits(lead[2], "header length (field 2)", where);
  if (h.header_bytes < 64 || h.header_bytes > k_most_header_bytes)
    fail(TYCHO_ERR_BAD_DATA, where, ": the MIB header says it is ", h.header_bytes,
         " bytes long, expected 64 to ", k_most_header_bytes, " (384 for one chip, 768 for a quad)");
  if (std::size_t(h.header_bytes) > n)
    fail(TYCHO_ERR_BAD_DATA, where, ": the MIB header says it is ", h.header_bytes, " bytes long, but only ", n,
         " bytes are there");
  const std::vector<std::string> f = fields_of(bytes, std::size_t(h.header_bytes));
  if (f.size() < 8)
    fail(TYCHO_ERR_BAD_DATA, where, ": the MIB header has ", f.size(),
         " fields, expected at least 8 (MQ1, sequence, length, chips, X, Y, pixel type, layout)");
  h.sequence = digits(f[1], "sequence number (field 1)", where);
  h.chips = digits(f[3], "chip count (field 3)", where);
  h.width = digits(f[4], "pixels per row (field 4)", where);
  h.height = digits(f[5], "rows (field 5)", where);
  h.pixel_type = trimmed(f[6]);
  for (char c : f[7])
    if (!std::isspace(static_cast<unsigned char>(c))) h.layout += c;
  if (h.chips < 1 || h.chips > 64) fail(TYCHO_ERR_BAD_DATA, where, ": the MIB header names ", h.chips, " chips, expected 1 to 64");
  if (h.width < 1 || h.height < 1 || h.width > 65536 || h.height > 65536)
    fail(TYCHO_ERR_BAD_DATA, where, ": the MIB header gives frames of ", h.width, " x ", h.height,
         " pixels, expected 1 to 65536 each way");
  h.fixed = cat(f[2], ",", f[3], ",", f[4], ",", f[5], ",", f[6], ",", f[7]);
  // The extended header: MQ1A, time stamp, shutter "<n>ns", counter depth.
  for (std::size_t i = 8; i < f.size(); ++i) {
    if (trimmed(f[i]) != "MQ1A") continue;
    if (i + 3 < f.size()) {
      const std::string shutter = trimmed(f[i + 2]);
      if (shutter.size() > 2 && shutter.substr(shutter.size() - 2) == "ns")
        h.exposure_s = double(digits(shutter.substr(0, shutter.size() - 2), "shutter time", where)) * 1e-9;
      h.counter_depth = int(std::min<int64_t>(digits(f[i + 3], "counter depth (after MQ1A)", where), 1000));
    }
    break;
  }
  return h;
}

void check_frame_header(const unsigned char* bytes, std::size_t n, const frame_header& first, int64_t index,
                        const std::string& where) {
  if (n < std::size_t(first.header_bytes) || std::memcmp(bytes, "MQ1,", 4) != 0)
    fail(TYCHO_ERR_BAD_DATA, where, ": frame ", index, " does not start with a Merlin header (\"MQ1,\"); found \"",
         printable(std::string(reinterpret_cast<const char*>(bytes), std::min<std::size_t>(n, 8))),
         "\": the file is corrupt, or its frames are not all the same size");
  // Fields 0 to 7 lie within the first 8 commas.
  std::size_t commas[8];
  int found = 0;
  for (std::size_t i = 0; i < std::size_t(first.header_bytes) && found < 8; ++i)
    if (bytes[i] == ',') commas[found++] = i;
  if (found < 8)
    fail(TYCHO_ERR_BAD_DATA, where, ": frame ", index, "'s header has fewer than 8 fields");
  const std::string seq(reinterpret_cast<const char*>(bytes) + commas[0] + 1, commas[1] - commas[0] - 1);
  const int64_t got = digits(seq, "sequence number (field 1)", where);
  const int64_t want = first.sequence + index;
  if (got != want && !(seq.size() <= 6 && got == want % 1000000))
    fail(TYCHO_ERR_BAD_DATA, where, ": frame ", index, " has sequence number ", got, ", expected ", want,
         " (the first frame's ", first.sequence, " + ", index, "): frames are missing, repeated or out of order");
  const std::string fixed(reinterpret_cast<const char*>(bytes) + commas[1] + 1, commas[7] - commas[1] - 1);
  if (fixed != first.fixed)
    fail(TYCHO_ERR_BAD_DATA, where, ": frame ", index, "'s header gives \"", printable(fixed),
         "\" for its length, chips, size, pixel type and layout, but the first frame's gives \"", printable(first.fixed),
         "\": every frame of a file must have the same shape");
}

frame_geometry geometry_of(const frame_header& h, int hdr_counter_depth, const std::string& where) {
  frame_geometry g;
  const int64_t pixels = h.width * h.height;  // each <= 65536: fits
  g.rows = h.height;
  g.cols = h.width;
  if (h.pixel_type == "U08" || h.pixel_type == "U16" || h.pixel_type == "U32") {
    g.stored_bytes_per_px = h.pixel_type == "U08" ? 1 : h.pixel_type == "U16" ? 2 : 4;
    g.out_bits = 8 * g.stored_bytes_per_px;
    g.data_bytes = pixels * g.stored_bytes_per_px;
    return g;
  }
  if (h.pixel_type != "R64")
    fail(TYCHO_ERR_UNSUPPORTED, where, ": the MIB pixel type is \"", printable(h.pixel_type),
         "\", expected U08, U16, U32 (counts) or R64 (RAW)");
  g.raw = true;
  g.depth = h.counter_depth != 0 ? h.counter_depth : hdr_counter_depth;
  if (g.depth != 1 && g.depth != 6 && g.depth != 12 && g.depth != 24)
    fail(TYCHO_ERR_BAD_DATA, where, ": a RAW (R64) frame of counter depth ", g.depth,
         g.depth == 0 ? " (neither the frame header nor the .hdr records it)" : "",
         "; expected 1, 6, 12 or 24 bits");
  const int64_t group = g.depth == 1 ? 64 : g.depth == 6 ? 8 : 4;  // pixels stored in reverse order
  if (h.width % group != 0)
    fail(TYCHO_ERR_BAD_DATA, where, ": a RAW frame of ", g.depth, "-bit counters has rows of ", h.width,
         " pixels, expected a multiple of ", group);
  g.data_bytes = g.depth == 1 ? pixels / 8 : g.depth == 6 ? pixels : pixels * 2;
  g.out_bits = g.depth <= 6 ? 8 : g.depth == 12 ? 16 : 32;
  const bool quad = h.layout.rfind("2x2", 0) == 0;
  if (quad || h.chips > 1) {
    if (!quad || h.chips != 4 || h.width != 1024 || h.height != 256)
      fail(TYCHO_ERR_UNSUPPORTED, where, ": RAW frames of ", h.chips, " chips in layout \"", h.layout, "\" with ",
           h.width, " x ", h.height, " stored pixels: tycho decodes RAW data of one chip or of a full 2x2 quad "
           "(4 chips, 1024 x 256 stored); save the frames as counts (U08/U16/U32) instead");
    if (g.depth == 24)
      fail(TYCHO_ERR_UNSUPPORTED, where, ": RAW 24-bit frames of a 2x2 quad are not decoded (no layout is documented "
           "for them); save the frames as counts (U32) instead");
    g.quad_raw = true;
    g.rows = 512;
    g.cols = 512;
  } else if (g.depth == 24) {
    if (h.height % 2 != 0)
      fail(TYCHO_ERR_BAD_DATA, where, ": a RAW 24-bit frame stores its high and low 12 bits as two frames, so its "
           "row count (", h.height, ") must be even");
    g.rows = h.height / 2;
  }
  return g;
}

namespace {

// One stored row of `n` RAW pixels at `in` decoded into out[0..n) (or out[n-1..0] when `reverse`).
void decode_raw_row(int depth, const unsigned char* in, int64_t n, uint32_t* out, bool reverse) {
  auto put = [&](int64_t x, uint32_t v) { out[reverse ? n - 1 - x : x] = v; };
  if (depth == 1) {
    // 64-pixel groups: eight bytes in reverse order, bits LSB first.
    for (int64_t g = 0; g < n / 64; ++g)
      for (int b = 0; b < 8; ++b) {
        const unsigned char byte = in[g * 8 + 7 - b];
        for (int bit = 0; bit < 8; ++bit) put(64 * g + 8 * b + bit, (byte >> bit) & 1u);
      }
  } else if (depth == 6) {
    for (int64_t x = 0; x < n; ++x) put((x / 8) * 8 + 7 - x % 8, in[x]);
  } else {  // 12 (and each half of 24): big-endian 16-bit values in groups of 4, reversed
    for (int64_t x = 0; x < n; ++x)
      put((x / 4) * 4 + 3 - x % 4, (uint32_t(in[2 * x]) << 8 | in[2 * x + 1]) & 0xfffu);
  }
}

}  // namespace

void decode_frame(const frame_geometry& g, const unsigned char* data, uint32_t* out) {
  if (!g.raw) {
    const int64_t n = g.rows * g.cols;
    const int b = g.stored_bytes_per_px;
    for (int64_t k = 0; k < n; ++k) {
      const unsigned char* p = data + k * b;
      out[k] = b == 1 ? p[0] : b == 2 ? (uint32_t(p[0]) << 8 | p[1])
                                      : (uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]);
    }
    return;
  }
  const int64_t row_bytes = g.depth == 1 ? 1024 / 8 : g.depth == 6 ? 1024 : 2048;  // a quad's stored row (1024 px)
  if (g.quad_raw) {
    const int64_t seg = row_bytes / 4;  // one chip's row: 256 pixels
    for (int64_t y = 0; y < 256; ++y) {
      const unsigned char* row = data + y * row_bytes;
      uint32_t* top = out + y * 512;
      uint32_t* bottom = out + (511 - y) * 512;
      decode_raw_row(g.depth, row + 3 * seg, 256, top, false);          // chip 1: top left
      decode_raw_row(g.depth, row + 2 * seg, 256, top + 256, false);    // chip 2: top right
      decode_raw_row(g.depth, row + 1 * seg, 256, bottom, true);        // chip 3: bottom left, turned
      decode_raw_row(g.depth, row + 0 * seg, 256, bottom + 256, true);  // chip 4: bottom right, turned
    }
    return;
  }
  const int64_t stored_row = g.depth == 1 ? g.cols / 8 : g.depth == 6 ? g.cols : 2 * g.cols;
  for (int64_t y = 0; y < g.rows; ++y) decode_raw_row(g.depth, data + y * stored_row, g.cols, out + y * g.cols, false);
  if (g.depth == 24) {
    // The second half holds the low 12 bits of the same rows.
    std::vector<uint32_t> low(std::size_t(g.cols));
    const unsigned char* second = data + g.rows * stored_row;
    for (int64_t y = 0; y < g.rows; ++y) {
      decode_raw_row(12, second + y * stored_row, g.cols, low.data(), false);
      for (int64_t x = 0; x < g.cols; ++x) out[y * g.cols + x] = out[y * g.cols + x] << 12 | low[std::size_t(x)];
    }
  }
}

std::map<std::string, std::string> parse_hdr(const std::string& text) {
  std::map<std::string, std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    const std::size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    std::string key = trimmed(line.substr(0, tab));
    if (!key.empty() && key.back() == ':') key.pop_back();
    if (!key.empty()) out[key] = trimmed(line.substr(tab + 1));
  }
  return out;
}

}  // namespace tycho::detectors::mib
