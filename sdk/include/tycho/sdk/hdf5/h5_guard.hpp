// A guard against files that crash the HDF5 library itself.
//
// libhdf5 trusts a file's internal structure: a crafted or corrupt file can make it read out of
// bounds, follow a bad global-heap reference (a SEGV in H5HG_read while converting a
// variable-length string), or loop (docs/hostile-input.md records what fuzzing found in
// libhdf5 1.10.8). tycho cannot fix the library, so an HDF5 source walks a file's metadata once
// in a forked child process first: if the library crashes or hangs there, the source refuses the
// file with a message naming it, and the calling process (a long job, a Python session) lives on.
// If the walk succeeds or fails with an ordinary error, the source opens the file in-process as
// before (an ordinary error is then raised again there, with its full message).
//
// What it costs: one fork per opened file (copy-on-write; milliseconds) and a second metadata
// walk. What it does not cover: the pattern data read later (H5Dread of the arrays), which the
// walk does not touch. Set TYCHO_HDF5_GUARD=0 to skip the child (e.g. to debug in one process).
//
// Thread-safety: call it while holding the plugin's h5_session (so no other thread of this
// plugin is inside libhdf5 when the process forks); the walk then runs in the child without
// locking again. POSIX only.
#pragma once

#include <functional>
#include <string>

namespace tycho::h5 {

// 120 s, or TYCHO_HDF5_GUARD_TIMEOUT_S when set to a positive number.
double default_guard_timeout_s();

// Runs `walk` in a forked child and waits for it, at most `timeout_s` seconds.
// Returns normally when the child finished `walk` or `walk` threw (the caller repeats the walk
// in-process and gets the error there). Throws tycho::sdk::error (TYCHO_ERR_BAD_DATA) naming
// `file` when the child died of a signal or of a sanitizer report (any exit status but the two
// it uses), or did not finish in time (then it is killed). When fork() itself fails the walk is
// not guarded (a warning is logged) and the call returns.
void guard_metadata_walk(const std::string& file, const std::function<void()>& walk,
                         double timeout_s = default_guard_timeout_s());

}  // namespace tycho::h5
