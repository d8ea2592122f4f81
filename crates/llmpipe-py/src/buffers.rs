//! Zero-copy access to buffers passed from Python (Arrow buffers, numpy arrays) and bytes out.

use pyo3::buffer::{Element, PyBuffer};
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
