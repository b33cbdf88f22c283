//! The Python `MemArray`: a run-time dtype, rank and device over the Rust
//! `MemArray<T, N, D>`, or a zero-copy import of another library's array.
//!
//! Dispatch: [`with_device!`] over the compiled-in backends, [`with_dtype!`]
//! over every scalar `Element` type and [`with_rank!`] over ranks 0..=8 (the
//! kernels' `MAX_RANK`) pick one `Typed<T, N, D>`, used through the
//! object-safe [`ArrayOps`] trait; nothing else is a table of instantiations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use gpuport::array::{Element, Location, LockError, LockId, MemArray, Residency, Transfer};
use gpuport::backend::{Backend, Stream as BackendStream};
use gpuport::dlpack::{is_host_accessible, DLDevice, DLDeviceType, DLPackError, ImportedTensor};
use gpuport::{with_device, AnyDevice, BackendKind, Device, Error};
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::device::{
    is_cuda_dl, resolve_device, resolve_stream, spec, stream_from_handle, AnyStream, PyBackend, PyDevice,
};
use crate::dlpack::{make_capsule, take_capsule, ExportParts, Packaging, Producer};
use crate::dtype::{dtype_from_py, unsupported_dlpack_dtype, DType, MAX_RANK};
use crate::errors::{self, IntoPyResult};
use crate::{with_dtype, with_rank};

// ---- elements ------------------------------------------------------------------

/// The element types the Python layer stores, with their kernels where the
/// built-ins have one.
pub trait PyElement: Element {
    /// `MemArray::add_index`, or `Unsupported` for types without the kernel.
    fn add_index<const N: usize, D: Device>(
        a: &mut MemArray<Self, N, D>,
        s: &BackendStream<D::B>,
        lock: Option<LockId>,
    ) -> gpuport::Result<()>;

    /// `kernels::add_index_async` on raw memory.
    ///
    /// # Safety
    /// As for `gpuport::kernels::add_index_async`.
    unsafe fn add_index_raw<const N: usize, D: Device>(
        d: &D,
        data: u64,
        shape: [i64; N],
        s: &BackendStream<D::B>,
    ) -> gpuport::Result<()>;
}

macro_rules! kernel_elements {
    ($($t:ty),*) => { $(
        impl PyElement for $t {
            fn add_index<const N: usize, D: Device>(
                a: &mut MemArray<Self, N, D>,
                s: &BackendStream<D::B>,
                lock: Option<LockId>,
            ) -> gpuport::Result<()> {
                a.add_index(s, lock)
            }
            unsafe fn add_index_raw<const N: usize, D: Device>(
                d: &D,
                data: u64,
                shape: [i64; N],
                s: &BackendStream<D::B>,
            ) -> gpuport::Result<()> {
                // SAFETY: forwarded contract.
                unsafe { gpuport::kernels::add_index_async::<D, $t, N>(d, data, shape, s) }
            }
        }
    )* };
}
kernel_elements!(i8, i16, i32, i64, u8, u16, u32, u64, half::f16, half::bf16, f32, f64);

macro_rules! storage_elements {
    ($($t:ty),*) => { $(
        impl PyElement for $t {
            fn add_index<const N: usize, D: Device>(
                _: &mut MemArray<Self, N, D>,
                _: &BackendStream<D::B>,
                _: Option<LockId>,
            ) -> gpuport::Result<()> {
                Err(no_kernel::<D>())
            }
            unsafe fn add_index_raw<const N: usize, D: Device>(
                _: &D,
                _: u64,
                _: [i64; N],
                _: &BackendStream<D::B>,
            ) -> gpuport::Result<()> {
                Err(no_kernel::<D>())
            }
        }
    )* };
}
storage_elements!(bool, num_complex::Complex<half::f16>, num_complex::Complex<f32>, num_complex::Complex<f64>);

fn no_kernel<D: Device>() -> Error {
    Error::Unsupported {
        op: "add_index",
        backend: <D::B as Backend>::KIND,
        hint: Some("the built-in kernels exist for integer and real floating-point dtypes".into()),
    }
}

fn stream_mismatch(dev: &AnyDevice, s: &AnyStream) -> Error {
    Error::DeviceMismatch { what: "stream", expected: spec(dev), found: spec(&s.device()) }
}

// ---- owned arrays ------------------------------------------------------------------

/// One `MemArray<T, N, D>` behind a run-time interface.
pub trait ArrayOps: Send + Sync {
    fn dtype(&self) -> DType;
    fn shape(&self) -> Vec<usize>;
    fn device(&self) -> AnyDevice;
    fn residency(&self) -> Residency;
    fn lock_id(&self) -> Option<u64>;
    fn enter(&mut self, id: u64) -> gpuport::Result<()>;
    fn exit(&mut self);
    fn move_to(&mut self, to: Location, s: &AnyStream, mode: Transfer, lock: Option<LockId>) -> gpuport::Result<()>;
    fn synchronize(&mut self) -> gpuport::Result<()>;
    fn transfer_pending(&self) -> gpuport::Result<bool>;
    /// Address of the copy at `loc` and an owner keeping it alive.
    fn parts(&self, loc: Location, lock: Option<LockId>) -> gpuport::Result<(u64, Arc<dyn Send + Sync>)>;
    fn dl_device(&self, loc: Location) -> DLDevice;
    /// Makes `consumer` wait for the array's pending work (no host wait).
    fn order_on(&self, consumer: &AnyStream) -> gpuport::Result<()>;
    fn try_clone(&self, lock: Option<LockId>) -> gpuport::Result<Box<dyn ArrayOps>>;
    fn read_imported(&mut self, t: &ImportedTensor, lock: Option<LockId>) -> gpuport::Result<()>;
    fn add_index(&mut self, s: &AnyStream, lock: Option<LockId>) -> gpuport::Result<()>;
    fn live_exports(&self) -> usize;
    /// Marks the copy at `loc` as the only current one (a writable export may change it).
    fn mark_written(&mut self, loc: Location, lock: Option<LockId>) -> gpuport::Result<()>;
}

