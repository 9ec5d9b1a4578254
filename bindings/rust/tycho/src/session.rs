//! A reconstruction session: the RAII owner of a `tycho_session*`.
use std::any::Any;
use std::ffi::CString;
use std::ops::ControlFlow;
use std::os::raw::{c_int, c_void};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::ptr::{self, NonNull};

use tycho_sys as sys;

use crate::error::{check, Error, Result, Status};
use crate::tensor::Tensor;

/// What `save` does when the file exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveMode {
    /// Fail with `Status::Io` ("w").
    New,
    /// Replace it, atomically ("o").
    Overwrite,
}

/// Progress after one iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// 1-based, counted over the session's whole life (a second run continues the count).
    pub iteration: i64,
    /// The count `iteration` goes to in this run call, as `tycho_progress.iterations_total`
    /// of tycho.h defines it (the denominator of "iteration 2/3").
    pub iterations_total: i64,
    /// Mean loss per pattern of this iteration.
    pub loss: f64,
    /// Wall time of this iteration, s.
    pub seconds: f64,
}

/// How to create a session beyond its TOML text.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// Where relative input paths of the config resolve from (None: the current folder).
    pub base_dir: Option<&'a Path>,
    /// `"key=value"` overrides applied in order, as `tycho reconstruct --set`.
    pub overrides: &'a [&'a str],
}

/// One reconstruction: configuration, data, engine and its state. Dropping it frees it.
/// `Send` but not `Sync`: libtycho takes no lock, so one thread at a time uses a session.
pub struct Session {
    raw: NonNull<sys::tycho_session>,
}

// SAFETY: a session may move between threads; it is not Sync, so it is never used from two at once.
unsafe impl Send for Session {}

fn c_string(what: &str, text: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::new(Status::InvalidArgument, format!("{what} contains a NUL byte")))
}

pub(crate) fn c_path(path: &Path) -> Result<CString> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            Error::new(Status::InvalidArgument, format!("path {} contains a NUL byte", path.display()))
        })
    }
    #[cfg(not(unix))]
    {
        match path.to_str() {
            Some(s) => c_string("path", s),
            None => Err(Error::new(Status::InvalidArgument, format!("path {} is not UTF-8", path.display()))),
        }
    }
}

/// Refuses a libtycho of another ABI major than tycho-sys declares.
fn check_abi() -> Result<()> {
    // SAFETY: no arguments.
    let loaded = unsafe { sys::tycho_abi_version() };
    if loaded >> 16 != sys::TYCHO_ABI_VERSION_MAJOR {
        return Err(Error::new(
            Status::AbiMismatch,
            format!(
                "libtycho has ABI {}.{}; these bindings were written for {}.{}",
                loaded >> 16,
                loaded & 0xffff,
                sys::TYCHO_ABI_VERSION_MAJOR,
                sys::TYCHO_ABI_VERSION_MINOR
            ),
        ));
    }
    Ok(())
}

struct Callback<'f> {
    on_progress: &'f mut dyn FnMut(&Progress) -> ControlFlow<()>,
    panic: Option<Box<dyn Any + Send>>,
}

unsafe extern "C" fn trampoline(p: *const sys::tycho_progress, user_data: *mut c_void) -> c_int {
    // SAFETY: user_data is the &mut Callback of run_with, alive for the whole run call.
    let callback = &mut *(user_data as *mut Callback);
    let p = &*p;
    let progress = Progress { iteration: p.iteration, iterations_total: p.iterations_total, loss: p.loss, seconds: p.seconds };
    // A panic must not unwind through C: keep it, stop the run, re-raise it after.
    match panic::catch_unwind(AssertUnwindSafe(|| (callback.on_progress)(&progress))) {
        Ok(ControlFlow::Continue(())) => 0,
        Ok(ControlFlow::Break(())) => 1,
        Err(payload) => {
            callback.panic = Some(payload);
            1
        }
    }
}

impl Session {
    /// Parses and validates `toml_text` (the keys of a config file), loads the plugins, reads
    /// the data and prepares the engine. Relative input paths resolve from `base_dir`.
    pub fn new(toml_text: &str, base_dir: Option<&Path>) -> Result<Session> {
        Session::with_options(toml_text, &Options { base_dir, overrides: &[] })
    }

    /// As `new`, with `--set`-style overrides.
    pub fn with_options(toml_text: &str, options: &Options<'_>) -> Result<Session> {
        check_abi()?;
        let text = c_string("the config text", toml_text)?;
        let base_dir = options.base_dir.map(c_path).transpose()?;
        let overrides =
            options.overrides.iter().map(|o| c_string("an override", o)).collect::<Result<Vec<_>>>()?;
        let override_ptrs: Vec<_> = overrides.iter().map(|o| o.as_ptr()).collect();
        let raw_options = sys::tycho_session_options {
            struct_size: std::mem::size_of::<sys::tycho_session_options>() as u32,
            base_dir: base_dir.as_ref().map_or(ptr::null(), |b| b.as_ptr()),
            overrides: if override_ptrs.is_empty() { ptr::null() } else { override_ptrs.as_ptr() },
            n_overrides: override_ptrs.len() as i64,
            communicator: ptr::null_mut(),
        };
        let mut raw = ptr::null_mut();
        // SAFETY: every pointer is valid for the call; `raw` receives the session or NULL.
        check(unsafe { sys::tycho_session_create_ex(text.as_ptr(), &raw_options, &mut raw) })?;
        NonNull::new(raw)
            .map(|raw| Session { raw })
            .ok_or_else(|| Error::new(Status::Internal, "tycho_session_create_ex returned TYCHO_OK and no session"))
    }

