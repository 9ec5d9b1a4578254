// What the `cxi` and `hdf5` sources do alike: open the file and the pattern array, read a table
// of positions, convert units, read list-valued config keys.
#pragma once

#include <tycho/sdk.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pattern_reader.hpp"
#include "source_state.hpp"

namespace tycho::cxi {

// Opens `path` read-only; `given` is the path as the config wrote it (a relative one gets a hint
// about where it resolved). `component` names the source in messages.
h5::h5_id open_file(const std::string& path, const std::string& given, const char* component);

// Opens s.dataset_path in s.file as the pattern array with the axis roles `roles` (from
// `roles_from`, for messages), checks its element type, fills s.dataset, s.layout and the shapes
// and stored dtype of s.info.
void open_patterns(source_data& s, const std::vector<axis_role>& roles, const std::string& roles_from);

// Fills the rest of s.info: shapes, centring, description; calibrations NaN (set afterwards).
void init_info(source_data& s, bool centred);

// Factor from a length unit to Å ("m", "mm", "um"/"µm", "nm", "pm", "A"/"Å"/"Angstrom"), nullopt
// for any other.
std::optional<double> length_unit_to_A(const std::string& unit);

// How a table of per-pattern vectors is stored: (P, k), (k, P), or whichever the shape says.
enum class table_order { from_shape, patterns_first, components_first };

// The dataset `path` of s.file as a (P, k) table of doubles (P = the number of patterns), stored
// (P, k) or (k, P) as `order` says or, by default, as its shape says; a square (k, k) table with
// P = k is refused as ambiguous, naming `order_key` (the config key that settles it; "" if none). `what` says what the table holds, for
// messages ("translations in metres").
std::vector<double> read_table(const source_data& s, const std::string& path, int64_t k, table_order order,
                               const std::string& order_key, const std::string& what);

// A config value that is an array of strings, e.g. axes = ["Rx", "Ry", "Qx", "Qy"]; nullopt when
// absent; throws naming the key when it is not an array of strings.
std::optional<std::vector<std::string>> string_list(const sdk::config_view& cfg, const char* key);

}  // namespace tycho::cxi
