//! tycho's status codes and the error every fallible call returns.
use std::ffi::CStr;
use std::fmt;

use tycho_sys as sys;

/// A status of the C API other than `TYCHO_OK` (tycho_status.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// A bad parameter or config value.
    InvalidArgument,
    /// A file, dataset, key or component that does not exist.
    NotFound,
    /// Reading or writing a file failed.
    Io,
    /// Input that exists but has the wrong shape, type or values.
    BadData,
    /// A plugin or library built for an incompatible ABI version.
    AbiMismatch,
    OutOfMemory,
    /// A valid request this build or component cannot do.
    Unsupported,
    /// The progress closure asked to stop.
    Cancelled,
    /// A bug: please report it.
    Internal,
    /// A status this crate does not know (a newer libtycho).
    Other(i32),
}

impl Status {
    pub(crate) fn from_raw(status: sys::tycho_status) -> Status {
        match status {
            sys::TYCHO_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::TYCHO_ERR_NOT_FOUND => Status::NotFound,
            sys::TYCHO_ERR_IO => Status::Io,
            sys::TYCHO_ERR_BAD_DATA => Status::BadData,
            sys::TYCHO_ERR_ABI_MISMATCH => Status::AbiMismatch,
            sys::TYCHO_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::TYCHO_ERR_UNSUPPORTED => Status::Unsupported,
            sys::TYCHO_ERR_CANCELLED => Status::Cancelled,
            sys::TYCHO_ERR_INTERNAL => Status::Internal,
            other => Status::Other(other),
        }
    }

    /// The C value, e.g. 2 for `NotFound`.
    pub fn raw(self) -> i32 {
        match self {
            Status::InvalidArgument => sys::TYCHO_ERR_INVALID_ARGUMENT,
            Status::NotFound => sys::TYCHO_ERR_NOT_FOUND,
            Status::Io => sys::TYCHO_ERR_IO,
            Status::BadData => sys::TYCHO_ERR_BAD_DATA,
            Status::AbiMismatch => sys::TYCHO_ERR_ABI_MISMATCH,
            Status::OutOfMemory => sys::TYCHO_ERR_OUT_OF_MEMORY,
            Status::Unsupported => sys::TYCHO_ERR_UNSUPPORTED,
            Status::Cancelled => sys::TYCHO_ERR_CANCELLED,
            Status::Internal => sys::TYCHO_ERR_INTERNAL,
            Status::Other(raw) => raw,
        }
    }

    /// The library's constant name, e.g. `"TYCHO_ERR_NOT_FOUND"`.
    pub fn name(self) -> String {
        // SAFETY: tycho_status_string returns a static string for any value.
        unsafe { CStr::from_ptr(sys::tycho_status_string(self.raw())) }.to_string_lossy().into_owned()
    }
}

/// A failed call: the status and tycho's message (which names the file, key or array at fault).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// The status with this thread's last error message; call right after the failing C call.
    pub(crate) fn last(status: sys::tycho_status) -> Error {
        // SAFETY: tycho_last_error returns a valid string until the next tycho call on this thread.
        let message = unsafe { CStr::from_ptr(sys::tycho_last_error()) }.to_string_lossy().into_owned();
        Error { status: Status::from_raw(status), message }
    }

    pub fn status(&self) -> Status {
        self.status
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.name(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// `Ok(())` for TYCHO_OK, otherwise the status with the thread's last error.
pub(crate) fn check(status: sys::tycho_status) -> Result<()> {
    if status == sys::TYCHO_OK {
        Ok(())
    } else {
        Err(Error::last(status))
    }
}