struct Typed<T: Element, const N: usize, D: Device> {
    a: MemArray<T, N, D>,
    dtype: DType,
}

impl<T: PyElement, const N: usize, D: PyBackend> Typed<T, N, D> {
    fn stream<'s>(&self, s: &'s AnyStream) -> gpuport::Result<&'s BackendStream<D::B>> {
        D::stream_of(s).ok_or_else(|| stream_mismatch(&self.device(), s))
    }
}

impl<T: PyElement, const N: usize, D: PyBackend> ArrayOps for Typed<T, N, D> {
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn shape(&self) -> Vec<usize> {
        self.a.shape().to_vec()
    }
    fn device(&self) -> AnyDevice {
        D::any_device(self.a.device())
    }
    fn residency(&self) -> Residency {
        self.a.residency()
    }
    fn lock_id(&self) -> Option<u64> {
        self.a.lock_id().map(|l| l.0)
    }
    fn enter(&mut self, id: u64) -> gpuport::Result<()> {
        self.a.enter(LockId(id))
    }
    fn exit(&mut self) {
        self.a.exit()
    }
    fn move_to(&mut self, to: Location, s: &AnyStream, mode: Transfer, lock: Option<LockId>) -> gpuport::Result<()> {
        let s = self.stream(s)?;
        self.a.move_to(to, s, mode, lock)
    }
    fn synchronize(&mut self) -> gpuport::Result<()> {
        self.a.synchronize()
    }
    fn transfer_pending(&self) -> gpuport::Result<bool> {
        self.a.is_transfer_pending()
    }
    fn parts(&self, loc: Location, lock: Option<LockId>) -> gpuport::Result<(u64, Arc<dyn Send + Sync>)> {
        let (p, keep) = match loc {
            Location::Host => self.a.host_parts(lock)?,
            Location::Device => self.a.device_parts(lock)?,
        };
        Ok((p as usize as u64, keep))
    }
    fn dl_device(&self, loc: Location) -> DLDevice {
        self.a.dl_device(loc)
    }
    fn order_on(&self, consumer: &AnyStream) -> gpuport::Result<()> {
        match self.a.pending_event() {
            Some(ev) => self.a.device().wait_event(self.stream(consumer)?, ev),
            None => Ok(()),
        }
    }
    fn try_clone(&self, lock: Option<LockId>) -> gpuport::Result<Box<dyn ArrayOps>> {
        Ok(Box::new(Typed { a: self.a.try_clone(lock)?, dtype: self.dtype }))
    }
    fn read_imported(&mut self, t: &ImportedTensor, lock: Option<LockId>) -> gpuport::Result<()> {
        if t.is_contiguous() {
            self.a.copy_from_slice(t.as_slice::<T>()?, lock)
        } else {
            let v = t.to_vec::<T>()?;
            self.a.copy_from_slice(&v, lock)
        }
    }
    fn add_index(&mut self, s: &AnyStream, lock: Option<LockId>) -> gpuport::Result<()> {
        let s = D::stream_of(s).ok_or_else(|| stream_mismatch(&D::any_device(self.a.device()), s))?;
        T::add_index(&mut self.a, s, lock)
    }
    fn live_exports(&self) -> usize {
        self.a.live_exports()
    }
    fn mark_written(&mut self, loc: Location, lock: Option<LockId>) -> gpuport::Result<()> {
        match loc {
            Location::Host => self.a.host_ptr_mut(lock).map(drop),
            Location::Device => self.a.device_ptr_mut(lock).map(drop),
        }
    }
}

fn new_typed<T: PyElement, const N: usize, D: PyBackend>(
    d: &Arc<D>,
    dtype: DType,
    shape: &[usize],
) -> gpuport::Result<Box<dyn ArrayOps>> {
    let mut s = [0usize; N];
    s.copy_from_slice(shape);
    Ok(Box::new(Typed { a: MemArray::<T, N, D>::zeros(d, s)?, dtype }))
}

fn rank_error(n: usize) -> Error {
    Error::InvalidArgument {
        name: "shape",
        reason: format!("{n} dimensions; MemArray has 0 to {MAX_RANK} dimensions (the built-in kernels' MAX_RANK)"),
    }
}

/// A zero-filled array of any dtype, rank (0..=8) and device.
fn new_owned(dev: &AnyDevice, dtype: DType, shape: &[usize]) -> gpuport::Result<Box<dyn ArrayOps>> {
    with_device!(dev, d => with_dtype!(dtype, T => with_rank!(shape.len(), N => new_typed::<T, N, _>(d, dtype, shape),
        else => Err(rank_error(shape.len())))))
}

// ---- imported arrays ---------------------------------------------------------------

/// Another library's memory, imported without a copy and kept alive by `keep`
/// (the producer's DLPack tensor, or the Python object of a CUDA Array
/// Interface import).
pub struct Foreign {
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Strides in elements.
    pub strides: Vec<i64>,
    /// Address of the element at index 0.
    pub data: u64,
    pub dl: DLDevice,
    pub read_only: bool,
    pub keep: Arc<dyn Send + Sync>,
    /// The gpuport device whose kernels can reach the memory.
    pub device: AnyDevice,
    pub lock: Option<u64>,
}

impl Foreign {
    fn check_lock(&self, op: &'static str, given: Option<u64>) -> gpuport::Result<()> {
        match (self.lock, given) {
            (None, _) => Ok(()),
            (Some(held), None) => Err(LockError::Locked { op, held }.into()),
            (Some(held), Some(g)) if g == held => Ok(()),
            (Some(held), Some(given)) => Err(LockError::WrongId { op, held, given }.into()),
        }
    }

    fn location(&self) -> Location {
        if is_host_accessible(self.dl.device_type) && self.device.backend() == BackendKind::Host {
            Location::Host
        } else {
            Location::Device
        }
    }

    fn is_row_major(&self) -> bool {
        let mut expect = 1i64;
        for axis in (0..self.shape.len()).rev() {
            if self.shape[axis] > 1 && self.strides[axis] != expect {
                return false;
            }
            expect = expect.saturating_mul(self.shape[axis] as i64);
        }
        true
    }

