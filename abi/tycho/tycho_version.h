/* tycho ABI version.
 *
 * Rules (as for NCCL's net plugins and Vulkan's loader):
 *  - A MAJOR change breaks binary compatibility: the host refuses plugins of any other major.
 *  - A MINOR change only appends fields to structs or functions to vtables; every appended
 *    block carries a comment naming the minor that added it ("appended in ABI 1.1"). The host
 *    accepts a plugin whose minor is <= its own and checks `struct_size` before reading
 *    appended fields. A plugin built against a newer minor is accepted when the minor it
 *    requires (tycho_plugin_descriptor::abi_version_required, from ABI 1.1) is <= the host's,
 *    and refused otherwise.
 */
#ifndef TYCHO_VERSION_H
#define TYCHO_VERSION_H

#define TYCHO_ABI_VERSION_MAJOR 1
#define TYCHO_ABI_VERSION_MINOR 5
/* Packed as (major << 16) | minor, the form every descriptor carries. */
#define TYCHO_ABI_VERSION ((TYCHO_ABI_VERSION_MAJOR << 16) | TYCHO_ABI_VERSION_MINOR)
#define TYCHO_ABI_MAJOR_OF(v) ((unsigned)(v) >> 16)
#define TYCHO_ABI_MINOR_OF(v) ((unsigned)(v) & 0xffffu)

/* History of the minors:
 *   1.0  the first ABI.
 *   1.1  plugins state the minor they require and their DLPack version (descriptor);
 *        sized, growable tycho_loss_ref and tycho_bootstrap_ref beside the frozen by-value
 *        tycho_loss_binding and tycho_bootstrap; engines describe their memory
 *        (tycho_engine_vtable::plan_memory), optimizers their state
 *        (tycho_optimizer_vtable::state_arrays), components may be plan-only
 *        (tycho_component::flags) and declare their keys' types, defaults and docs
 *        (tycho_component::settings, tycho_setting).
 *   1.2  multislice and position correction: tycho_engine_setup::slice_propagator,
 *        slice_thickness_A and position_gradient; TYCHO_TENSOR_POSITIONS_GRAD.
 *   1.3  constraints as components: TYCHO_COMPONENT_CONSTRAINT, tycho_constraint_vtable,
 *        tycho_constraint_setup, tycho_constraint_state, TYCHO_CONSTRAINT_* bits; targets per
 *        mini-batch: tycho_engine_setup::target_reader (tycho_target_reader, the host reads
 *        each batch's targets on demand: target_residency = "disk") and
 *        tycho_memory_problem::targets_streamed; sources may deliver their stored dtype
 *        (uint8, uint16, float16) through read: tycho_dataset_info::reads_stored_dtype; the
 *        embedding API's tycho_evaluate (tycho_evaluate_options) and tycho_free_string;
 *        a loss's fused path for the engines: tycho_loss_vtable::evaluate_far_field; X-ray
 *        data: tycho_dataset_info::detector_distance_m, detector_pixel_m and radiation
 *        (tycho_radiation); deterministic sums: TYCHO_TENSOR_FIXED_POINT_SUMS, tycho_engine_vtable::finish_batch
 *        (TYCHO_FINISH_ENDS_ITERATION), tycho_engine_setup::host_finishes_batches,
 *        scan_positions_px and scan_first, int64 in a reducer's allreduce_sum;
 *        the object's work per batch in boxes (issue 30): tycho_engine_vtable::
 *        set_gradient_region, tycho_step_info::n_boxes / boxes / box_steps with
 *        tycho_optimizer_vtable::flags (TYCHO_OPTIMIZER_TAKES_BOXES),
 *        tycho_constraint_state::n_object_boxes / object_boxes; arrays produced while a format
 *        writes: tycho_array_producer, tycho_record::producers / manifest / manifest_context,
 *        tycho_format_vtable::flags (TYCHO_FORMAT_PRODUCED_ARRAYS). the positions' gradient per iteration:
 *        tycho_engine_vtable::set_position_gradient; the detector's own mask from a source:
 *        tycho_source_vtable::read_detector_mask. All before 0.1.0's release.
 *   1.4  the positions' Fisher information from an engine (the Cramér–Rao bound of each probe
 *        position): tycho_engine_vtable::position_information.
 *   1.5  the learning rates' share of their settings at a constraint's application (a
 *        regulariser's pull follows the steps it regularises):
 *        tycho_constraint_state::object_rate_factor and probe_rate_factor. */

/* Release version of the tycho runtime (not the ABI). */
#define TYCHO_VERSION_STRING "0.1.0"

#endif
