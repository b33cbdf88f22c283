//! The buffer protocol (not in the limited API before Python 3.11), for the
//! pointer adapters: a contiguous buffer held until drop, and what a
//! non-contiguous one looks like (for the error that refuses it).

use std::ffi::{c_char, c_int, c_void};

use gpuport::error::python;
use pyo3::ffi;
use pyo3::prelude::*;

/// `Py_buffer`, whose layout is unchanged since Python 3.3.
#[repr(C)]
struct RawBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

impl RawBuffer {
    fn empty() -> Box<RawBuffer> {
        Box::new(RawBuffer::zeroed())
    }

    fn zeroed() -> RawBuffer {
        RawBuffer {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        }
    }
}

extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut RawBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
    fn PyObject_CheckBuffer(obj: *mut ffi::PyObject) -> c_int;
}

const PYBUF_WRITABLE: c_int = 0x0001;
const PYBUF_ND: c_int = 0x0008;
const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;
const PYBUF_ANY_CONTIGUOUS: c_int = 0x0080 | PYBUF_STRIDES;

/// A buffer export, kept until drop (then released, under the GIL).
pub struct BufferExport {
    view: Box<RawBuffer>,
}

// SAFETY: the view is only touched in `acquire` and in `Drop`, both with the
// GIL held; the address it exposes is plain data.
unsafe impl Send for BufferExport {}
// SAFETY: as above; shared references never touch the view.
unsafe impl Sync for BufferExport {}

/// What `BufferExport::acquire` found.
pub enum Acquired {
    /// `obj` exports no buffer.
    NoBuffer,
    /// A contiguous buffer, kept until drop.
    Contiguous(BufferExport),
    /// A buffer that is not contiguous: its shape and strides in words, and
    /// the error the contiguous request raised.
    NotContiguous(String, PyErr),
}

impl BufferExport {
    /// Acquires a contiguous (C or Fortran order) buffer of `obj`, writable
    /// if it can be.
    pub fn acquire(obj: &Bound<'_, PyAny>) -> PyResult<Acquired> {
        let py = obj.py();
        // SAFETY: `obj` is a live object and we hold the GIL.
        if unsafe { PyObject_CheckBuffer(obj.as_ptr()) } == 0 {
            return Ok(Acquired::NoBuffer);
        }
        let mut view = RawBuffer::empty();
        for flags in [PYBUF_ANY_CONTIGUOUS | PYBUF_WRITABLE, PYBUF_ANY_CONTIGUOUS] {
            // SAFETY: `view` is a writable `Py_buffer`; on success it must be
            // released once, which `Drop` does.
            if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } == 0 {
                return Ok(Acquired::Contiguous(BufferExport { view }));
            }
            let err = PyErr::fetch(py);
            if flags & PYBUF_WRITABLE == 0 {
                return match strided_layout(obj) {
                    Some(desc) => Ok(Acquired::NotContiguous(desc, err)),
                    None => Err(err),
                };
            }
        }
        unreachable!("the loop returns on its last pass")
    }

    pub fn addr(&self) -> u64 {
        self.view.buf as usize as u64
    }
    pub fn byte_len(&self) -> usize {
        self.view.len.max(0) as usize
    }
    pub fn writable(&self) -> bool {
        self.view.readonly == 0
    }
}

/// The bytes of a ctypes value: inline up to 16 (every ctypes scalar), so a
/// by-value kernel argument costs no heap allocation.
pub type ValueBytes = smallvec::SmallVec<[u8; 16]>;

/// A copy of the bytes of `obj`'s contiguous buffer export (a ctypes value:
/// what `bytes(obj)` gives), or `None` when it exports no contiguous
/// buffer. The export is released before returning; no Python code runs
/// but the exporter's own buffer slots.
pub fn copy_bytes(obj: &Bound<'_, PyAny>) -> Option<ValueBytes> {
    let mut view = RawBuffer::zeroed();
    // SAFETY: `obj` is a live object and we hold the GIL (its `Bound`);
    // `view` is a writable `Py_buffer`, released below on success.
    if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut view, PYBUF_ANY_CONTIGUOUS) } != 0 {
        drop(PyErr::fetch(obj.py()));
        return None;
    }
    let len = view.len.max(0) as usize;
    let bytes = if len == 0 || view.buf.is_null() {
        ValueBytes::new()
    } else {
        // SAFETY: a successful contiguous request exposes `len` readable
        // bytes at `buf` until the release below.
        ValueBytes::from_slice(unsafe { std::slice::from_raw_parts(view.buf as *const u8, len) })
    };
    // SAFETY: filled by the successful call above; released once, with the GIL.
    unsafe { PyBuffer_Release(&mut view) };
    Some(bytes)
}

/// `"shape (4, 2), strides (16, 4) bytes"` when `obj` exports a strided
/// buffer (so a contiguous request failed for want of contiguity).
fn strided_layout(obj: &Bound<'_, PyAny>) -> Option<String> {
    let mut view = RawBuffer::empty();
    // SAFETY: as in `acquire`; released below on success.
    if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *view, PYBUF_STRIDES) } != 0 {
        drop(PyErr::fetch(obj.py()));
        return None;
    }
    let n = view.ndim.max(0) as usize;
    let read = |p: *mut isize| -> Vec<i64> {
        if p.is_null() {
            return Vec::new();
        }
        // SAFETY: a strided buffer request fills `shape` and `strides` with `ndim` entries.
        unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|&x| x as i64).collect()
    };
    let desc =
        format!("shape {}, strides {} bytes", python::tuple(&read(view.shape)), python::tuple(&read(view.strides)));
    // SAFETY: filled by the successful call above; released once.
    unsafe { PyBuffer_Release(&mut *view) };
    Some(desc)
}

impl Drop for BufferExport {
    fn drop(&mut self) {
        Python::attach(|_| {
            // SAFETY: the view was filled by a successful `PyObject_GetBuffer`
            // and is released exactly once, with the GIL held.
            unsafe { PyBuffer_Release(&mut *self.view) }
        });
    }
}
