// A test-only shared library named like a plugin that does not export `tycho_plugin_entry`
// (it exports something else, so it is a perfectly loadable library). The host must refuse it
// with a message naming the missing entry function.
#include <tycho/tycho_plugin.h>

extern "C" TYCHO_PLUGIN_EXPORT const tycho_plugin_descriptor* tycho_plugin_entry_point_misspelt(void) {
  return nullptr;
}
