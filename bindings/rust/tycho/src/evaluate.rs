//! `tycho evaluate` from Rust: a saved result's accuracy against a ground truth.
use std::ffi::CStr;
use std::os::raw::c_char;
use std::path::Path;
use std::ptr;

use tycho_sys as sys;

use crate::error::{check, Result};
use crate::session::c_path;

/// How to compare (`tycho_evaluate_options`); a field left 0 takes its default.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[allow(non_snake_case)]
pub struct EvaluateOptions {
    /// σ of the local-phase Gaussian, Å (0: 2).
    pub sigma_A: f64,
    /// Inner fraction of the scanned field of view compared, in (0, 1] (0: 0.8).
    pub fov_fraction: f64,
    /// Depth of each slice of a multislice result, Å (0: the result's own).
    pub slice_thickness_A: f64,
}

/// The accuracy of the result file `result` (written by `Session::save` or `tycho reconstruct`)
/// against the ground truth `truth` (an .npz with `phase` or `phase_total`, `pixel_size_A`,
/// `scan_origin_A`; optionally `phase_slices`, layer phases, `positions_true_A`): the JSON text
/// `tycho evaluate` prints (`pearson`, `rms_rad`, per-depth figures, `positions_rms_A`, ...).
/// Errors name the file, array or option that cannot be used.
pub fn evaluate(result: impl AsRef<Path>, truth: impl AsRef<Path>, options: &EvaluateOptions) -> Result<String> {
    let (result, truth) = (c_path(result.as_ref())?, c_path(truth.as_ref())?);
    let raw = sys::tycho_evaluate_options {
        struct_size: std::mem::size_of::<sys::tycho_evaluate_options>() as u32,
        sigma_A: options.sigma_A,
        fov_fraction: options.fov_fraction,
        slice_thickness_A: options.slice_thickness_A,
    };
    let mut json: *mut c_char = ptr::null_mut();
    // SAFETY: valid NUL-terminated paths, a sized options struct and an out pointer.
    check(unsafe { sys::tycho_evaluate(result.as_ptr(), truth.as_ptr(), &raw, &mut json) })?;
    // SAFETY: on success tycho returns a NUL-terminated string it allocated; freed once, here.
    let text = unsafe { CStr::from_ptr(json) }.to_string_lossy().into_owned();
    unsafe { sys::tycho_free_string(json) };
    Ok(text)
}
