#include "dm_format.hpp"

#include <tycho/sdk.hpp>
#include <tycho/sdk/checked.hpp>

#include <cmath>
#include <cstring>

namespace tycho::detectors::dm {

using sdk::cat;
using sdk::fail;

namespace {

constexpr int k_most_depth = 64;
constexpr uint64_t k_most_info = 4096;    // entries of one info array (a struct's fields)
constexpr uint64_t k_most_text = 1 << 16;  // characters of a string kept (longer ones skipped)

// Reads a file sequentially through a buffer, every read bounded by the file's size.
class cursor {
 public:
  cursor(const raw_file& f, bool dm4) : f_(f), dm4_(dm4) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return f_.size() - pos_; }
  const std::string& file() const { return f_.name(); }

  void read(void* dst, uint64_t n, const char* what) {
    if (n > left())
      fail(TYCHO_ERR_BAD_DATA, "'", f_.name(), "' ends at ", f_.size(), " inside the DM tags: ", what, " needs ", n,
           " bytes at offset ", pos_);
    auto* out = static_cast<unsigned char*>(dst);
    while (n > 0) {
      if (pos_ < buf_at_ || pos_ >= buf_at_ + buf_.size()) {
        buf_at_ = pos_;
        buf_.resize(std::size_t(std::min<uint64_t>(65536, f_.size() - pos_)));
        f_.read_at(buf_at_, buf_.size(), buf_.data(), "DM tags");
      }
      const uint64_t in = std::min<uint64_t>(n, buf_at_ + buf_.size() - pos_);
      std::memcpy(out, buf_.data() + (pos_ - buf_at_), std::size_t(in));
      out += in;
      pos_ += in;
      n -= in;
    }
  }
  void skip(uint64_t n, const char* what) {
    if (n > left())
      fail(TYCHO_ERR_BAD_DATA, "'", f_.name(), "' ends at ", f_.size(), " inside the DM tags: ", what, " declares ", n,
           " bytes at offset ", pos_);
    pos_ += n;
  }
  uint64_t be(int bytes, const char* what) {
    unsigned char b[8];
    read(b, uint64_t(bytes), what);
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = v << 8 | b[i];
    return v;
  }
  // A count or info entry: 32 bits in DM3, 64 in DM4.
  uint64_t word(const char* what) { return be(dm4_ ? 8 : 4, what); }
  bool dm4() const { return dm4_; }

 private:
  const raw_file& f_;
  bool dm4_;
  uint64_t pos_ = 0, buf_at_ = 0;
  std::vector<unsigned char> buf_;
};

double simple_value(const unsigned char* p, uint64_t type, bool little) {
  const int n = simple_size(type);
  uint64_t u = 0;
  for (int i = 0; i < n; ++i) u |= uint64_t(p[little ? i : n - 1 - i]) << (8 * i);
  switch (type) {
    case 2: return double(int16_t(u));
    case 3: return double(int32_t(u));
    case 4: return double(uint16_t(u));
    case 5: return double(uint32_t(u));
    case 6: { float f; uint32_t w = uint32_t(u); std::memcpy(&f, &w, 4); return double(f); }
    case 7: { double d; std::memcpy(&d, &u, 8); return d; }
    case 8: case 10: return double(uint8_t(u));
    case 9: return double(int8_t(u));
    case 11: return double(int64_t(u));
    case 12: return double(u);
  }
  return 0;
}

struct parser {
  cursor c;
  bool little;
  uint64_t tags = 0;

  [[noreturn]] void bad(uint64_t at, const std::string& what) {
    fail(TYCHO_ERR_BAD_DATA, "'", c.file(), "' at offset ", at, ": ", what, " (not a DM3/DM4 file, or a corrupt one)");
  }

