//! The low-level runtime's copies for Python (`gpuport.runtime`): memcpy
//! (direction given or inferred), memset and device synchronisation,
//! taking every pointer argument through the conversions of
//! [`crate::convert::pointer`]. `malloc`/`free` are in [`crate::raw`], with
//! the `DeviceArray` they return; module loads and kernel launches in
//! [`crate::module`], with their argument lists.
//!
//! Each call converts its arguments (pointer-likes into `Ptr`s and their
//! ranges, the stream into a `StreamChoice`, names into the core's
//! `CopyDirection` and `MemoryKind`) and makes one call into
//! `gpuport::dynamic::runtime`, which drops the operands of completed work
//! (with the GIL held, so the Python objects among them are released under
//! it), picks the device and stream, checks, enqueues and waits (without
//! the GIL), and keeps the operands of asynchronous work until the stream
//! passes it.

use gpuport::dynamic::runtime::{self, Blocking, CopyDirection, Enqueued, StreamChoice, Whole};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;

use crate::convert::device::resolve_device;
use crate::convert::error::IntoPyResult;
use crate::convert::pointer::to_range;
use crate::convert::stream::stream_choice;
use gpuport::dynamic::keep;

// ---- pending asynchronous work --------------------------------------------------------

/// Drops the operands of completed asynchronous work (called with the GIL
/// held, so the Python objects among them are released under it).
fn prune() {
    keep::prune();
}

/// Number of asynchronous operations whose operands are still held (for tests).
#[pyfunction]
pub fn _pending_operations() -> usize {
    prune();
    keep::pending()
}

// ---- copies ---------------------------------------------------------------------------

/// `memcpy`'s `kind`: None, a name, or a `hipMemcpyKind` int.
fn direction_of(kind: Option<&Bound<'_, PyAny>>) -> PyResult<CopyDirection> {
    let Some(k) = kind.filter(|k| !k.is_none()) else { return Ok(CopyDirection::Default) };
    let direction = if let Ok(i) = k.extract::<i64>() {
        CopyDirection::from_hip_kind(i)
    } else if let Ok(s) = k.extract::<PyBackedStr>() {
        CopyDirection::from_name(&s)
    } else {
        return Err(PyTypeError::new_err("memcpy kind is None, a string such as \"host_to_device\", or an int 0..=4"));
    };
    direction.py_err(k.py())
}

/// How this binding makes a whole runtime call: the GIL released around
/// the enqueue and the wait.
fn whole<'a, T>(
    py: Python<'a>,
    stream: StreamChoice<'a>,
    wait: bool,
    owners: T,
) -> Whole<'a, T, impl FnOnce(Blocking<'_>) -> gpuport::Result<Enqueued> + 'a> {
    Whole { stream, wait, owners, unlocked: move |op: Blocking<'_>| py.detach(op) }
}

fn memcpy_impl(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    size: usize,
    kind: Option<&Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyAny>>,
    wait: bool,
) -> PyResult<()> {
    let (dst, src) = (to_range(dst, "dst")?, to_range(src, "src")?);
    let (dir, stream) = (direction_of(kind)?, stream_choice(stream)?);
    let (to, from) = (dst.range(), src.range());
    let call = if wait { "memcpy" } else { "memcpy_async" };
    runtime::memcpy_and_keep(&to, &from, size, dir, whole(py, stream.choice, wait, (dst, src, stream.owner)))
        .py_err_in(py, call)
}

