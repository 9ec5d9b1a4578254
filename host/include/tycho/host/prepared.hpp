// Prepared files: `tycho preprocess` reads the data, runs the preprocessing stage
// (tycho/host/preprocess.hpp) and writes the result through the zip format, so that a later
// `tycho reconstruct --from prepared.zip` starts from it: on another machine when the patterns
// are embedded ([preprocess] save_raw_data = true), else by re-reading the source, whose SHA-256
// the file records. docs/file-format.md describes the file.
//
// Which tables a run from a prepared file takes from where: [data], [optics] and [preprocess]
// (what made the patterns, the calibrations and the geometry) come from the prepared file;
// [reconstruct], [parallel] and [output] from CONFIG and --set (or from the prepared file's
// config when no CONFIG is given). A CONFIG table of the first kind that differs from the
// prepared file's is logged as a warning and not used.
#pragma once

#include <tycho/core/config.hpp>

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

#include "tycho/host/dataset.hpp"
#include "tycho/host/preprocess.hpp"
#include "tycho/host/registry.hpp"
#include "tycho/host/result_record.hpp"

namespace tycho::host {

class stored_npy_member;  // host/src/target_stream.hpp

// Version of the prepared file's layout (its manifest's "format_version").
constexpr int k_prepared_format_version = 1;

// A loaded prepared file: its manifest, its config and, when embedded, its patterns.
struct prepared_file {
  prepared_file();
  prepared_file(prepared_file&&) noexcept;
  prepared_file& operator=(prepared_file&&) noexcept;
  ~prepared_file();

  std::string path;
  bool embedded = false;
  struct detail;
  std::unique_ptr<detail> d;  // manifest, record
};

// Loads `path` when it is a prepared file (its manifest says "format": "tycho-prepared"); nullopt
// when it is anything else (a result, not a zip, missing): the caller then treats it as a result.
// A prepared file of another format version, or an incomplete one, is refused; so is a zip file
// that is corrupt whatever it was meant to be (not a readable zip, a member twice, a manifest
// that is not JSON). A result is not read here (results/result_file.hpp reads it, checking its
// sizes before anything is inflated).
std::optional<prepared_file> try_load_prepared(const registry& reg, const std::string& path);

// The prepared file's own config (for `tycho reconstruct --from P` without CONFIG); its relative
// paths resolve against the prepared file's folder.
config_document prepared_config(const prepared_file& p);

// Replaces doc's [data], [optics] and [preprocess] by the prepared file's (a warning for each that
// differed and was not empty).
void merge_prepared_config(config_document& doc, const prepared_file& p);

// This rank's patterns (block `part` of `parts`), as read_dataset and the preprocessing stage
// leave them in a run straight from the config: from the embedded patterns, or by re-reading the
// source (refused when it is gone or its SHA-256 differs) and re-running the stage.
// `preprocess_json` receives the stage's report for the result's manifest.
// Embedded patterns in a zip file (every prepared file this tycho writes) are not loaded: the
// dataset comes back streamed (dataset::streamed: totals and mean pattern from one pass, no
// targets) and `member` holds the open patterns member, which the session reads per batch or at
// once (target_residency, host/src/target_stream.hpp). `member` stays empty otherwise.
dataset prepared_dataset(const prepared_file& p, const config_document& merged, const registry& reg, int64_t part,
                         int64_t parts, const rank_sum& sum_across_ranks, std::string& preprocess_json,
                         std::unique_ptr<stored_npy_member>& member);

// How `tycho preprocess` holds the patterns it embeds: streamed from the source into the file as
// they are preprocessed (the default, where the format takes produced arrays: memory bounded by
// a chunk of the source), or the whole scan in memory, then saved (the reference the streamed
// file is checked against, bit for bit).
enum class prepare_mode { streamed, in_memory };

// `tycho preprocess CONFIG -o OUTPUT`: writes the prepared file (atomically, through the format
// whose extension matches OUTPUT, else zip; the command has checked that OUTPUT's folder exists); `save_raw_data` (or [preprocess] save_raw_data)
// embeds the patterns: centred, uint16 when they are whole counts below 65536 (a source's
// counts through a stage that keeps them), else float32. `mode`: TYCHO_SAVE_NEW refuses an
// OUTPUT that exists by then. SIGINT and SIGTERM wait for the save to finish (stop_signals.hpp).
// Prints "wrote OUTPUT" to `out`; returns 0.
int preprocess_command(config_document doc, const registry& reg, const std::string& output, bool save_raw_data,
                       std::ostream& out, tycho_save_mode mode = TYCHO_SAVE_OVERWRITE,
                       prepare_mode how = prepare_mode::streamed);

}  // namespace tycho::host