  // Bytes of `count` elements of `size` bytes, checked against the file.
  uint64_t bytes_of(uint64_t count, uint64_t size, uint64_t at) {
    const auto b = sdk::checked_mul(int64_t(std::min<uint64_t>(count, uint64_t(INT64_MAX))), int64_t(size));
    if (!b || uint64_t(*b) > c.left())
      bad(at, cat("an array of ", count, " elements of ", size, " bytes, more than the ", c.left(), " bytes left"));
    return uint64_t(*b);
  }

  void data_tag(tag_value& v) {
    const uint64_t at = c.pos();
    char delim[4];
    c.read(delim, 4, "a data tag's %%%% mark");
    if (std::memcmp(delim, "%%%%", 4) != 0) bad(at, "expected a data tag's \"%%%%\" mark");
    const uint64_t n = c.word("the info array's length");
    if (n < 1 || n > k_most_info) bad(at, cat("an info array of ", n, " entries, expected 1 to ", k_most_info));
    std::vector<uint64_t> info(static_cast<std::size_t>(n));
    for (auto& x : info) x = c.word("an info array entry");
    const uint64_t type = info[0];
    if (n == 1) {
      const int size = simple_size(type);
      if (size == 0) bad(at, cat("a simple tag of type ", type, ", expected 2 to 12"));
      unsigned char b[8];
      c.read(b, uint64_t(size), "a tag's value");
      v.is_number = true;
      v.number = simple_value(b, type, little);
      return;
    }
    if (type == 18) {  // a string of info[1] bytes
      const uint64_t len = info[1];
      const uint64_t keep = std::min(len, k_most_text);
      if (len > c.left()) bad(at, cat("a string of ", len, " bytes, more than the file holds"));
      v.text.resize(std::size_t(keep));
      c.read(v.text.data(), keep, "a string tag");
      c.skip(len - keep, "a string tag");
      v.is_string = true;
      return;
    }
    if (type == 15) {  // a struct: [15, name length, fields, (name length, type) * fields]
      if (n < 3 || info[2] > (n - 3) / 2) bad(at, "a struct's info array is shorter than its field list");
      uint64_t size = 0;
      for (uint64_t k = 0; k < info[2]; ++k) {
        const int s = simple_size(info[4 + 2 * k]);
        if (s == 0) bad(at, cat("a struct field of type ", info[4 + 2 * k], ", expected a simple type"));
        size += uint64_t(s);
      }
      c.skip(size, "a struct tag");
      return;
    }
    if (type != 20) bad(at, cat("a tag of encoding ", type, ", expected a simple type, 15 (struct), 18 (string) or 20 (array)"));
    // Arrays: [20, element type, ...]
    const uint64_t el = info[1];
    if (simple_size(el) > 0) {
      if (n != 3) bad(at, "an array's info array has the wrong length");
      const uint64_t count = info[2];
      const uint64_t bytes = bytes_of(count, uint64_t(simple_size(el)), at);
      v.is_array = true;
      v.element_type = int(el);
      v.offset = c.pos();
      v.count = count;
      if (el == 4 && count <= k_most_text) {  // uint16 characters: a string
        std::vector<unsigned char> b(static_cast<std::size_t>(bytes));
        c.read(b.data(), bytes, "a text array");
        for (uint64_t k = 0; k < count; ++k) {
          const unsigned ch = unsigned(simple_value(&b[std::size_t(2 * k)], 4, little));
          if (ch < 0x80) {
            v.text += char(ch);
          } else if (ch < 0x800) {
            v.text += char(0xc0 | ch >> 6);
            v.text += char(0x80 | (ch & 0x3f));
          } else {
            v.text += char(0xe0 | ch >> 12);
            v.text += char(0x80 | (ch >> 6 & 0x3f));
            v.text += char(0x80 | (ch & 0x3f));
          }
        }
        v.is_string = true;
        return;
      }
      c.skip(bytes, "an array tag");
      return;
    }
    if (el == 15) {  // [20, 15, name length, fields, (name length, type) * fields, count]
      if (n < 5 || info[3] > (n - 5) / 2) bad(at, "an array of structs has a short info array");
      uint64_t size = 0;
      for (uint64_t k = 0; k < info[3]; ++k) {
        const int s = simple_size(info[5 + 2 * k]);
        if (s == 0) bad(at, cat("a struct field of type ", info[5 + 2 * k], ", expected a simple type"));
        size += uint64_t(s);
      }
      c.skip(bytes_of(info[n - 1], size, at), "an array of structs");
      return;
    }
    if (el == 18 && n == 4) {  // [20, 18, length, count]: strings of `length` bytes
      c.skip(bytes_of(info[3], info[2], at), "an array of strings");
      return;
    }
    if (el == 20 && n == 5 && simple_size(info[2]) > 0) {  // [20, 20, type, length, count]
      const uint64_t inner = bytes_of(info[3], uint64_t(simple_size(info[2])), at);
      c.skip(bytes_of(info[4], inner, at), "an array of arrays");
      return;
    }
    bad(at, cat("an array of element encoding ", el, " that this reader does not walk"));
  }