    /// Reads a config file; its relative input paths resolve from the file's folder, as with
    /// `tycho reconstruct FILE`. `overrides` as `--set`.
    pub fn from_file(path: impl AsRef<Path>, overrides: &[&str]) -> Result<Session> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::new(Status::Io, format!("cannot read the config {}: {e}", path.display())))?;
        let base_dir = path.parent().filter(|p| !p.as_os_str().is_empty());
        Session::with_options(&text, &Options { base_dir, overrides })
    }

    /// Runs `iterations` more iterations (0: the configured `[reconstruct] iterations`).
    pub fn run(&mut self, iterations: i64) -> Result<()> {
        // SAFETY: a live session; no callback.
        check(unsafe { sys::tycho_session_run(self.raw.as_ptr(), iterations, None, ptr::null_mut()) })
    }

    /// As `run`, calling `on_progress` after each iteration. Returning `ControlFlow::Break(())`
    /// stops the run: it then returns an error of `Status::Cancelled` and keeps everything
    /// computed so far. A panic in the closure stops the run and is re-raised here.
    pub fn run_with<F>(&mut self, iterations: i64, mut on_progress: F) -> Result<()>
    where
        F: FnMut(&Progress) -> ControlFlow<()>,
    {
        let mut callback = Callback { on_progress: &mut on_progress, panic: None };
        // SAFETY: `callback` outlives the call; the trampoline is the only user of the pointer.
        let status = unsafe {
            sys::tycho_session_run(
                self.raw.as_ptr(),
                iterations,
                Some(trampoline),
                &mut callback as *mut Callback as *mut c_void,
            )
        };
        if let Some(payload) = callback.panic.take() {
            panic::resume_unwind(payload);
        }
        check(status)
    }

    /// A copy of a result array: "object" (slices, H, W) complex64 (complex128 with
    /// `precision = "float64"`), "probe" (modes, N0, N1) in the object's dtype, "positions_px"
    /// (P, 2) f64 object pixels, "positions_A" (P, 2) f64 Å, "loss_history" (iterations,) f64.
    /// Another name: `Status::NotFound`.
    pub fn get(&self, name: &str) -> Result<Tensor<'_>> {
        let c_name = c_string("the array name", name)?;
        let mut raw = ptr::null_mut();
        // SAFETY: a live session, used from this thread only (not Sync).
        check(unsafe { sys::tycho_session_get(self.raw.as_ptr(), c_name.as_ptr(), &mut raw) })?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::new(Status::Internal, format!("tycho_session_get('{name}') returned no tensor")))?;
        // SAFETY: the caller owns the returned tensor.
        Ok(unsafe { Tensor::from_raw(raw, name) })
    }

    /// Saves the result (arrays and manifest, docs/file-format.md) atomically. `path` is
    /// relative to the current folder; its folder must exist.
    pub fn save(&self, path: impl AsRef<Path>, mode: SaveMode) -> Result<()> {
        let c_path = c_path(path.as_ref())?;
        let mode = match mode {
            SaveMode::New => sys::TYCHO_SAVE_NEW,
            SaveMode::Overwrite => sys::TYCHO_SAVE_OVERWRITE,
        };
        // SAFETY: a live session and a valid path.
        check(unsafe { sys::tycho_session_save(self.raw.as_ptr(), c_path.as_ptr(), mode) })
    }

    /// This session's rank in [0, world size) (0 without a launcher).
    pub fn rank(&self) -> i32 {
        // SAFETY: a live session.
        unsafe { sys::tycho_session_rank(self.raw.as_ptr()) }
    }

    /// The number of ranks (1 without a launcher).
    pub fn world_size(&self) -> i32 {
        // SAFETY: a live session.
        unsafe { sys::tycho_session_world_size(self.raw.as_ptr()) }
    }

    /// Returns when every rank's session has called it.
    pub fn barrier(&mut self) -> Result<()> {
        // SAFETY: a live session.
        check(unsafe { sys::tycho_session_barrier(self.raw.as_ptr()) })
    }

    /// The raw handle, for calls of tycho-sys (still owned by `self`).
    pub fn as_raw(&self) -> *mut sys::tycho_session {
        self.raw.as_ptr()
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Session({:p}, rank {} of {})", self.raw, self.rank(), self.world_size())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: we own the session; destroyed once.
        unsafe { sys::tycho_session_destroy(self.raw.as_ptr()) }
    }
}
