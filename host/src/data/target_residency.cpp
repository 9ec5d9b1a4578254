#include "data/target_residency.hpp"

#include <tycho/core/error.hpp>

#include <sys/resource.h>

#include <toml++/toml.h>

#include "settings/config_read.hpp"
#include "tycho/host/run_plan.hpp"

namespace tycho::host {

target_residency read_target_residency(const config_document& doc) {
  const std::string v = read_key<std::string>(doc.table_at("reconstruct"), "target_residency", "reconstruct").value_or("auto");
  if (v == "device") return target_residency::device;
  if (v == "host") return target_residency::host;
  if (v == "disk") return target_residency::disk;
  if (v == "auto") return target_residency::automatic;
  fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] target_residency = \"", v,
       "\": expected \"device\", \"host\", \"disk\" or \"auto\"");
}

const char* residency_name(target_residency r) {
  switch (r) {
    case target_residency::device: return "device";
    case target_residency::host: return "host";
    case target_residency::disk: return "disk";
    case target_residency::automatic: break;
  }
  return "auto";
}

host_capacity host_memory_capacity(const config_document& doc) {
  host_capacity c;
  if (const auto gib = read_key<double>(doc.table_at("reconstruct"), "host_memory_GiB", "reconstruct")) {
    if (!(*gib > 0)) fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] host_memory_GiB = ", *gib, ": must be > 0");
    // In bytes from 1 to below 2^63: 1e-300 GiB became 0 bytes, read as "unknown", and 1e300
    // overflowed the conversion.
    if (!(*gib >= 0x1p-30 && *gib < 0x1p33))
      fail(TYCHO_ERR_INVALID_ARGUMENT, "[reconstruct] host_memory_GiB = ", *gib,
           ": must be from 1 byte to below 2^63 bytes (9.3e-10 to 8589934592 GiB)");
    c.bytes = uint64_t(*gib * double(uint64_t(1) << 30));
    c.source = cat("[reconstruct] host_memory_GiB = ", *gib);
    return c;
  }
  // What the machine can give now, not what it has: the memory other processes hold is not
  // this run's, and swapping is not planned for. A margin of 10 % is kept for what the plan
  // does not count (the libraries, the allocator's slack, the page cache a run reads through).
  if (const uint64_t available = available_memory_bytes(); available > 0) {
    c.bytes = available - available / 10;
    c.source = cat("this machine's available memory: ", human_bytes(available),
                   " (MemAvailable, no swap) less a 10 % margin");
  } else {
    c.bytes = physical_memory_bytes();
    c.source = "this machine's physical memory (its available memory is not known)";
  }
  // A process limit below the machine's memory is what this run may use.
  for (const auto& [resource, name] : {std::pair{RLIMIT_AS, "RLIMIT_AS"}, std::pair{RLIMIT_DATA, "RLIMIT_DATA"}}) {
    rlimit l{};
    if (getrlimit(resource, &l) == 0 && l.rlim_cur != RLIM_INFINITY && (c.bytes == 0 || uint64_t(l.rlim_cur) < c.bytes)) {
      c.bytes = uint64_t(l.rlim_cur);
      c.source = cat("the process's ", name);
    }
  }
  return c;
}

residency_choice choose_residency(target_residency asked, const memory_problem& need, const host_capacity& capacity,
                                  bool can_stream, const std::string& why_not, bool on_device) {
  residency_choice c;
  switch (asked) {
    case target_residency::device:
      c.name = "device";
      c.why = "[reconstruct] target_residency = \"device\"";
      return c;
    case target_residency::host:
      if (on_device)
        fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] target_residency = \"host\": this version keeps a device engine's "
             "targets on the device (\"device\") or reads them per batch (\"disk\"); pinned host targets are not yet available");
      c.name = "host";
      c.why = "[reconstruct] target_residency = \"host\" (host memory: where this engine computes)";
      return c;
    case target_residency::disk:
      if (!can_stream) fail(TYCHO_ERR_UNSUPPORTED, "[reconstruct] target_residency = \"disk\": ", why_not);
      c.streamed = true;
      c.name = "disk";
      c.why = "[reconstruct] target_residency = \"disk\"";
      return c;
    case target_residency::automatic: break;
  }
  c.name = "device";
  if (on_device) {
    c.why = "target_residency = \"auto\": a device engine keeps its targets on the device";
    return c;
  }
  memory_problem in_memory = need;
  in_memory.targets_streamed = false;
  const uint64_t held = memory_total(in_memory);
  if (capacity.bytes == 0 || held <= capacity.bytes) {
    c.why = cat("target_residency = \"auto\": the run needs ", human_bytes(held), " with its targets in memory, within ",
                capacity.bytes ? human_bytes(capacity.bytes) : std::string("(unknown)"), " (", capacity.source, ")");
    return c;
  }
  memory_problem streamed = need;
  streamed.targets_streamed = true;
  const uint64_t per_batch = memory_total(streamed);
  if (!can_stream) {
    c.why = cat("target_residency = \"auto\": the run needs ", human_bytes(held), " with its targets in memory, more than ",
                human_bytes(capacity.bytes), " (", capacity.source, "), and they cannot be read from disk: ", why_not);
    return c;
  }
  c.streamed = true;
  c.name = "disk";
  c.why = cat("target_residency = \"auto\": the run needs ", human_bytes(held), " with its targets in memory, more than ",
              human_bytes(capacity.bytes), " (", capacity.source, "); reading them per batch from disk it needs ",
              human_bytes(per_batch));
  return c;
}

}  // namespace tycho::host
