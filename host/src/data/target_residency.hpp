// Where a run's targets live ([reconstruct] target_residency, docs/streaming.md): in memory
// ("device": where the engine computes; "host": host memory; for a host engine both are host
// memory), or read per mini-batch from a prepared file's patterns ("disk", target_stream.hpp).
// "auto" asks the memory planner: in memory when the run fits the host's memory, else from disk
// when the data can be streamed; the choice and the reason go to the log.
#pragma once

#include <tycho/core/config.hpp>
#include <tycho/core/memory_plan.hpp>

#include <cstdint>
#include <string>

namespace tycho::host {

enum class target_residency { automatic, device, host, disk };

// [reconstruct] target_residency (validated against its declaration before).
target_residency read_target_residency(const config_document& doc);
const char* residency_name(target_residency r);  // "auto", "device", "host", "disk"

// The host memory the planner compares a run with, and where the figure comes from:
// [reconstruct] host_memory_GiB when given, else this machine's physical memory, or the
// process's RLIMIT_AS / RLIMIT_DATA when lower.
struct host_capacity {
  uint64_t bytes = 0;  // 0: unknown
  std::string source;  // "[reconstruct] host_memory_GiB = 0.5", "RLIMIT_DATA", ...
};
host_capacity host_memory_capacity(const config_document& doc);

struct residency_choice {
  bool streamed = false;  // read per batch from disk
  std::string name;       // the residency the run uses: "device", "host" or "disk"
  std::string why;        // for the log
};

// Resolves `asked` for a run whose in-memory problem is `need` (its targets_streamed unset).
// `can_stream`: the targets can be read per batch (a prepared file's embedded patterns);
// `why_not` says why not otherwise. `on_device`: the engine computes on a device (its terms are
// device memory; only "device" and "disk" apply). Throws TYCHO_ERR_UNSUPPORTED for an explicit
// residency that cannot be honoured, naming the reason. The memory check itself stays the
// caller's (check_host_memory with the chosen problem).
residency_choice choose_residency(target_residency asked, const memory_problem& need, const host_capacity& capacity,
                                  bool can_stream, const std::string& why_not, bool on_device);

}  // namespace tycho::host