    fn add_index(&self, s: &AnyStream) -> gpuport::Result<()> {
        if self.read_only {
            return Err(DLPackError::ReadOnly.into());
        }
        if !self.is_row_major() {
            return Err(Error::InvalidArgument {
                name: "array",
                reason: format!(
                    "add_index needs compact row-major memory; the imported array has strides {:?}",
                    self.strides
                ),
            });
        }
        let n = self.shape.len();
        with_device!(self.device, d => with_dtype!(self.dtype, T => with_rank!(n, N =>
            foreign_add_index::<T, N, _>(d, self.data, &self.shape, s), else => Err(rank_error(n)))))
    }
}

fn foreign_add_index<T: PyElement, const N: usize, D: PyBackend>(
    d: &Arc<D>,
    data: u64,
    shape: &[usize],
    s: &AnyStream,
) -> gpuport::Result<()> {
    let st = D::stream_of(s).ok_or_else(|| stream_mismatch(&D::any_device(d), s))?;
    let mut sh = [0i64; N];
    for (o, &e) in sh.iter_mut().zip(shape) {
        *o = e as i64; // fits: validated against isize::MAX bytes on import
    }
    // SAFETY: `data` addresses the imported array's `shape.product()`
    // elements of `T` (validated on import, row-major checked by the
    // caller) on `d`, kept alive by the `Foreign` that calls this, and we
    // wait for the stream before returning.
    unsafe { T::add_index_raw::<N, D>(d, data, sh, st)? };
    d.synchronize(st)
}

/// The gpuport device and location for memory of a DLPack device.
fn device_for_dl(py: Python<'_>, dl: DLDevice) -> PyResult<AnyDevice> {
    let spec = match dl.device_type {
        DLDeviceType::CPU | DLDeviceType::CUDA_HOST | DLDeviceType::ROCM_HOST => "host".to_string(),
        DLDeviceType::CUDA | DLDeviceType::CUDA_MANAGED => format!("cuda:{}", dl.device_id.max(0)),
        DLDeviceType::ROCM => format!("rocm:{}", dl.device_id.max(0)),
        other => {
            return Err(errors::dlpack(py, format!("DLPack device type {} is not supported", other.0)));
        }
    };
    py.detach(|| gpuport::open(&spec)).py_err(py)
}

pub fn foreign_from_producer(py: Python<'_>, p: Producer) -> PyResult<Foreign> {
    let t = &p.0;
    let dtype = DType::from_dlpack(t.dtype()).ok_or_else(|| errors::dlpack(py, unsupported_dlpack_dtype(t.dtype())))?;
    if t.ndim() > MAX_RANK {
        return Err(errors::shape(py, format!("{} dimensions; MemArray has 0 to {MAX_RANK}", t.ndim())));
    }
    let device = device_for_dl(py, t.device())?;
    Ok(Foreign {
        dtype,
        shape: t.shape().iter().map(|&e| e as usize).collect(),
        strides: t.strides().to_vec(),
        data: t.data_ptr() as usize as u64,
        dl: t.device(),
        read_only: t.is_read_only(),
        device,
        lock: None,
        keep: Arc::new(p),
    })
}

// ---- storage -----------------------------------------------------------------------

/// What a Python `MemArray` holds.
pub enum Storage {
    Owned(Box<dyn ArrayOps>),
    Foreign(Foreign),
}

impl Storage {
    fn dtype(&self) -> DType {
        match self {
            Storage::Owned(a) => a.dtype(),
            Storage::Foreign(f) => f.dtype,
        }
    }
    fn shape(&self) -> Vec<usize> {
        match self {
            Storage::Owned(a) => a.shape(),
            Storage::Foreign(f) => f.shape.clone(),
        }
    }
    fn device(&self) -> AnyDevice {
        match self {
            Storage::Owned(a) => a.device(),
            Storage::Foreign(f) => f.device.clone(),
        }
    }
    fn lock_id(&self) -> Option<u64> {
        match self {
            Storage::Owned(a) => a.lock_id(),
            Storage::Foreign(f) => f.lock,
        }
    }
    fn enter(&mut self, id: u64) -> gpuport::Result<()> {
        match self {
            Storage::Owned(a) => a.enter(id),
            Storage::Foreign(f) => match f.lock {
                Some(held) => Err(LockError::AlreadyLocked { held, requested: id }.into()),
                None => {
                    f.lock = Some(id);
                    Ok(())
                }
            },
        }
    }
    fn exit(&mut self) {
        match self {
            Storage::Owned(a) => a.exit(),
            Storage::Foreign(f) => f.lock = None,
        }
    }

    /// Where an export goes when the consumer does not say: the device copy
    /// of a GPU array when it is current, else the current copy.
    fn natural(&self) -> Location {
        match self {
            Storage::Owned(a) => natural_of(a.as_ref()),
            Storage::Foreign(f) => f.location(),
        }
    }

    fn dl(&self, loc: Location) -> DLDevice {
        match self {
            Storage::Owned(a) => a.dl_device(loc),
            Storage::Foreign(f) => f.dl,
        }
    }
}

fn natural_of(a: &dyn ArrayOps) -> Location {
    match a.residency() {
        Residency::Host => Location::Host,
        Residency::Device => Location::Device,
        Residency::Both if a.device().backend() != BackendKind::Host => Location::Device,
        Residency::Both => Location::Host,
    }
}

fn dl_pair(d: DLDevice) -> (i32, i32) {
    (d.device_type.0 as i32, d.device_id)
}

fn loc_name(l: Location) -> &'static str {
    match l {
        Location::Host => "host",
        Location::Device => "device",
    }
}

/// A DLPack export request, as `__dlpack__` receives it.
pub struct Request {
    pub stream: Option<isize>,
    pub max_version: Option<(u32, u32)>,
    pub dl_device: Option<(i32, i32)>,
    pub copy: Option<bool>,
    pub read_only: bool,
    pub lock: Option<u64>,
    pub prefer: Option<Location>,
}

