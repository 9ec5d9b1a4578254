//! Result arrays: an owned DLPack tensor from `tycho_session_get`, read in place as a slice or
//! an n-dimensional view (no copy on the Rust side).
use std::marker::PhantomData;
use std::ops::Index;
use std::ptr::NonNull;

use tycho_sys as sys;

use crate::error::{Error, Result, Status};
use crate::session::Session;

/// A complex number laid out as C's `float complex` / numpy's complex64 (`Complex<f32>`) or
/// complex128 (`Complex<f64>`): real part first.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Complex<T> {
    pub re: T,
    pub im: T,
}

/// numpy's complex64: two f32.
pub type Complex32 = Complex<f32>;
/// numpy's complex128: two f64.
pub type Complex64 = Complex<f64>;

/// The element type of a tensor (DLPack's code, bits and lanes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    /// numpy complex64 (`Complex32`).
    Complex64,
    /// numpy complex128 (`Complex64`).
    Complex128,
    Float32,
    Float64,
    UInt8,
    Other { code: u8, bits: u8, lanes: u16 },
}

impl DType {
    fn from_dl(t: sys::DLDataType) -> DType {
        match (t.code, t.bits, t.lanes) {
            (sys::kDLComplex, 64, 1) => DType::Complex64,
            (sys::kDLComplex, 128, 1) => DType::Complex128,
            (sys::kDLFloat, 32, 1) => DType::Float32,
            (sys::kDLFloat, 64, 1) => DType::Float64,
            (sys::kDLUInt, 8, 1) => DType::UInt8,
            (code, bits, lanes) => DType::Other { code, bits, lanes },
        }
    }
}

/// A Rust type a tensor's elements can be read as.
pub trait Element: Copy + sealed::Sealed {
    const DTYPE: DType;
}
mod sealed {
    pub trait Sealed {}
}
macro_rules! element {
    ($t:ty, $d:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
        }
    };
}
element!(Complex32, DType::Complex64);
element!(Complex64, DType::Complex128);
element!(f32, DType::Float32);
element!(f64, DType::Float64);
element!(u8, DType::UInt8);

/// One result array, owned (a copy made by libtycho, freed by Drop through the tensor's
/// deleter). It borrows the session it came from: while it lives, the session cannot run or be
/// dropped, which keeps the same code correct should `get` one day hand out the session's own
/// memory instead of a copy.
pub struct Tensor<'s> {
    raw: NonNull<sys::DLManagedTensor>,
    name: String,
    _session: PhantomData<&'s Session>,
}

impl<'s> Tensor<'s> {
    /// SAFETY: `raw` is a valid DLManagedTensor whose ownership passes to the Tensor.
    pub(crate) unsafe fn from_raw(raw: NonNull<sys::DLManagedTensor>, name: &str) -> Tensor<'s> {
        Tensor { raw, name: name.to_string(), _session: PhantomData }
    }

    fn dl(&self) -> &sys::DLTensor {
        // SAFETY: valid until Drop.
        unsafe { &self.raw.as_ref().dl_tensor }
    }

    /// The name it was fetched by, e.g. "object".
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn dtype(&self) -> DType {
        DType::from_dl(self.dl().dtype)
    }

    /// The dimensions, outermost first (row-major, as numpy shows them): "object" is
    /// (slices, H, W).
    pub fn shape(&self) -> Vec<usize> {
        let t = self.dl();
        (0..t.ndim as usize)
            // SAFETY: shape holds ndim entries.
            .map(|i| unsafe { *t.shape.add(i) } as usize)
            .collect()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.shape().iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The raw DLPack tensor, e.g. to hand to another DLPack consumer (still owned by `self`).
    pub fn as_dlpack(&self) -> *const sys::DLManagedTensor {
        self.raw.as_ptr()
    }

    /// The elements in row-major (C) order, read in place. Fails with `Status::BadData` if `T`
    /// is not the tensor's dtype or the tensor is not compact host memory.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        let t = self.dl();
        if self.dtype() != T::DTYPE {
            return Err(Error::new(
                Status::BadData,
                format!("tensor '{}' is {:?}, not {:?}", self.name, self.dtype(), T::DTYPE),
            ));
        }
        if t.device.device_type != sys::kDLCPU {
            return Err(Error::new(
                Status::Unsupported,
                format!("tensor '{}' is not in host memory (DLPack device {})", self.name, t.device.device_type),
            ));
        }
        let shape = self.shape();
        if !t.strides.is_null() {
            let mut expected = 1i64;
            for i in (0..shape.len()).rev() {
                // SAFETY: strides holds ndim entries when not NULL.
                let stride = unsafe { *t.strides.add(i) };
                if shape[i] > 1 && stride != expected {
                    return Err(Error::new(
                        Status::Unsupported,
                        format!("tensor '{}' is not compact row-major (strides)", self.name),
                    ));
                }
                expected *= shape[i] as i64;
            }
        }
        let len: usize = shape.iter().product();
        if len == 0 {
            return Ok(&[]);
        }
        // SAFETY: DLPack promises `len` elements of this dtype at data + byte_offset, alive
        // until the deleter runs (Drop), which `&self` prevents.
        let data = unsafe { (t.data as *const u8).add(t.byte_offset as usize) } as *const T;
        if (data as usize) % std::mem::align_of::<T>() != 0 {
            return Err(Error::new(Status::BadData, format!("tensor '{}' is misaligned", self.name)));
        }
        Ok(unsafe { std::slice::from_raw_parts(data, len) })
    }

    /// An n-dimensional view: `view[[0, i, j]]` is element (0, i, j) of a (slices, H, W) object.
    pub fn view<T: Element>(&self) -> Result<View<'_, T>> {
        let data = self.as_slice::<T>()?;
        let shape = self.shape();
        let mut strides = vec![1usize; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1];
        }
        Ok(View { data, shape, strides })
    }
}

impl Drop for Tensor<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the tensor; its deleter frees it once.
        unsafe {
            if let Some(deleter) = self.raw.as_ref().deleter {
                deleter(self.raw.as_ptr());
            }
        }
    }
}

impl std::fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, {:?}, shape {:?})", self.name, self.dtype(), self.shape())
    }
}

/// A borrowed row-major n-dimensional array.
#[derive(Debug, Clone)]
pub struct View<'t, T> {
    data: &'t [T],
    shape: Vec<usize>,
    strides: Vec<usize>,
}

impl<'t, T> View<'t, T> {
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The elements in row-major order.
    pub fn as_slice(&self) -> &'t [T] {
        self.data
    }

    /// The element at `index` (one entry per dimension), None when out of bounds.
    pub fn get(&self, index: &[usize]) -> Option<&'t T> {
        if index.len() != self.shape.len() || index.iter().zip(&self.shape).any(|(i, n)| i >= n) {
            return None;
        }
        let at: usize = index.iter().zip(&self.strides).map(|(i, s)| i * s).sum();
        self.data.get(at)
    }
}

impl<T, const N: usize> Index<[usize; N]> for View<'_, T> {
    type Output = T;
    fn index(&self, index: [usize; N]) -> &T {
        self.get(&index)
            .unwrap_or_else(|| panic!("index {:?} out of bounds for shape {:?}", index, self.shape))
    }
}
