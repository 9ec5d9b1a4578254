//! Raw declarations of tycho's embedding API, `abi/tycho/tycho.h` (ABI 1.5, the embedding API
//! unchanged since 1.3), and of the DLPack 0.6 structs it returns (`<dlpack/dlpack.h>`, Debian's
//! libdlpack-dev, `DLPACK_VERSION` 60).
//!
//! Written by hand and checked mechanically: `tests/header.rs` parses `tycho.h` and compares
//! every function's name, argument count and argument types with the `extern "C"` block below,
//! and compiles a C program that prints the sizes, field offsets and enum values of the
//! headers, compared with these declarations. Use the safe `tycho` crate unless you need the
//! raw calls. Contracts (shapes, dtypes, ownership, thread-safety): docs/embedding.md.
#![allow(non_camel_case_types, non_upper_case_globals)]

use std::os::raw::{c_char, c_int, c_void};

// ---- tycho_version.h

pub const TYCHO_ABI_VERSION_MAJOR: u32 = 1;
pub const TYCHO_ABI_VERSION_MINOR: u32 = 5;
/// `(major << 16) | minor`, as `tycho_abi_version()` returns it.
pub const TYCHO_ABI_VERSION: u32 = (TYCHO_ABI_VERSION_MAJOR << 16) | TYCHO_ABI_VERSION_MINOR;
pub const TYCHO_VERSION_STRING: &str = "0.1.0";

// ---- tycho_status.h (a C enum: an int; kept as an integer so an unknown value is no UB)

pub type tycho_status = c_int;
pub const TYCHO_OK: tycho_status = 0;
pub const TYCHO_ERR_INVALID_ARGUMENT: tycho_status = 1;
pub const TYCHO_ERR_NOT_FOUND: tycho_status = 2;
pub const TYCHO_ERR_IO: tycho_status = 3;
pub const TYCHO_ERR_BAD_DATA: tycho_status = 4;
pub const TYCHO_ERR_ABI_MISMATCH: tycho_status = 5;
pub const TYCHO_ERR_OUT_OF_MEMORY: tycho_status = 6;
pub const TYCHO_ERR_UNSUPPORTED: tycho_status = 7;
pub const TYCHO_ERR_CANCELLED: tycho_status = 8;
pub const TYCHO_ERR_INTERNAL: tycho_status = 9;

// ---- tycho_components.h: the one type of it the embedding API uses

pub type tycho_save_mode = c_int;
/// Fail with TYCHO_ERR_IO if the file exists ("w").
pub const TYCHO_SAVE_NEW: tycho_save_mode = 0;
/// Replace it ("o").
pub const TYCHO_SAVE_OVERWRITE: tycho_save_mode = 1;

// ---- tycho.h

/// Opaque session handle.
#[repr(C)]
pub struct tycho_session {
    _private: [u8; 0],
}

/// Progress after each iteration (see tycho.h).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tycho_progress {
    pub struct_size: u32,
    /// 1-based, counted over the session's whole life.
    pub iteration: i64,
    /// Of this run call.
    pub iterations_total: i64,
    /// Mean loss per pattern of this iteration.
    pub loss: f64,
    /// Wall time of this iteration, s.
    pub seconds: f64,
}

/// Return 0 to go on, non-zero to stop (the run returns TYCHO_ERR_CANCELLED).
pub type tycho_progress_fn =
    Option<unsafe extern "C" fn(progress: *const tycho_progress, user_data: *mut c_void) -> c_int>;

/// Options of `tycho_session_create_ex`. Zero-initialise, set `struct_size`; append-only.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tycho_session_options {
    pub struct_size: u32,
    pub base_dir: *const c_char,
    pub overrides: *const *const c_char,
    pub n_overrides: i64,
    pub communicator: *mut c_void,
}

/// Options of `tycho_evaluate`. Zero-initialise, set `struct_size`; a field left 0 takes its
/// default (σ 2 Å, the inner 0.8 of the field of view, the result's own slice thickness).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_snake_case)]
pub struct tycho_evaluate_options {
    pub struct_size: u32,
    pub sigma_A: f64,
    pub fov_fraction: f64,
    pub slice_thickness_A: f64,
}

extern "C" {
    pub fn tycho_abi_version() -> u32;
    pub fn tycho_version() -> *const c_char;
    pub fn tycho_status_string(status: tycho_status) -> *const c_char;
    pub fn tycho_last_error() -> *const c_char;
    pub fn tycho_session_create(
        toml_text: *const c_char,
        base_dir: *const c_char,
        out: *mut *mut tycho_session,
    ) -> tycho_status;
    pub fn tycho_session_run(
        session: *mut tycho_session,
        iterations: i64,
        progress: tycho_progress_fn,
        user_data: *mut c_void,
    ) -> tycho_status;
    pub fn tycho_session_get(
        session: *mut tycho_session,
        name: *const c_char,
        out: *mut *mut DLManagedTensor,
    ) -> tycho_status;
    pub fn tycho_session_save(
        session: *mut tycho_session,
        path: *const c_char,
        mode: tycho_save_mode,
    ) -> tycho_status;
    pub fn tycho_session_destroy(session: *mut tycho_session);
    pub fn tycho_session_create_ex(
        toml_text: *const c_char,
        options: *const tycho_session_options,
        out: *mut *mut tycho_session,
    ) -> tycho_status;
    pub fn tycho_session_rank(session: *const tycho_session) -> i32;
    pub fn tycho_session_world_size(session: *const tycho_session) -> i32;
    pub fn tycho_session_barrier(session: *mut tycho_session) -> tycho_status;
    pub fn tycho_shutdown();
    pub fn tycho_evaluate(
        result_path: *const c_char,
        truth_path: *const c_char,
        options: *const tycho_evaluate_options,
        json: *mut *mut c_char,
    ) -> tycho_status;
    pub fn tycho_free_string(text: *mut c_char);
}

// ---- dlpack/dlpack.h, version 0.6 (DLPACK_VERSION 60)

pub const DLPACK_VERSION: u32 = 60;

pub type DLDeviceType = c_int;
pub const kDLCPU: DLDeviceType = 1;
pub const kDLCUDA: DLDeviceType = 2;
pub const kDLCUDAHost: DLDeviceType = 3;
pub const kDLOpenCL: DLDeviceType = 4;
pub const kDLVulkan: DLDeviceType = 7;
pub const kDLMetal: DLDeviceType = 8;
pub const kDLVPI: DLDeviceType = 9;
pub const kDLROCM: DLDeviceType = 10;
pub const kDLROCMHost: DLDeviceType = 11;
pub const kDLExtDev: DLDeviceType = 12;
pub const kDLCUDAManaged: DLDeviceType = 13;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: DLDeviceType,
    pub device_id: c_int,
}

/// `DLDataTypeCode`: the values of `DLDataType::code`.
pub type DLDataTypeCode = u8;
pub const kDLInt: DLDataTypeCode = 0;
pub const kDLUInt: DLDataTypeCode = 1;
pub const kDLFloat: DLDataTypeCode = 2;
pub const kDLOpaqueHandle: DLDataTypeCode = 3;
pub const kDLBfloat: DLDataTypeCode = 4;
pub const kDLComplex: DLDataTypeCode = 5;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: c_int,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    /// NULL: compact, row-major (C order).
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(self_: *mut DLManagedTensor)>,
}