/// The consumer stream a `__dlpack__(stream=...)` names for memory of DLPack
/// device type `dl_t`: `None` for no synchronization.
fn consumer_stream(py: Python<'_>, dev: &AnyDevice, dl_t: i32, stream: Option<isize>) -> PyResult<Option<AnyStream>> {
    if is_cuda_dl(dl_t) {
        match stream {
            // The standard: None means the legacy default stream on CUDA.
            None => stream_from_handle(py, dev, 1).map(Some),
            Some(-1) => Ok(None),
            Some(0) => Err(PyValueError::new_err(
                "stream=0 is ambiguous on CUDA and disallowed by the DLPack standard; use 1 (legacy default), 2 (per-thread default), a stream handle, or -1",
            )),
            Some(h) if h < -1 => Err(PyValueError::new_err(format!("stream={h} is not a CUDA stream"))),
            Some(h) => stream_from_handle(py, dev, h).map(Some),
        }
    } else {
        match stream {
            None | Some(-1) => Ok(None),
            Some(h) => Err(PyValueError::new_err(format!(
                "stream={h} was given for memory on DLPack device type {dl_t}; host memory takes stream=None"
            ))),
        }
    }
}

/// Exports `st` as a DLPack capsule following the array API standard.
pub fn export<'py>(py: Python<'py>, st: &mut Storage, req: Request) -> PyResult<Bound<'py, PyAny>> {
    let versioned_minor = match req.max_version {
        Some((major, minor)) if major >= 1 => {
            Some(if major > 1 { gpuport::dlpack::ffi::DLPACK_MINOR_VERSION } else { minor })
        }
        _ => None,
    };
    let lock = req.lock.map(LockId);
    let (parts, copied, read_only) = match st {
        Storage::Owned(a) => {
            let mut loc = req.prefer.unwrap_or_else(|| natural_of(a.as_ref()));
            let mut to_host = false;
            if let Some(want) = req.dl_device {
                if want != dl_pair(a.dl_device(loc)) {
                    let other = if loc == Location::Host { Location::Device } else { Location::Host };
                    if a.residency().includes(other) && dl_pair(a.dl_device(other)) == want {
                        loc = other;
                    } else if want.0 == DLDeviceType::CPU.0 as i32 {
                        if req.copy == Some(false) {
                            return Err(PyBufferError::new_err(format!(
                                "dl_device={want:?} needs a copy to host memory, but copy=False; the array's current copy is on {}",
                                spec(&a.device())
                            )));
                        }
                        to_host = true;
                    } else {
                        return Err(PyBufferError::new_err(format!(
                            "cannot export to dl_device={want:?}: the array lives on {} (DLPack device {:?})",
                            spec(&a.device()),
                            dl_pair(a.dl_device(loc))
                        )));
                    }
                }
            }
            let copied = to_host || req.copy == Some(true);
            let final_dl =
                if to_host { DLDevice { device_type: DLDeviceType::CPU, device_id: 0 } } else { a.dl_device(loc) };
            let consumer = consumer_stream(py, &a.device(), final_dl.device_type.0 as i32, req.stream)?;
            let (data, keep, dl) = if copied {
                py.detach(|| -> gpuport::Result<_> {
                    let mut c = a.try_clone(lock)?;
                    let target = if to_host { Location::Host } else { loc };
                    c.move_to(target, &AnyStream::default_for(&c.device()), Transfer::Sync, None)?;
                    let (p, k) = c.parts(target, None)?;
                    Ok((p, k, c.dl_device(target)))
                })
                .py_err(py)?
            } else {
                if let Some(s) = &consumer {
                    a.order_on(s).py_err(py)?;
                } else if is_host_accessible(final_dl.device_type) && req.stream != Some(-1) {
                    // The host itself is the consumer (host-backend device
                    // copies, managed memory): wait for pending kernels.
                    py.detach(|| a.synchronize()).py_err(py)?;
                }
                let (p, k) = py.detach(|| a.parts(loc, lock)).py_err(py)?;
                if !req.read_only {
                    // The consumer may write: the other copy is stale from now on.
                    a.mark_written(loc, lock).py_err(py)?;
                }
                (p, k, a.dl_device(loc))
            };
            let parts = ExportParts { data, device: dl, dtype: a.dtype(), shape: a.shape(), strides: None, keep };
            (parts, copied, req.read_only)
        }
        Storage::Foreign(f) => {
            f.check_lock("__dlpack__", req.lock).py_err(py)?;
            if let Some(want) = req.dl_device {
                if want != dl_pair(f.dl) {
                    return Err(PyBufferError::new_err(format!(
                        "cannot export an imported array to dl_device={want:?}; it lives on DLPack device {:?}",
                        dl_pair(f.dl)
                    )));
                }
            }
            if req.copy == Some(true) {
                return Err(PyBufferError::new_err(
                    "copy=True is not supported for an imported array; copy it in its producer library",
                ));
            }
            consumer_stream(py, &f.device, f.dl.device_type.0 as i32, req.stream)?;
            let parts = ExportParts {
                data: f.data,
                device: f.dl,
                dtype: f.dtype,
                shape: f.shape.clone(),
                strides: Some(f.strides.clone()),
                keep: f.keep.clone(),
            };
            (parts, false, req.read_only || f.read_only)
        }
    };
    if read_only && versioned_minor.is_none() {
        return Err(PyBufferError::new_err(
            "a read-only export needs a versioned DLPack capsule, and the consumer did not pass max_version >= (1, 0)",
        ));
    }
    make_capsule(py, parts, Packaging { versioned_minor, read_only, copied })
}

