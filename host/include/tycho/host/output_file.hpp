// What the `tycho` command checks about a file it will write (a result, a prepared file), before
// the first iteration, so that no run computes for hours and then cannot save, and no run
// destroys data (issue 12; docs/guarantees.md):
//   - the name holds no NUL or control character;
//   - an output is never one of the run's inputs (the config, the data, the --from file);
//   - an output that exists and is not a regular file (folder, symlink, FIFO, device) is refused,
//     whatever the overwrite setting;
//   - an existing regular file is replaced only when the user asked for it (--overwrite or
//     [output] overwrite = true): otherwise refused;
//   - the folder exists, is writable (a probe file is made and removed) and has room for the
//     file (and its temporary copy).
// Every error is a tycho::error naming the path and what was expected.
#pragma once

#include <tycho/core/config.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tycho::host {

// The files a run reads: the config, the --from file, and every string of the [data] tables of
// `docs` that names an existing file (resolved against each document's folder).
std::vector<std::string> run_input_files(const std::vector<const config_document*>& docs,
                                         const std::vector<std::string>& paths);

// `what` names the file in messages ("result", "prepared file"); `example_name` is suggested
// when `path` is a folder.
void check_output_file(const std::string& path, const std::vector<std::string>& inputs, bool overwrite,
                       const char* what, const char* example_name);

// Refuses a file name holding a NUL byte or another control character (a newline, an escape):
// the system would cut the name at a NUL and write another file than the one reported. `what`
// names the setting or option ("[output] path", "-o"); the name is quoted with the character
// escaped (\x00).
void check_file_name_text(const std::string& name, const std::string& what);

// Refuses when the folder of `path` has less than `bytes` free for unprivileged writers.
void check_free_space(const std::string& path, uint64_t bytes, const char* what);

// [output] overwrite (false when absent).
bool configured_overwrite(const config_document& doc);

// [output] checkpoint_every: save the result so far every N iterations (0, the default: never).
// Refused unless an integer from 0 to 1e9.
int64_t configured_checkpoint_every(const config_document& doc);

}  // namespace tycho::host
