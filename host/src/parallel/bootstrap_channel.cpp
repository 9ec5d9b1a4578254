// The C view of a bootstrap channel (tycho_bootstrap): what a reducer calls. Exceptions stop
// here and become a status plus the calling thread's last-error message.
#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>

#include <new>

#include "parallel/bootstrap_channels.hpp"
#include "runtime/status_barrier.hpp"

namespace tycho::host {
namespace {

tycho_status c_broadcast(void* context, void* data, size_t bytes, int32_t root) noexcept {
  return status_barrier("bootstrap", [&] {
    if (context == nullptr) return set_last_error(TYCHO_ERR_INVALID_ARGUMENT, "bootstrap: no channel");
    static_cast<bootstrap_channel*>(context)->broadcast(data, bytes, root);
    return TYCHO_OK;
  });
}

}  // namespace

tycho_bootstrap bootstrap_channel::bootstrap() { return tycho_bootstrap{this, &c_broadcast}; }

}  // namespace tycho::host
