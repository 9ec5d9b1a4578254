// Gatan DigitalMicrograph .dm3 / .dm4 files: a header (version, size, byte order) and a tree of
// tags, groups of named or unnamed entries whose data tags carry an "info array" describing
// their encoding (a simple number, a string, a struct, an array). The images sit under
// ImageList, each with ImageData (Data: the pixels, DataType, Dimensions, Calibrations) and
// ImageTags (acquisition metadata); Thumbnails names the images that are previews.
//   DM3: counts and info entries are 32-bit; DM4: 64-bit, and every tag carries its size.
//   Sizes and info arrays are big-endian; values are in the byte order the header states.
//
// The parser reads tags only (pixel arrays are recorded by offset and skipped), checks every
// count and size against the bytes left in the file before using it, and bounds the nesting
// depth; a file it cannot walk is refused naming the offset and what was expected. Not
// thread-safe per file object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "raw_file.hpp"

namespace tycho::detectors::dm {

// A data tag: a number, a string, or an array (recorded where its elements are).
struct tag_value {
  bool is_number = false, is_string = false, is_array = false;
  double number = 0;
  std::string text;
  int element_type = 0;       // arrays: the DM type code of the elements (2 short ... 12 uint64)
  uint64_t offset = 0, count = 0;  // arrays of simple elements: where, how many
};

struct tag_group {
  // Entries in file order; an unnamed entry is named by its index, "[3]".
  std::vector<std::pair<std::string, std::unique_ptr<tag_group>>> groups;
  std::vector<std::pair<std::string, tag_value>> values;
  const tag_group* group(const std::string& name) const;
  const tag_value* value(const std::string& name) const;
  // A dotted path of group names ending in a value: "ImageTags.Microscope Info.Voltage".
  const tag_value* find(const std::string& dotted) const;
};

struct dm_file {
  int version = 0;            // 3 or 4
  bool little_endian = true;  // the values' (and pixels') byte order
  tag_group root;
};

// Parses the tags of `f`; throws TYCHO_ERR_BAD_DATA naming the file and the offset.
dm_file parse(const raw_file& f);

// The byte size of a simple DM type (2 short, 3 long, 4 ushort, 5 ulong, 6 float, 7 double,
// 8 bool, 9 char, 10 octet, 11 int64, 12 uint64); 0 for any other.
int simple_size(uint64_t type);

// One image of ImageList, with what a reader needs.
struct image {
  int index = 0;               // in ImageList
  std::string name;
  int data_type = -1;          // ImageData.DataType
  std::vector<int64_t> dims;   // ImageData.Dimensions, DM order: fastest first (x, y, ...)
  uint64_t data_offset = 0, data_count = 0;
  int data_element_type = 0;   // the Data array's element type
  struct calibration {
    double origin = 0, scale = 1;
    std::string units;
    bool present = false;
  };
  std::vector<calibration> calibrations;  // per dimension, DM order
  std::string format;          // ImageTags.Meta Data.Format ("Diffraction image", "Spectrum image", ...)
  int order_swapped = -1;      // ImageTags.Meta Data.Data Order Swapped; -1 absent
  double voltage_V = 0;        // ImageTags.Microscope Info.Voltage; 0 absent
  bool thumbnail = false;
};

// The images of ImageList in order, thumbnails marked.
std::vector<image> images(const dm_file& f);

}  // namespace tycho::detectors::dm