/// Calls `obj.__dlpack__` as a consumer on `dev`'s default stream and takes the capsule.
pub fn import_producer(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    copy: Option<bool>,
) -> PyResult<Producer> {
    if obj.is_instance_of::<pyo3::types::PyCapsule>() {
        return take_capsule(py, obj);
    }
    if !obj.hasattr("__dlpack__")? {
        return Err(PyTypeError::new_err(format!(
            "{} does not support DLPack (no __dlpack__ method)",
            obj.get_type().name()?
        )));
    }
    let (dl_t, dl_id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    // The consumer's stream: ours, as the standard's integer.
    let stream_arg: Option<isize> = if is_cuda_dl(dl_t) {
        let dev = device_for_dl(py, DLDevice { device_type: DLDeviceType(dl_t as u32), device_id: dl_id })?;
        let s = resolve_stream(py, &dev, stream)?;
        // Our default stream is the legacy (null) stream, which DLPack spells 1.
        Some(match s.handle() {
            0 => 1,
            h => h as isize,
        })
    } else if dl_t == DLDeviceType::ROCM.0 as i32 {
        Some(0)
    } else {
        None
    };
    let kwargs = PyDict::new(py);
    kwargs.set_item("stream", stream_arg)?;
    kwargs.set_item("max_version", (1, gpuport::dlpack::ffi::DLPACK_MINOR_VERSION))?;
    if let Some(c) = copy {
        kwargs.set_item("copy", c)?;
    }
    let cap = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(c) => c,
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            // A producer older than DLPack 1.0 takes only `stream`.
            let kwargs = PyDict::new(py);
            kwargs.set_item("stream", stream_arg)?;
            obj.call_method("__dlpack__", (), Some(&kwargs))?
        }
        Err(e) => return Err(e),
    };
    take_capsule(py, &cap)
}

// ---- the Python class ---------------------------------------------------------------

/// Lock ids handed out by `get_dlpack`: a per-process random base plus a counter.
fn next_lock_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(std::process::id() as u64);
        h.finish() >> 16
    });
    base.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) | 1
}

/// An N-dimensional array with a host copy and a device copy
/// (docs/design.md#memarray), or a zero-copy import of another library's array.
#[pyclass(module = "gpuport._core", name = "MemArray", weakref)]
pub struct PyMemArray {
    pub st: Storage,
}

fn parse_shape(shape: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    if let Ok(n) = shape.extract::<usize>() {
        return Ok(vec![n]);
    }
    let mut out = Vec::new();
    for item in shape.try_iter().map_err(|_| PyTypeError::new_err("shape must be an int or a sequence of ints"))? {
        let item = item?;
        let v: i64 = item.extract().map_err(|_| PyTypeError::new_err("shape must be an int or a sequence of ints"))?;
        if v < 0 {
            return Err(errors::shape(shape.py(), format!("negative extent {v} in shape")));
        }
        out.push(v as usize);
    }
    Ok(out)
}

impl PyMemArray {
    fn owned(&self) -> Option<&dyn ArrayOps> {
        match &self.st {
            Storage::Owned(a) => Some(a.as_ref()),
            Storage::Foreign(_) => None,
        }
    }

    /// Which copy a `move_memory`/`get_dlpack` target names.
    fn target(&self, py: Python<'_>, device_type: &Bound<'_, PyAny>) -> PyResult<Location> {
        let dev = self.st.device();
        if let Ok(s) = device_type.extract::<String>() {
            return match s.to_ascii_lowercase().as_str() {
                "host" | "cpu" => Ok(Location::Host),
                "device" => Ok(Location::Device),
                other if other.starts_with(dev.backend().name()) && dev.backend() != BackendKind::Host => {
                    Ok(Location::Device)
                }
                other => Err(PyValueError::new_err(format!(
                    "unknown target {other:?}; use \"host\", \"device\" or a DLPack device type (the array is on {})",
                    spec(&dev)
                ))),
            };
        }
        let t: i32 = device_type.extract().map_err(|_| {
            PyTypeError::new_err("device_type must be a DLPack device type (int), \"host\" or \"device\"")
        })?;
        let own = crate::device::device_dl(&dev).0;
        if t == DLDeviceType::CPU.0 as i32 || t == DLDeviceType::CUDA_HOST.0 as i32 {
            Ok(Location::Host)
        } else if t == own && dev.backend() != BackendKind::Host {
            Ok(Location::Device)
        } else {
            Err(errors::unavailable(
                py,
                format!(
                    "DLPack device type {t} is not where this array can live: it is on {} (device copy: DLPack type {own}, host copy: 1); use \"device\" for the device copy",
                    spec(&dev)
                ),
            ))
        }
    }

    fn move_impl(
        &mut self,
        py: Python<'_>,
        to: Location,
        device_id: Option<usize>,
        stream: Option<&Bound<'_, PyAny>>,
        async_copy: bool,
        lock: Option<u64>,
    ) -> PyResult<()> {
        let dev = self.st.device();
        if let Some(id) = device_id {
            if to == Location::Device && id != dev.info().ordinal {
                return Err(errors::to_py(
                    py,
                    Error::DeviceMismatch {
                        what: "device_id",
                        expected: spec(&dev),
                        found: format!("{}:{id}", dev.backend()),
                    },
                ));
            }
        }
        let s = resolve_stream(py, &dev, stream)?;
        match &mut self.st {
            Storage::Owned(a) => {
                let mode = if async_copy { Transfer::Async } else { Transfer::Sync };
                py.detach(|| a.move_to(to, &s, mode, lock.map(LockId))).py_err(py)
            }
            Storage::Foreign(f) => {
                f.check_lock("move_memory", lock).py_err(py)?;
                if f.location() == to || is_host_accessible(f.dl.device_type) {
                    Ok(())
                } else {
                    Err(errors::residency(
                        py,
                        format!(
                            "an imported array stays where its producer put it ({}); move_memory({}) is not possible",
                            spec(&f.device),
                            loc_name(to)
                        ),
                    ))
                }
            }
        }
    }

    pub fn dlpack_impl<'py>(&mut self, py: Python<'py>, req: Request) -> PyResult<Bound<'py, PyAny>> {
        export(py, &mut self.st, req)
    }

    fn dlpack_device_impl(&self, prefer: Option<Location>) -> (i32, i32) {
        dl_pair(self.st.dl(prefer.unwrap_or_else(|| self.st.natural())))
    }

    pub fn from_foreign(f: Foreign) -> Self {
        PyMemArray { st: Storage::Foreign(f) }
    }
}

fn parse_version(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(u32, u32)>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => Ok(Some(v.extract()?)),
    }
}

fn parse_dl_device(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(i32, i32)>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => Ok(Some(v.extract()?)),
    }
}

