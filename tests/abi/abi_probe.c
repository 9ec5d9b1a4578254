/* The ABI probe: a shared library whose one exported function takes a pointer to every public
 * struct of abi/tycho/, so that abidw records their whole layout (built with -g -Og) and abidiff
 * compares it with the committed baseline (abi/baseline/tycho_abi_probe.abi; tests/abi_baseline.cmake).
 *
 * TYCHO_ABI_PROBE_BREAK: inserts a field before tycho_step_info::grad_scale (by a macro, without
 * touching the headers), the deliberate change the check must catch. */
#ifdef TYCHO_ABI_PROBE_BREAK
#define grad_scale inserted_by_the_test; double grad_scale
#endif

#include <tycho/tycho.h>
#include <tycho/tycho_plugin.h>

__attribute__((visibility("default"))) size_t tycho_abi_probe(
    const tycho_plugin_descriptor* descriptor, const tycho_component* component, const tycho_setting* setting,
    const tycho_host_api* host, const tycho_source_vtable* source, const tycho_dataset_info* dataset,
    const tycho_loss_vtable* loss, const tycho_loss_binding* loss_binding, const tycho_loss_ref* loss_ref,
    const tycho_engine_setup* engine_setup, const tycho_engine_vtable* engine, const tycho_memory_problem* problem,
    const tycho_memory_term* term, const tycho_memory_report* report, const tycho_step_info* step,
    const tycho_optimizer_vtable* optimizer, const tycho_bootstrap* bootstrap, const tycho_bootstrap_ref* bootstrap_ref,
    const tycho_reducer_setup* reducer_setup, const tycho_reducer_vtable* reducer, const tycho_named_array* named,
    const tycho_record* record, const tycho_format_vtable* format, const tycho_progress* progress,
    const tycho_session_options* options, tycho_tensor_id tensor, tycho_save_mode mode, tycho_log_level level,
    tycho_setting_type setting_type, const tycho_constraint_setup* constraint_setup,
    const tycho_constraint_state* constraint_state, const tycho_constraint_vtable* constraint,
    const tycho_evaluate_options* evaluate_options, tycho_radiation radiation, const tycho_array_producer* producer) {
  /* Something that reads every argument, so nothing is optimised away. */
  return (size_t)descriptor + (size_t)component + (size_t)setting + (size_t)host + (size_t)source + (size_t)dataset +
         (size_t)loss + (size_t)loss_binding + (size_t)loss_ref + (size_t)engine_setup + (size_t)engine +
         (size_t)problem + (size_t)term + (size_t)report + (size_t)step + (size_t)optimizer + (size_t)bootstrap +
         (size_t)bootstrap_ref + (size_t)reducer_setup + (size_t)reducer + (size_t)named + (size_t)record +
         (size_t)format + (size_t)progress + (size_t)options + (size_t)tensor + (size_t)mode + (size_t)level +
         (size_t)setting_type + (size_t)constraint_setup + (size_t)constraint_state + (size_t)constraint +
         (size_t)evaluate_options + (size_t)radiation + (size_t)producer;
}

/* Every function of the embedding API (tycho.h), by its type: one exported function-pointer
 * variable each (NULL: the probe does not link libtycho), so abidw records each signature and
 * abidiff notices a changed parameter or return type. Which functions libtycho exports is
 * checked against abi/baseline/libtycho.abi (its symbol table). */
#define TYCHO_PROBE_SIGNATURE(f) __attribute__((visibility("default"))) __typeof__(f)* const tycho_probe_##f = 0;
TYCHO_PROBE_SIGNATURE(tycho_abi_version)
TYCHO_PROBE_SIGNATURE(tycho_version)
TYCHO_PROBE_SIGNATURE(tycho_status_string)
TYCHO_PROBE_SIGNATURE(tycho_last_error)
TYCHO_PROBE_SIGNATURE(tycho_session_create)
TYCHO_PROBE_SIGNATURE(tycho_session_run)
TYCHO_PROBE_SIGNATURE(tycho_session_get)
TYCHO_PROBE_SIGNATURE(tycho_session_save)
TYCHO_PROBE_SIGNATURE(tycho_session_destroy)
TYCHO_PROBE_SIGNATURE(tycho_session_create_ex)
TYCHO_PROBE_SIGNATURE(tycho_session_rank)
TYCHO_PROBE_SIGNATURE(tycho_session_world_size)
TYCHO_PROBE_SIGNATURE(tycho_session_barrier)
TYCHO_PROBE_SIGNATURE(tycho_shutdown)
TYCHO_PROBE_SIGNATURE(tycho_evaluate)
TYCHO_PROBE_SIGNATURE(tycho_free_string)