  void group(tag_group& g, int depth) {
    const uint64_t at = c.pos();
    if (depth > k_most_depth) bad(at, cat("tag groups nested more than ", k_most_depth, " deep"));
    unsigned char flags[2];
    c.read(flags, 2, "a tag group's flags");
    const uint64_t count = c.word("a tag group's entry count");
    if (count > c.left() / 3) bad(at, cat("a tag group of ", count, " entries, more than the file can hold"));
    for (uint64_t k = 0; k < count; ++k) {
      const uint64_t tag_at = c.pos();
      if (++tags > 10'000'000) bad(tag_at, "more than 10^7 tags");
      unsigned char kind = 0;
      c.read(&kind, 1, "a tag's kind");
      const uint64_t name_len = c.be(2, "a tag's name length");
      std::string name(std::size_t(name_len), '\0');
      c.read(name.data(), name_len, "a tag's name");
      if (name.empty()) name = cat("[", k, "]");
      if (c.dm4()) {
        const uint64_t size = c.be(8, "a DM4 tag's size");
        if (size > c.left()) bad(tag_at, cat("a tag of ", size, " bytes, more than the ", c.left(), " left"));
      }
      if (kind == 20) {
        g.groups.emplace_back(name, std::make_unique<tag_group>());
        group(*g.groups.back().second, depth + 1);
      } else if (kind == 21) {
        tag_value v;
        data_tag(v);
        g.values.emplace_back(name, std::move(v));
      } else {
        bad(tag_at, cat("a tag of kind ", int(kind), " (\"", name.substr(0, 40), "\"), expected 20 (group) or 21 (data)"));
      }
    }
  }
};

}  // namespace

int simple_size(uint64_t type) {
  switch (type) {
    case 2: case 4: return 2;
    case 3: case 5: case 6: return 4;
    case 7: case 11: case 12: return 8;
    case 8: case 9: case 10: return 1;
    default: return 0;
  }
}

const tag_group* tag_group::group(const std::string& name) const {
  for (const auto& [n, g] : groups)
    if (n == name) return g.get();
  return nullptr;
}

const tag_value* tag_group::value(const std::string& name) const {
  for (const auto& [n, v] : values)
    if (n == name) return &v;
  return nullptr;
}

const tag_value* tag_group::find(const std::string& dotted) const {
  const tag_group* g = this;
  std::size_t start = 0;
  while (g != nullptr) {
    const std::size_t dot = dotted.find('.', start);
    if (dot == std::string::npos) return g->value(dotted.substr(start));
    g = g->group(dotted.substr(start, dot - start));
    start = dot + 1;
  }
  return nullptr;
}

