// A test-only third-party engine ("thirdparty_planned") that cannot compute but describes its
// memory through tycho_engine_vtable::plan_memory (ABI 1.1): `tycho plan` must size a run with
// it exactly as the terms say, search a smaller batch with it (TYCHO_MEMORY_BATCH_SCALES), and
// pass it the optimizers' state arrays. Written by hand (no SDK helpers) as an outside author
// could; built by tests/test_plugins.cmake into <build>/test-plugins. It also declares two
// typed keys (widgets, mode) for the settings tests (tests/test_settings.cpp).
//
// Terms, per device (P patterns, M = N0·N1, W devices, b = ⌈B/W⌉):
//   targets          ⌈P/W⌉·M·4
//   batch buffers    b·M·8
//   optimizer state  (a_object + a_probe)·1000
#include <tycho/tycho_plugin.h>

#include <stdio.h>
#include <string.h>

namespace {

tycho_status no_create(const tycho_engine_setup*, tycho_engine**) { return TYCHO_ERR_UNSUPPORTED; }

void term(tycho_memory_term* t, const char* name, uint64_t bytes, const char* formula) {
  snprintf(t->name, sizeof t->name, "%s", name);
  snprintf(t->formula, sizeof t->formula, "%s", formula);
  t->bytes = bytes;
}

tycho_status plan_memory(const tycho_config*, const tycho_memory_problem* p, tycho_memory_report* out) {
  if (p == nullptr || out == nullptr || p->struct_size < sizeof(tycho_memory_problem) ||
      out->struct_size < sizeof(tycho_memory_report))
    return TYCHO_ERR_ABI_MISMATCH;
  const uint64_t m = uint64_t(p->window[0] * p->window[1]), w = uint64_t(p->devices);
  const uint64_t shard = (uint64_t(p->patterns) + w - 1) / w, b = (uint64_t(p->batch_size) + w - 1) / w;
  out->flags = TYCHO_MEMORY_ON_DEVICE | TYCHO_MEMORY_BATCH_SCALES;
  out->n_terms = 3;
  term(&out->terms[0], "targets", shard * m * 4, "shard · M · 4 B");
  term(&out->terms[1], "batch buffers", (b < shard ? b : shard) * m * 8, "b · M · 8 B");
  term(&out->terms[2], "optimizer state", uint64_t(p->object_optimizer_arrays + p->probe_optimizer_arrays) * 1000,
       "(a_object + a_probe) · 1000 B");
  return TYCHO_OK;
}

tycho_engine_vtable make_vtable() {
  tycho_engine_vtable vt;
  memset(&vt, 0, sizeof vt);
  vt.struct_size = sizeof vt;
  vt.abi_version = TYCHO_ABI_VERSION;
  vt.create = &no_create;
  vt.plan_memory = &plan_memory;
  return vt;
}
const tycho_engine_vtable k_vtable = make_vtable();

const char* const k_keys[] = {nullptr};  // the settings below name the keys
const char* const k_modes[] = {"fast", "careful", nullptr};
// Typed declarations (ABI 1.1): the host refuses a wrongly typed value naming the declared type.
const tycho_setting k_settings[] = {
    {sizeof(tycho_setting), "widgets", TYCHO_SETTING_INTEGER, "3", TYCHO_SETTING_HAS_MIN, 1.0, 0.0, nullptr, "",
     "how many widgets the engine would use"},
    {sizeof(tycho_setting), "mode", TYCHO_SETTING_STRING, "\"fast\"", 0u, 0.0, 0.0, k_modes, nullptr,
     "how the engine would go about it"},
    {sizeof(tycho_setting), nullptr, TYCHO_SETTING_STRING, nullptr, 0u, 0.0, 0.0, nullptr, nullptr, nullptr},
};

const tycho_component k_components[] = {
    {sizeof(tycho_component), TYCHO_ABI_VERSION, TYCHO_COMPONENT_ENGINE, "thirdparty_planned", "0.1.0",
     "test-only engine that only describes its memory", TYCHO_DEVICE_BIT(kDLCUDA), k_keys, &k_vtable, 0,
     k_settings},
};

const tycho_plugin_descriptor k_descriptor = {
    sizeof(tycho_plugin_descriptor), TYCHO_ABI_VERSION, "planned_engine", "0.1.0", nullptr,
    static_cast<int64_t>(sizeof(k_components) / sizeof(k_components[0])), k_components,
};

}  // namespace

extern "C" TYCHO_PLUGIN_EXPORT const tycho_plugin_descriptor* tycho_plugin_entry(void) { return &k_descriptor; }
