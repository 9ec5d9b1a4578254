#![doc = include_str!("../../../../docs/embedding/rust.md")]
//!
//! (This page is docs/embedding/rust.md; `cargo test` runs its examples.)

mod error;
mod evaluate;
mod session;
mod tensor;

pub use error::{Error, Result, Status};
pub use evaluate::{evaluate, EvaluateOptions};
pub use session::{Options, Progress, SaveMode, Session};
pub use tensor::{Complex, Complex32, Complex64, DType, Element, Tensor, View};
/// The raw C API (`tycho.h`), for what this crate does not wrap.
pub use tycho_sys as sys;

/// The release of the loaded libtycho, e.g. "0.1.0".
pub fn version() -> String {
    // SAFETY: a static string.
    unsafe { std::ffi::CStr::from_ptr(sys::tycho_version()) }.to_string_lossy().into_owned()
}

/// The ABI (major, minor) of the loaded libtycho.
pub fn abi_version() -> (u32, u32) {
    // SAFETY: no arguments.
    let v = unsafe { sys::tycho_abi_version() };
    (v >> 16, v & 0xffff)
}

/// Releases what tycho started for the process (MPI, when tycho initialised it), after the
/// last session is dropped. Optional (otherwise done at exit); no session may be created after.
pub fn shutdown() {
    // SAFETY: no arguments; documented as callable once the sessions are gone.
    unsafe { sys::tycho_shutdown() }
}