/// Copies ``size`` bytes from ``src`` to ``dst`` and waits. Both accept
/// anything ``Pointer`` accepts. ``kind``: None or "default" (inferred
/// from what the pointers are), "host_to_host", "host_to_device",
/// "device_to_host", "device_to_device", or an int 0..=4 in hipMemcpyKind
/// order. ``size`` is checked against the extent of every operand that
/// states one (buffers, DLPack tensors, CUDA Array Interface objects such
/// as torch and CuPy arrays, MemArray, DeviceArray): going past it raises
/// ValueError, as does an operand that is not one contiguous range (a
/// strided view). Raw addresses (ints, ctypes.c_void_p) are unchecked, as
/// in HIP Python: host memory must be an object gpuport holds (a raw host
/// address is refused), and raw device addresses are the caller's
/// responsibility. Copies of 1 MiB
/// or more between pageable host memory (NumPy arrays, buffers) and a GPU
/// are pipelined through pinned staging on several host threads, several
/// times faster than the driver's pageable copy.
///
///     >>> import numpy as np
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(16, device="host")
///     >>> rt.memcpy(a, np.arange(4, dtype=np.uint32), 16)   # host to device
///     >>> out = np.zeros(4, dtype=np.uint32)
///     >>> rt.memcpy(out, a, 16, kind="device_to_host")
///     >>> out
///     array([0, 1, 2, 3], dtype=uint32)
///     >>> rt.memcpy(out, a, 32)                              # past both ends
///     Traceback (most recent call last):
///     gpuport.InvalidArgumentError: invalid argument dst: 32 bytes exceed the 16 bytes of the memory
#[pyfunction]
#[pyo3(signature = (dst, src, size, kind=None, stream=None))]
pub fn memcpy(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    size: usize,
    kind: Option<&Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memcpy_impl(py, dst, src, size, kind, stream, true)
}

/// As ``memcpy``, enqueued on ``stream`` without waiting; the operands are
/// kept alive until the copy has run.
///
///     >>> import gpuport
///     >>> from gpuport import runtime as rt
///     >>> s = gpuport.Stream("host")
///     >>> a = rt.malloc(4, device="host")
///     >>> rt.memcpy_async(a, b"\x01\x02\x03\x04", 4, stream=s)
///     >>> out = bytearray(4)
///     >>> rt.memcpy_async(out, a, 4, stream=s)
///     >>> s.synchronize()
///     >>> bytes(out)
///     b'\x01\x02\x03\x04'
#[pyfunction]
#[pyo3(signature = (dst, src, size, kind=None, stream=None))]
pub fn memcpy_async(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    size: usize,
    kind: Option<&Bound<'_, PyAny>>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memcpy_impl(py, dst, src, size, kind, stream, false)
}

/// `memcpy_peer` and `memcpy_peer_async`; the core picks the stream
/// (`runtime::memcpy_peer`).
#[allow(clippy::too_many_arguments)] // the Python signature, and whether to wait
fn memcpy_peer_impl(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    dst_device: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    src_device: &Bound<'_, PyAny>,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
    wait: bool,
) -> PyResult<()> {
    let (dst, src) = (to_range(dst, "dst")?, to_range(src, "src")?);
    let dst_dev = resolve_device(py, Some(dst_device))?;
    let src_dev = resolve_device(py, Some(src_device))?;
    let stream = stream_choice(stream)?;
    let (to, from) = (dst.range(), src.range());
    let call = if wait { "memcpy_peer" } else { "memcpy_peer_async" };
    let whole = whole(py, stream.choice, wait, (dst, src, stream.owner));
    runtime::memcpy_peer_and_keep((&to, &dst_dev), (&from, &src_dev), size, whole).py_err_in(py, call)
}

/// Copies ``size`` bytes from ``src``, device memory of ``src_device``, to
/// ``dst``, device memory of ``dst_device`` (two devices of one backend, as
/// ``cudaMemcpyPeer``), and waits. The pointers are anything ``Pointer``
/// accepts; the devices anything ``Device`` accepts. It runs on ``stream``,
/// a stream of either device (default: the source device's default
/// stream). It works without peer access (the driver stages the copy
/// through the host) and is faster after ``Device.enable_peer_access``.
/// ``memcpy`` also copies between two devices when both operands say whose
/// memory they are (``malloc`` arrays, DLPack and CUDA Array Interface
/// tensors); this call also takes raw device addresses. Errors
/// (InvalidArgumentError) name what was wrong: devices of two backends, a
/// stream of a third device, memory of another device than the one given,
/// host memory, a size past either operand.
///
///     >>> import gpuport
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(4, device="host"); b = rt.malloc(4, device="host")
///     >>> rt.memset(a, 7, 4)
///     >>> rt.memcpy_peer(b, "host", a, "host", 4)   # on the host backend every peer is host:0
///     >>> out = bytearray(4); rt.memcpy(out, b, 4); bytes(out)
///     b'\x07\x07\x07\x07'
///     >>> rt.memcpy_peer(b, "host", a, "host", 8)             # past both ends
///     Traceback (most recent call last):
///     gpuport.InvalidArgumentError: invalid argument dst: 8 bytes exceed the 4 bytes of the memory
#[pyfunction]
#[pyo3(signature = (dst, dst_device, src, src_device, size, stream=None))]
pub fn memcpy_peer(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    dst_device: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    src_device: &Bound<'_, PyAny>,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memcpy_peer_impl(py, dst, dst_device, src, src_device, size, stream, true)
}

