// Gatan DigitalMicrograph .dm3 / .dm4 files written for the tests, independently of the reader:
// the header, the tag tree (groups, data tags with their info arrays, DM4's tag sizes) and the
// images of ImageList as GMS lays them out (ImageData: Data, DataType, Dimensions, Calibrations;
// ImageTags: Meta Data, Microscope Info; Thumbnails naming the previews). Values are written in
// the byte order the header states; the tag structure is big-endian.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tycho::test {

struct dm_calibration {
  double origin = 0, scale = 1;
  std::string units;
};

struct dm_image_spec {
  int data_type = 10;          // DM DataType: 1 int16, 2 float32, 6 uint8, 7 int32, 10 uint16, 11 uint32, 12 float64
  std::vector<int64_t> dims;   // DM order, fastest first
  std::string data;            // the elements, little-endian, in DM memory order (C order of reversed dims)
  std::vector<dm_calibration> calibrations;
  std::string format;          // ImageTags.Meta Data.Format; "" to leave out
  int order_swapped = -1;      // ImageTags.Meta Data.Data Order Swapped; -1 to leave out
  double voltage_V = 0;        // ImageTags.Microscope Info.Voltage; 0 to leave out
  std::string name;
  int element = 0;             // the Data array's element encoding; 0: the one DataType implies
};

namespace dm_detail {

inline int element_type(int data_type) {  // the Data array's element encoding
  switch (data_type) {
    case 1: return 2;   // short
    case 2: return 6;   // float
    case 6: return 10;  // octet
    case 7: return 3;   // long
    case 9: return 9;   // char
    case 10: return 4;  // ushort
    case 11: return 5;  // ulong
    case 12: return 7;  // double
    default: return 10;
  }
}
inline int type_size(int t) { return t == 2 || t == 4 ? 2 : t == 3 || t == 5 || t == 6 ? 4 : t == 7 || t == 11 || t == 12 ? 8 : 1; }

class writer {
 public:
  writer(int version, bool little) : dm4_(version == 4), little_(little) {}
  static void be(std::string& out, uint64_t v, int bytes) {
    for (int b = bytes - 1; b >= 0; --b) out += char((v >> (8 * b)) & 0xff);
  }
  void word(std::string& out, uint64_t v) const { be(out, v, dm4_ ? 8 : 4); }
  // `bytes` little-endian bytes of one value, in the file's order.
  std::string value(const void* p, int bytes) const {
    std::string s(static_cast<const char*>(p), std::size_t(bytes));
    if (!little_) std::reverse(s.begin(), s.end());
    return s;
  }
  // A tag entry: kind 20 (group, `body` = its flags, count and entries) or 21 (data).
  std::string tag(int kind, const std::string& name, const std::string& body) const {
    std::string out;
    out += char(kind);
    be(out, name.size(), 2);
    out += name;
    if (dm4_) be(out, body.size(), 8);
    return out + body;
  }
  std::string group(const std::vector<std::string>& entries) const {
    std::string out;
    out += char(0);  // sorted
    out += char(1);  // open
    word(out, entries.size());
    for (const auto& e : entries) out += e;
    return out;
  }
  std::string data(const std::vector<uint64_t>& info, const std::string& bytes) const {
    std::string out = "%%%%";
    word(out, info.size());
    for (uint64_t i : info) word(out, i);
    return out + bytes;
  }
  std::string number(const std::string& name, int type, double v) const {
    std::string b;
    switch (type) {
      case 3: { int32_t x = int32_t(v); b = value(&x, 4); break; }
      case 5: { uint32_t x = uint32_t(v); b = value(&x, 4); break; }
      case 6: { float x = float(v); b = value(&x, 4); break; }
      case 7: { double x = v; b = value(&x, 8); break; }
      case 8: { uint8_t x = uint8_t(v); b = value(&x, 1); break; }
      default: { int16_t x = int16_t(v); b = value(&x, 2); break; }
    }
    return tag(21, name, data({uint64_t(type)}, b));
  }
  std::string text(const std::string& name, const std::string& s) const {  // UTF-8 as an array of UTF-16 units
    std::string b;
    uint64_t n = 0;
    for (std::size_t i = 0; i < s.size(); ++n) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      uint16_t x = c;
      if (c >= 0xe0 && i + 2 < s.size()) {
        x = uint16_t((c & 0x0f) << 12 | (s[i + 1] & 0x3f) << 6 | (s[i + 2] & 0x3f));
        i += 3;
      } else if (c >= 0xc0 && i + 1 < s.size()) {
        x = uint16_t((c & 0x1f) << 6 | (s[i + 1] & 0x3f));
        i += 2;
      } else {
        i += 1;
      }
      b += value(&x, 2);
    }
    return tag(21, name, data({20, 4, n}, b));
  }
  std::string array(const std::string& name, int element, const std::string& le_bytes) const {
    const int size = type_size(element);
    std::string b;
    for (std::size_t k = 0; k + std::size_t(size) <= le_bytes.size(); k += std::size_t(size)) b += value(&le_bytes[k], size);
    return tag(21, name, data({20, uint64_t(element), le_bytes.size() / std::size_t(size)}, b));
  }