dm_file parse(const raw_file& f) {
  dm_file out;
  if (f.size() < 16) fail(TYCHO_ERR_BAD_DATA, "'", f.name(), "' is ", f.size(), " bytes, too short for a DM3/DM4 header");
  unsigned char head[4];
  f.read_at(0, 4, head, "the DM version");
  const uint32_t version = uint32_t(head[0]) << 24 | uint32_t(head[1]) << 16 | uint32_t(head[2]) << 8 | head[3];
  if (version != 3 && version != 4)
    fail(TYCHO_ERR_BAD_DATA, "'", f.name(), "' starts with version ", version,
         ", expected a Gatan DigitalMicrograph file of version 3 or 4 (.dm3, .dm4)");
  out.version = int(version);
  parser p{cursor(f, version == 4), true};
  p.c.skip(4, "the version");
  p.c.skip(version == 4 ? 8 : 4, "the file size");
  const uint64_t order = p.c.be(4, "the byte order");
  if (order > 1) p.bad(p.c.pos() - 4, cat("a byte order of ", order, ", expected 0 (big-endian) or 1 (little-endian)"));
  p.little = order == 1;
  out.little_endian = p.little;
  p.group(out.root, 0);
  return out;
}

namespace {
// A tag's number as a whole number in [lo, hi], or `otherwise` (NaN, fractions and values out
// of range included: a crafted tag must not reach an integer conversion).
int64_t whole(const tag_value& v, int64_t lo, int64_t hi, int64_t otherwise) {
  const double x = v.number;
  if (!v.is_number || !(x >= double(lo) && x <= double(hi)) || x != std::floor(x)) return otherwise;
  return int64_t(x);
}
}  // namespace

std::vector<image> images(const dm_file& f) {
  std::vector<image> out;
  const tag_group* list = f.root.group("ImageList");
  if (list == nullptr) return out;
  std::vector<int> thumbs;
  if (const tag_group* t = f.root.group("Thumbnails"))
    for (const auto& [name, g] : t->groups)
      if (const tag_value* i = g->value("ImageIndex"); i && i->is_number) thumbs.push_back(int(whole(*i, 0, 1 << 30, -1)));
  int index = 0;
  for (const auto& [name, g] : list->groups) {
    image im;
    im.index = index++;
    for (int t : thumbs) im.thumbnail |= t == im.index;
    if (const tag_value* v = g->value("Name"); v && v->is_string) im.name = v->text;
    const tag_group* d = g->group("ImageData");
    if (d != nullptr) {
      if (const tag_value* v = d->value("DataType"); v && v->is_number) im.data_type = int(whole(*v, 0, 1000, -1));
      if (const tag_value* v = d->value("Data"); v && v->is_array) {
        im.data_offset = v->offset;
        im.data_count = v->count;
        im.data_element_type = v->element_type;
      }
      if (const tag_group* dims = d->group("Dimensions"))
        for (const auto& [n, v] : dims->values)
          if (v.is_number) im.dims.push_back(whole(v, 0, int64_t(1) << 53, -1));  // -1: refused by the source
      if (const tag_group* cal = d->group("Calibrations"))
        if (const tag_group* dimension = cal->group("Dimension"))
          for (const auto& [n, c] : dimension->groups) {
            image::calibration k;
            k.present = true;
            if (const tag_value* v = c->value("Origin"); v && v->is_number) k.origin = v->number;
            if (const tag_value* v = c->value("Scale"); v && v->is_number) k.scale = v->number;
            if (const tag_value* v = c->value("Units"); v && v->is_string) k.units = v->text;
            im.calibrations.push_back(k);
          }
    }
    if (const tag_value* v = g->find("ImageTags.Meta Data.Format"); v && v->is_string) im.format = v->text;
    if (const tag_value* v = g->find("ImageTags.Meta Data.Data Order Swapped"); v && v->is_number)
      im.order_swapped = int(whole(*v, 0, 1, 2));
    if (const tag_value* v = g->find("ImageTags.Microscope Info.Voltage"); v && v->is_number) im.voltage_V = v->number;
    out.push_back(std::move(im));
  }
  return out;
}

}  // namespace tycho::detectors::dm