/// As ``memcpy_peer``, enqueued on ``stream`` (a stream of either device;
/// default: the source device's default stream) without waiting; the
/// operands are kept alive until the copy has run.
///
///     >>> import gpuport
///     >>> from gpuport import runtime as rt
///     >>> s = gpuport.Stream("host")
///     >>> a = rt.malloc(4, device="host"); b = rt.malloc(4, device="host")
///     >>> rt.memset_async(a, 3, 4, stream=s)
///     >>> rt.memcpy_peer_async(b, "host", a, "host", 4, stream=s)
///     >>> s.synchronize()
///     >>> out = bytearray(4); rt.memcpy(out, b, 4); bytes(out)
///     b'\x03\x03\x03\x03'
#[pyfunction]
#[pyo3(signature = (dst, dst_device, src, src_device, size, stream=None))]
pub fn memcpy_peer_async(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    dst_device: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    src_device: &Bound<'_, PyAny>,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memcpy_peer_impl(py, dst, dst_device, src, src_device, size, stream, false)
}

fn memset_impl(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    value: u8,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
    wait: bool,
) -> PyResult<()> {
    let dst = to_range(dst, "dst")?;
    let (to, stream) = (dst.range(), stream_choice(stream)?);
    let call = if wait { "memset" } else { "memset_async" };
    runtime::memset_and_keep(&to, value, size, whole(py, stream.choice, wait, (dst, stream.owner))).py_err_in(py, call)
}

/// Sets ``size`` bytes at ``dst`` (anything ``Pointer`` accepts) to ``value``
/// and waits. ``size`` is checked as for ``memcpy`` (raw addresses are
/// unchecked); a ``dst`` that is not one contiguous range raises ValueError.
///
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(8, device="host")
///     >>> rt.memset(a, 0xAB, 4)
///     >>> rt.memset(a[4:], 0x01, 4)          # a view: the last 4 bytes
///     >>> out = bytearray(8); rt.memcpy(out, a, 8); bytes(out)
///     b'\xab\xab\xab\xab\x01\x01\x01\x01'
#[pyfunction]
#[pyo3(signature = (dst, value, size, stream=None))]
pub fn memset(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    value: u8,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memset_impl(py, dst, value, size, stream, true)
}

/// As ``memset``, enqueued on ``stream`` without waiting.
///
///     >>> import gpuport
///     >>> from gpuport import runtime as rt
///     >>> s = gpuport.Stream("host")
///     >>> a = rt.malloc(4, device="host")
///     >>> rt.memset_async(a, 1, 4, stream=s)
///     >>> out = bytearray(4)
///     >>> rt.memcpy_async(out, a, 4, stream=s)
///     >>> s.synchronize()
///     >>> bytes(out)
///     b'\x01\x01\x01\x01'
#[pyfunction]
#[pyo3(signature = (dst, value, size, stream=None))]
pub fn memset_async(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    value: u8,
    size: usize,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    memset_impl(py, dst, value, size, stream, false)
}

// ---- the device ---------------------------------------------------------------------

/// Blocks until the work on every stream of ``device`` is done (as
/// ``hipDeviceSynchronize``: gpuport's streams and other libraries' streams
/// alike), and drops the operands of completed asynchronous work. Refused
/// with ``GraphError`` while a capture runs on the device.
///
///     >>> from gpuport import runtime as rt
///     >>> a = rt.malloc(1024, device="host")
///     >>> rt.memset_async(a, 0, 1024)        # the default stream, no wait
///     >>> rt.device_synchronize("host")
#[pyfunction]
#[pyo3(signature = (device=None))]
pub fn device_synchronize(py: Python<'_>, device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let dev = resolve_device(py, device)?;
    py.detach(|| gpuport::dynamic::runtime::device_synchronize(&dev)).py_err_in(py, "device_synchronize")?;
    prune();
    Ok(())
}