 private:
  bool dm4_, little_;
};

}  // namespace dm_detail

// A whole .dm3 (version 3) or .dm4 (4) file: ImageList holds `images` in order; `thumbnails`
// lists the indices the Thumbnails group names.
inline std::string dm_bytes(int version, bool little, const std::vector<dm_image_spec>& images,
                            const std::vector<int64_t>& thumbnails = {}) {
  using dm_detail::writer;
  const writer w(version, little);
  std::vector<std::string> list;
  for (const dm_image_spec& im : images) {
    std::vector<std::string> dims, cals;
    for (int64_t d : im.dims) dims.push_back(w.number("", 3, double(d)));
    for (const auto& c : im.calibrations)
      cals.push_back(w.tag(20, "", w.group({w.number("Origin", 6, c.origin), w.number("Scale", 6, c.scale), w.text("Units", c.units)})));
    std::vector<std::string> image_data = {
        w.tag(20, "Calibrations", w.group({w.tag(20, "Brightness", w.group({w.number("Origin", 6, 0), w.number("Scale", 6, 1),
                                                                             w.text("Units", "")})),
                                           w.tag(20, "Dimension", w.group(cals))})),
        w.array("Data", im.element != 0 ? im.element : dm_detail::element_type(im.data_type), im.data),
        w.number("DataType", 3, im.data_type),
        w.tag(20, "Dimensions", w.group(dims)),
        w.number("PixelDepth", 3, dm_detail::type_size(dm_detail::element_type(im.data_type)))};
    std::vector<std::string> meta, tags;
    if (!im.format.empty()) meta.push_back(w.text("Format", im.format));
    if (im.order_swapped >= 0) meta.push_back(w.number("Data Order Swapped", 8, im.order_swapped));
    if (!meta.empty()) tags.push_back(w.tag(20, "Meta Data", w.group(meta)));
    if (im.voltage_V > 0) tags.push_back(w.tag(20, "Microscope Info", w.group({w.number("Voltage", 7, im.voltage_V)})));
    std::vector<std::string> entries = {w.tag(20, "ImageData", w.group(image_data)), w.tag(20, "ImageTags", w.group(tags))};
    if (!im.name.empty()) entries.push_back(w.text("Name", im.name));
    list.push_back(w.tag(20, "", w.group(entries)));
  }
  std::vector<std::string> thumbs;
  for (int64_t t : thumbnails) thumbs.push_back(w.tag(20, "", w.group({w.number("ImageIndex", 5, double(t))})));
  const std::string root = w.group({w.tag(20, "ImageList", w.group(list)), w.tag(20, "Thumbnails", w.group(thumbs))});
  std::string out;
  writer::be(out, uint64_t(version), 4);
  writer::be(out, root.size() + 8, version == 4 ? 8 : 4);
  writer::be(out, little ? 1 : 0, 4);
  out += root;
  out.append(8, '\0');
  return out;
}

}  // namespace tycho::test