#[pymethods]
impl PyMemArray {
    /// A zero-filled array of `shape` (an int or a sequence of 0 to 8 ints)
    /// and `dtype` (default float64) on `device` (default: the default device).
    #[new]
    #[pyo3(signature = (shape, dtype=None, device=None))]
    fn new(
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let shape = parse_shape(shape)?;
        let dtype = match dtype {
            Some(d) => dtype_from_py(d)?,
            None => DType::Float64,
        };
        let dev = resolve_device(py, device)?;
        if shape.len() > MAX_RANK {
            return Err(errors::to_py(py, rank_error(shape.len())));
        }
        let st = py.detach(|| new_owned(&dev, dtype, &shape)).py_err(py)?;
        Ok(PyMemArray { st: Storage::Owned(st) })
    }

    /// The extents.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.st.shape())
    }

    /// The number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.st.shape().len()
    }

    /// The number of elements.
    #[getter]
    fn size(&self) -> usize {
        self.st.shape().iter().product()
    }

    /// The dtype's name (`"float32"`, `"bfloat16"`, ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.st.dtype().name()
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.st.dtype().itemsize()
    }

    /// Bytes of all elements.
    #[getter]
    fn nbytes(&self) -> usize {
        self.size() * self.itemsize()
    }

    /// The device that holds the array's device copy.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice(self.st.device())
    }

    /// Which copies are current: `"host"`, `"device"` or `"both"`
    /// (`"imported"` for an array imported from another library).
    #[getter]
    fn residency(&self) -> &'static str {
        match self.owned() {
            Some(a) => match a.residency() {
                Residency::Host => "host",
                Residency::Device => "device",
                Residency::Both => "both",
            },
            None => "imported",
        }
    }

    /// Whether this array wraps another library's memory (`from_dlpack`).
    #[getter]
    fn is_imported(&self) -> bool {
        self.owned().is_none()
    }

    /// Whether consumers must not write (an imported read-only tensor).
    #[getter]
    fn readonly(&self) -> bool {
        matches!(&self.st, Storage::Foreign(f) if f.read_only)
    }

    /// The id of the `get_dlpack` block holding the lock, or None.
    #[getter]
    fn lock_id(&self) -> Option<u64> {
        self.st.lock_id()
    }

    /// Whether an asynchronous copy or kernel may still be running.
    #[getter]
    fn transfer_pending(&self, py: Python<'_>) -> PyResult<bool> {
        match self.owned() {
            Some(a) => a.transfer_pending().py_err(py),
            None => Ok(false),
        }
    }

    /// Address of the copy `__dlpack__` exports by default (a device
    /// address for device memory); for zero-copy checks.
    #[getter]
    fn data_ptr(&self, py: Python<'_>) -> PyResult<u64> {
        match &self.st {
            Storage::Owned(a) => {
                let loc = self.st.natural();
                py.detach(|| a.parts(loc, None)).py_err(py).map(|(p, _)| p)
            }
            Storage::Foreign(f) => Ok(f.data),
        }
    }

    /// DLPack exports and views that still share this array's memory.
    #[getter]
    fn live_exports(&self) -> usize {
        match &self.st {
            Storage::Owned(a) => a.live_exports(),
            Storage::Foreign(f) => Arc::strong_count(&f.keep) - 1,
        }
    }

    /// Makes the copy named by `device_type` current: a DLPack device type
    /// (`kDLCPU` for the host copy, `kDLCUDA` for a CUDA array's device
    /// copy), `"host"` or `"device"`. `stream` is None/0 (the device's
    /// default stream), a `Stream`, or a foreign stream; with `async_copy`
    /// the copy is only enqueued (host access waits for it).
    #[pyo3(signature = (device_type, device_id=None, stream=None, async_copy=false))]
    fn move_memory(
        &mut self,
        py: Python<'_>,
        device_type: &Bound<'_, PyAny>,
        device_id: Option<usize>,
        stream: Option<&Bound<'_, PyAny>>,
        async_copy: bool,
    ) -> PyResult<()> {
        let to = self.target(py, device_type)?;
        self.move_impl(py, to, device_id, stream, async_copy, None)
    }

    /// Waits for pending asynchronous copies and kernels.
    fn synchronize(&mut self, py: Python<'_>) -> PyResult<()> {
        match &mut self.st {
            Storage::Owned(a) => py.detach(|| a.synchronize()).py_err(py),
            Storage::Foreign(_) => Ok(()),
        }
    }

    /// A context manager that moves the array to `device_type` (if given),
    /// locks it for the `with` block and exports it through DLPack:
    /// `with a.get_dlpack() as d: x = np.from_dlpack(d)`. Access to the
    /// array without the lock raises `LockError` inside the block.
    #[pyo3(signature = (device_type=None, device_id=None, stream=None, readonly=false))]
    fn get_dlpack(
        slf: Bound<'_, Self>,
        device_type: Option<&Bound<'_, PyAny>>,
        device_id: Option<usize>,
        stream: Option<&Bound<'_, PyAny>>,
        readonly: bool,
    ) -> PyResult<DLPackContext> {
        let py = slf.py();
        let prefer = match device_type.filter(|d| !d.is_none()) {
            Some(d) => {
                let mut me = slf.borrow_mut();
                let to = me.target(py, d)?;
                me.move_impl(py, to, device_id, stream, false, None)?;
                Some(to)
            }
            None => None,
        };
        Ok(DLPackContext { array: slf.unbind(), lock_id: next_lock_id(), readonly, prefer, entered: false })
    }

    /// Copies `array` (anything with `__dlpack__` on host memory, e.g. a
    /// NumPy array; cast with `astype` when its dtype differs) into the host
    /// copy, which becomes the current copy. The shape must match.
    fn read_numpy_array(&mut self, py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<()> {
        let dtype = self.st.dtype();
        let mut src = array.clone();
        if let Ok(their) = array.getattr("dtype") {
            if dtype_from_py(&their).ok() != Some(dtype) && array.hasattr("astype")? {
                src = array.call_method1("astype", (dtype.name(),))?;
            }
        }
        let p = import_producer(py, &src, None, None)?;
        let t = &p.0;
        let shape: Vec<usize> = t.shape().iter().map(|&e| e as usize).collect();
        if shape != self.st.shape() {
            return Err(errors::shape(
                py,
                format!("read_numpy_array: the array has shape {:?}, the MemArray {:?}", shape, self.st.shape()),
            ));
        }
        match &mut self.st {
            Storage::Owned(a) => py.detach(|| a.read_imported(p.tensor(), None)).py_err(py),
            Storage::Foreign(_) => Err(errors::residency(
                py,
                "read_numpy_array into an imported array: write through its producer instead".into(),
            )),
        }
    }

    /// The array as a NumPy array: zero-copy for a current host copy,
    /// a copy (DLPack `IS_COPIED`) for device-only data.
    fn to_numpy<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let np = py.import("numpy")?;
        let dl = slf.borrow().dlpack_device_impl(None);
        if dl.0 == DLDeviceType::CPU.0 as i32 {
            np.call_method1("from_dlpack", (slf,))
        } else {
            let kw = PyDict::new(py);
            kw.set_item("device", "cpu")?;
            np.call_method("from_dlpack", (slf,), Some(&kw))
        }
    }

    /// Adds to every element the sum of its indices (docs/design.md#the-test-kernel),
    /// on the device, on `stream`; the device copy becomes current.
    #[pyo3(signature = (stream=None))]
    fn add_index(&mut self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let dtype = self.st.dtype();
        if !dtype.has_kernels() {
            return Err(errors::unsupported_dtype(
                py,
                format!(
                    "add_index has no kernel for {}; it runs on int8..int64, uint8..uint64, float16, bfloat16, float32, float64",
                    dtype.name()
                ),
            ));
        }
        let s = resolve_stream(py, &self.st.device(), stream)?;
        match &mut self.st {
            Storage::Owned(a) => py.detach(|| a.add_index(&s, None)).py_err(py),
            Storage::Foreign(f) => {
                f.check_lock("add_index", None).py_err(py)?;
                py.detach(|| f.add_index(&s)).py_err(py)
            }
        }
    }

    /// The current host copy's bytes in row-major order (for dtypes NumPy
    /// lacks: bfloat16, complex32). Raises `ResidencyError` for device-only data.
    fn tobytes<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let n = self.nbytes();
        let natural = self.st.natural();
        let (ptr, keep): (u64, Arc<dyn Send + Sync>) = match &mut self.st {
            Storage::Owned(a) => {
                py.detach(|| a.synchronize()).py_err(py)?;
                let loc = if a.residency().includes(Location::Host) { Location::Host } else { natural };
                if a.dl_device(loc).device_type != DLDeviceType::CPU {
                    return Err(errors::residency(
                        py,
                        "tobytes() needs the host copy; call move_memory(\"host\")".into(),
                    ));
                }
                py.detach(|| a.parts(loc, None)).py_err(py)?
            }
            Storage::Foreign(f) => {
                if !is_host_accessible(f.dl.device_type) || !f.is_row_major() {
                    return Err(errors::residency(py, "tobytes() needs compact host memory".into()));
                }
                (f.data, f.keep.clone())
            }
        };
        if n == 0 {
            return Ok(PyBytes::new(py, &[]));
        }
        // SAFETY: `ptr` addresses the `n` bytes of the host-readable copy,
        // kept alive by `keep` until the bytes are copied out.
        let bytes = PyBytes::new(py, unsafe { std::slice::from_raw_parts(ptr as usize as *const u8, n) });
        drop(keep);
        Ok(bytes)
    }

    /// A deep copy (an owned array; imported arrays cannot be copied here).
    fn copy(&self, py: Python<'_>) -> PyResult<PyMemArray> {
        match &self.st {
            Storage::Owned(a) => Ok(PyMemArray { st: Storage::Owned(py.detach(|| a.try_clone(None)).py_err(py)?) }),
            Storage::Foreign(_) => {
                Err(errors::residency(py, "copy() of an imported array: copy it in its producer library".into()))
            }
        }
    }

    /// DLPack export (array API standard): a versioned capsule when
    /// `max_version >= (1, 0)`, else a legacy one. `stream`: CUDA: None or
    /// 1 = legacy default stream, 2 = per-thread default, a handle, -1 = no
    /// synchronization (the consumer's stream waits on our work through an
    /// event); host memory: None. `dl_device`/`copy` are honoured (a copy to
    /// host sets `IS_COPIED`) or refused with `BufferError`.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &mut self,
        py: Python<'py>,
        stream: Option<isize>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = Request {
            stream,
            max_version: parse_version(max_version)?,
            dl_device: parse_dl_device(dl_device)?,
            copy,
            read_only: false,
            lock: None,
            prefer: None,
        };
        self.dlpack_impl(py, req)
    }

    /// `(device_type, device_id)` of the memory `__dlpack__` exports.
    fn __dlpack_device__(&self) -> (i32, i32) {
        self.dlpack_device_impl(None)
    }

    /// The NumPy array interface (v3) of a host-resident array; NumPy's
    /// `asarray` uses it without a copy and keeps this array alive.
    #[getter]
    fn __array_interface__<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let loc = self.st.natural();
        let dl = self.st.dl(loc);
        if !is_host_accessible(dl.device_type)
            || (matches!(self.st, Storage::Owned(_)) && dl.device_type != DLDeviceType::CPU)
        {
            return Err(PyAttributeError::new_err(
                "__array_interface__ is defined for host-resident arrays only; use __dlpack__ or move_memory(\"host\")",
            ));
        }
        let typestr = self.st.dtype().typestr().ok_or_else(|| {
            PyAttributeError::new_err(format!("{} has no array-interface type string", self.st.dtype().name()))
        })?;
        let shape = self.st.shape();
        let (data, strides, ro) = match &mut self.st {
            Storage::Owned(a) => {
                // The host reads it: pending kernels on a host-backend device copy must finish.
                py.detach(|| a.synchronize()).py_err(py)?;
                (py.detach(|| a.parts(loc, None)).py_err(py)?.0, None, false)
            }
            Storage::Foreign(f) => {
                let item = f.dtype.itemsize() as i64;
                let s: Vec<i64> = f.strides.iter().map(|&s| s * item).collect();
                (f.data, Some(s), f.read_only)
            }
        };
        interface_dict(py, &shape, typestr, data, ro, strides, None, 3)
    }

    /// The CUDA Array Interface (v3) of a CUDA-resident array, with `stream`
    /// set to a stream that waits for pending work (None when there is none).
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::cai::export(py, &self.st)
    }

    fn __len__(&self) -> PyResult<usize> {
        self.st.shape().first().copied().ok_or_else(|| PyTypeError::new_err("len() of a 0-d MemArray"))
    }

    fn __repr__(&self) -> String {
        format!(
            "MemArray(shape={:?}, dtype={}, device={:?}, residency={})",
            self.st.shape(),
            self.st.dtype().name(),
            spec(&self.st.device()),
            self.residency()
        )
    }
}

