//! Zero-copy access to buffers passed from Python (Arrow buffers, numpy arrays), and arrays out.

use std::ffi::{c_int, CStr};
use std::sync::{Arc, Mutex};

use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::ConfigError;

/// The buffer's memory as a slice.
///
/// SAFETY of the returned borrow: the `PyBuffer` holds a reference to the exporting object for as
/// long as it lives, so the memory stays allocated; callers pass immutable Arrow buffers or numpy
/// arrays that no other thread writes during the call.
pub(crate) fn view<'a, T: Element>(b: &'a PyBuffer<T>, what: &str) -> PyResult<&'a [T]> {
    let ptr = b
        .as_slice_ptr()
        .ok_or_else(|| ConfigError::new_err(format!("{what}: expected a C-contiguous buffer")))?;
    // SAFETY: see above; the pointer is valid and aligned for `item_count` elements of `T`.
    Ok(unsafe { ptr.as_ref() })
}

/// A slice of plain integers as Python bytes (read back with `numpy.frombuffer`).
pub(crate) fn to_bytes<'py, T: Copy>(py: Python<'py>, v: &[T]) -> Bound<'py, PyBytes> {
    // SAFETY: T is a plain integer type (u32/u64/i64) without padding; any byte pattern is valid.
    let bytes = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) };
    PyBytes::new(py, bytes)
}

/// Arrays that leave Rust without a copy: owned memory exported through the buffer protocol
/// (`numpy.frombuffer`, `torch.from_numpy`, `pyarrow.py_buffer` wrap it in place).
pub(crate) enum Data {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

/// An owned, writable 1-D array of integers exported through the buffer protocol. A buffer made
/// from a [`Pool`] goes back to it when Python releases it (the loader reuses batch memory that is
/// already mapped and warm in cache instead of faulting in and zeroing fresh pages every batch).
#[pyclass(module = "llmpipe._core")]
pub struct IdBuffer {
    data: Data,
    pool: Option<Arc<Pool>>,
}

impl Drop for IdBuffer {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.put(std::mem::replace(&mut self.data, Data::U8(Vec::new())));
        }
    }
}

/// Released buffers kept for reuse (at most `cap`).
pub(crate) struct Pool {
    free: Mutex<Vec<Data>>,
    cap: usize,
}

impl Pool {
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self { free: Mutex::new(Vec::new()), cap })
    }

    fn put(&self, data: Data) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < self.cap {
            free.push(data);
        }
    }

    /// A vector of `len` elements: a released one when there is one of that type and length (its
    /// old contents are still there: callers overwrite every element), else a new zeroed one.
    pub(crate) fn take<T: Pooled>(&self, len: usize) -> Vec<T> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = free.iter().position(|d| T::matches(d, len)) {
            if let Some(v) = T::unwrap(free.swap_remove(at)) {
                return v;
            }
        }
        drop(free);
        vec![T::default(); len]
    }

    pub(crate) fn buffer<T: Pooled>(self: &Arc<Self>, v: Vec<T>) -> IdBuffer {
        IdBuffer { data: T::wrap(v), pool: Some(self.clone()) }
    }
}

/// Element types a [`Pool`] hands out.
pub(crate) trait Pooled: Copy + Default {
    fn wrap(v: Vec<Self>) -> Data;
    fn unwrap(d: Data) -> Option<Vec<Self>>;
    fn matches(d: &Data, len: usize) -> bool;
}

macro_rules! pooled {
    ($t:ty, $variant:ident) => {
        impl Pooled for $t {
            fn wrap(v: Vec<Self>) -> Data {
                Data::$variant(v)
            }
            fn unwrap(d: Data) -> Option<Vec<Self>> {
                match d {
                    Data::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn matches(d: &Data, len: usize) -> bool {
                matches!(d, Data::$variant(v) if v.len() == len)
            }
        }
    };
}
pooled!(i32, I32);
pooled!(i64, I64);

impl IdBuffer {
    fn raw(&self) -> (*const u8, usize, usize, &'static CStr) {
        match &self.data {
            Data::U8(v) => (v.as_ptr(), v.len(), 1, c"B"),
            Data::U16(v) => (v.as_ptr().cast(), v.len(), 2, c"H"),
            Data::U32(v) => (v.as_ptr().cast(), v.len(), 4, c"I"),
            Data::I32(v) => (v.as_ptr().cast(), v.len(), 4, c"i"),
            Data::I64(v) => (v.as_ptr().cast(), v.len(), 8, c"q"),
        }
    }
}

#[pymethods]
impl IdBuffer {
    /// numpy's name for the element type.
    #[getter]
    fn dtype(&self) -> &'static str {
        match self.data {
            Data::U8(_) => "uint8",
            Data::U16(_) => "uint16",
            Data::U32(_) => "uint32",
            Data::I32(_) => "int32",
            Data::I64(_) => "int64",
        }
    }

    fn __len__(&self) -> usize {
        self.raw().1
    }

    /// # Safety
    /// Called by CPython with a valid `view`; the exported memory lives as long as `self`, which the
    /// view keeps alive through `view.obj`. The Vec is never resized after construction.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("View is null"));
        }
        let (ptr, len, itemsize, format) = slf.borrow().raw();
        // SAFETY: `view` is non-null and owned by the caller for the duration of the export.
        unsafe {
            (*view).buf = ptr as *mut std::ffi::c_void;
            (*view).len = (len * itemsize) as isize;
            (*view).readonly = 0;
            (*view).itemsize = itemsize as isize;
            (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
                format.as_ptr() as *mut _
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                // one dimension of `len` items; the shape lives in a Box kept in `internal`
                let shape = Box::into_raw(Box::new(len as isize));
                (*view).internal = shape.cast();
                shape
            } else {
                (*view).internal = std::ptr::null_mut();
                std::ptr::null_mut()
            };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                &mut (*view).itemsize
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).obj = slf.into_any().into_ptr();
        }
        Ok(())
    }

    /// # Safety
    /// Called by CPython with a view filled by `__getbuffer__`.
    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: `internal` is null or the Box made in `__getbuffer__`.
        unsafe {
            let shape = (*view).internal.cast::<isize>();
            if !shape.is_null() {
                drop(Box::from_raw(shape));
                (*view).internal = std::ptr::null_mut();
            }
        }
    }
}

pub(crate) fn buffer(data: Data) -> IdBuffer {
    IdBuffer { data, pool: None }
}
