#include "runtime/batching_choice.hpp"

#include <tycho/core/error.hpp>

#include "settings/config_read.hpp"

namespace tycho::host {

batching_choice choose_batching(const config_document& doc, int64_t object_px, int64_t window_px, int64_t batch_size) {
  const std::string asked =
      read_key<std::string>(doc.table_at("reconstruct"), "batching", "reconstruct").value_or("auto");
  batching_choice c;
  if (asked != "auto") {
    c.kind = parse_batching(asked, "[reconstruct] batching");
    c.why = cat("batching = \"", asked, "\"");
    return c;
  }
  // A random batch's windows cover batch_size · window_px pixels (with overlaps): while that is
  // several times the object, every batch touches all of it anyway, and stepping it whole costs
  // little; beyond, the whole-object work per batch would grow with the scan.
  const double covered = double(batch_size) * double(window_px) / double(auto_compact_coverage);
  c.kind = double(object_px) > covered ? batching::compact : batching::random;
  c.why = cat("batching = \"auto\": the object's ", object_px, " px per slice are ",
              c.kind == batching::compact ? "more" : "no more", " than a batch's windows cover / ",
              auto_compact_coverage, " (", batch_size, " x ", window_px, " px / ", auto_compact_coverage, ")");
  return c;
}

}  // namespace tycho::host