/// An array-interface dict (`__array_interface__` / `__cuda_array_interface__`).
#[allow(clippy::too_many_arguments)]
pub fn interface_dict<'py>(
    py: Python<'py>,
    shape: &[usize],
    typestr: &str,
    data: u64,
    read_only: bool,
    strides: Option<Vec<i64>>,
    stream: Option<Option<usize>>,
    version: u32,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("shape", PyTuple::new(py, shape)?)?;
    d.set_item("typestr", typestr)?;
    d.set_item("descr", PyList::new(py, [("", typestr)])?)?;
    d.set_item("data", (data, read_only))?;
    match strides {
        Some(s) => d.set_item("strides", PyTuple::new(py, s)?)?,
        None => d.set_item("strides", py.None())?,
    }
    d.set_item("version", version)?;
    if let Some(s) = stream {
        d.set_item("stream", s)?;
    }
    Ok(d)
}

/// The object `MemArray.get_dlpack()` returns: a context manager that locks
/// the array for its block and exports it through DLPack with the lock id.
#[pyclass(module = "gpuport._core", name = "DLPackContext")]
pub struct DLPackContext {
    array: Py<PyMemArray>,
    lock_id: u64,
    readonly: bool,
    prefer: Option<Location>,
    entered: bool,
}

#[pymethods]
impl DLPackContext {
    /// The lock id this context holds inside its `with` block.
    #[getter]
    fn lock_id(&self) -> u64 {
        self.lock_id
    }

