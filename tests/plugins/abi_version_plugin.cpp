// A test-only plugin whose descriptor claims another ABI version (TEST_PLUGIN_ABI_VERSION,
// packed (major << 16) | minor), written by hand rather than with TYCHO_PLUGIN so the version
// is exactly what the test asks for. The host must refuse it after reading the descriptor's
// first two fields, before calling `init` or reading the components.
//
// Built by tests/test_plugins.cmake:
//   libtycho_plugin_abi_major2.so              2.0  (another major version)
//   libtycho_plugin_abi_newer_minor.so         1.99 (a newer minor than the host, requiring it)
//   libtycho_plugin_abi_newer_minor_ok.so      1.99 requiring 1.1 (TEST_PLUGIN_ABI_REQUIRED,
//                                              TEST_PLUGIN_ACCEPTABLE): the host loads it
//   libtycho_plugin_abi_old_dlpack.so          1.1 built "with dlpack.h 0.5" (TEST_PLUGIN_DLPACK)
// into <build>/test-plugins, never into lib/tycho/plugins.
#include <tycho/tycho_plugin.h>

#ifndef TEST_PLUGIN_ABI_VERSION
#error "define TEST_PLUGIN_ABI_VERSION"
#endif
#ifndef TEST_PLUGIN_NAME
#error "define TEST_PLUGIN_NAME"
#endif
#ifndef TEST_PLUGIN_ENGINE
#error "define TEST_PLUGIN_ENGINE (the name of the engine component it claims to provide)"
#endif

#ifndef TEST_PLUGIN_ABI_REQUIRED
#define TEST_PLUGIN_ABI_REQUIRED 0u  // "the minor it was built with"
#endif
#ifndef TEST_PLUGIN_DLPACK
#define TEST_PLUGIN_DLPACK TYCHO_DLPACK_VERSION
#endif

namespace {

#ifdef TEST_PLUGIN_ACCEPTABLE
tycho_status refuse_init(const tycho_host_api*) { return TYCHO_OK; }  // the host may load this one
#else
// If the host ever calls this, the refusal says "init function failed" instead of naming the
// versions, and the tests that check the refusal text fail.
tycho_status refuse_init(const tycho_host_api*) { return TYCHO_ERR_INTERNAL; }
#endif

// Never called: the host must not get this far.
const tycho_engine_vtable k_vtable = {sizeof(tycho_engine_vtable), TEST_PLUGIN_ABI_VERSION,
                                      nullptr, nullptr, nullptr, nullptr};

const char* const k_keys[] = {nullptr};

const tycho_component k_components[] = {
    {sizeof(tycho_component), TEST_PLUGIN_ABI_VERSION, TYCHO_COMPONENT_ENGINE,
     TEST_PLUGIN_ENGINE, "9.9.9", "test-only engine of another ABI version (never usable)",
     TYCHO_DEVICE_BIT(kDLCPU), k_keys, &k_vtable, 0u, nullptr},
};

const tycho_plugin_descriptor k_descriptor = {
    sizeof(tycho_plugin_descriptor),
    TEST_PLUGIN_ABI_VERSION,
    TEST_PLUGIN_NAME,
    "9.9.9",
    &refuse_init,
    static_cast<int64_t>(sizeof(k_components) / sizeof(k_components[0])),
    k_components,
    TEST_PLUGIN_ABI_REQUIRED,
    TEST_PLUGIN_DLPACK,
};

}  // namespace

extern "C" TYCHO_PLUGIN_EXPORT const tycho_plugin_descriptor* tycho_plugin_entry(void) {
  return &k_descriptor;
}