    /// The array.
    #[getter]
    fn array(&self, py: Python<'_>) -> Py<PyMemArray> {
        self.array.clone_ref(py)
    }

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        let py = slf.py();
        let id = slf.lock_id;
        slf.array.borrow_mut(py).st.enter(id).py_err(py)?;
        slf.entered = true;
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> bool {
        if self.entered {
            let mut a = self.array.borrow_mut(py);
            if a.st.lock_id() == Some(self.lock_id) {
                a.st.exit();
            }
            self.entered = false;
        }
        false
    }

    /// As `MemArray.__dlpack__`, with this context's lock (and READ_ONLY
    /// when made with `readonly=True`).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<isize>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = Request {
            stream,
            max_version: parse_version(max_version)?,
            dl_device: parse_dl_device(dl_device)?,
            copy,
            read_only: self.readonly,
            lock: self.entered.then_some(self.lock_id),
            prefer: self.prefer,
        };
        self.array.borrow_mut(py).dlpack_impl(py, req)
    }

    fn __dlpack_device__(&self, py: Python<'_>) -> (i32, i32) {
        self.array.borrow(py).dlpack_device_impl(self.prefer)
    }
}

/// Imports any DLPack producer (NumPy, PyTorch, CuPy, JAX, another
/// MemArray, or a capsule) without a copy. The result keeps the producer's
/// memory alive; the producer's deleter runs once when it goes.
#[pyfunction]
#[pyo3(signature = (obj, /, *, stream=None, copy=None))]
pub fn from_dlpack(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    copy: Option<bool>,
) -> PyResult<PyMemArray> {
    if copy == Some(true) {
        // An owned copy: import, then copy into a new host-backend array.
        let p = import_producer(py, obj, stream, None)?;
        let t = &p.0;
        if !is_host_accessible(t.device().device_type) {
            return Err(PyBufferError::new_err("from_dlpack(copy=True) copies host-accessible tensors only"));
        }
        let dtype =
            DType::from_dlpack(t.dtype()).ok_or_else(|| errors::dlpack(py, unsupported_dlpack_dtype(t.dtype())))?;
        let shape: Vec<usize> = t.shape().iter().map(|&e| e as usize).collect();
        let host = py.detach(|| gpuport::open("host")).py_err(py)?;
        let mut a = py.detach(|| new_owned(&host, dtype, &shape)).py_err(py)?;
        py.detach(|| a.read_imported(p.tensor(), None)).py_err(py)?;
        return Ok(PyMemArray { st: Storage::Owned(a) });
    }
    let p = import_producer(py, obj, stream, copy)?;
    Ok(PyMemArray::from_foreign(foreign_from_producer(py, p)?))
}

/// A MemArray from anything array-like: a MemArray (returned as is), a DLPack
/// producer (zero-copy), a CUDA Array Interface producer (zero-copy), or any
/// other object NumPy can convert (copied).
#[pyfunction]
#[pyo3(signature = (obj, /, *, device=None))]
pub fn asarray(py: Python<'_>, obj: &Bound<'_, PyAny>, device: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
    if obj.is_instance_of::<PyMemArray>() {
        return Ok(obj.clone().unbind());
    }
    if obj.hasattr("__dlpack__")? {
        return Ok(Bound::new(py, from_dlpack(py, obj, None, None)?)?.into_any().unbind());
    }
    if obj.hasattr("__cuda_array_interface__")? {
        return Ok(Bound::new(py, crate::cai::from_cuda_array_interface(py, obj, device)?)?.into_any().unbind());
    }
    let arr = py.import("numpy")?.call_method1("ascontiguousarray", (obj,))?;
    Ok(Bound::new(py, from_dlpack(py, &arr, None, None)?)?.into_any().unbind())
}
