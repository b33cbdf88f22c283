//! Arrays whose element type, rank and backend are known only at run time.
//!
//! [`AnyArray`] is an owned gpuport `MemArray<T, N, D>` behind the
//! object-safe [`DynArray`] trait, or another library's memory imported
//! without a copy ([`ImportedArray`]). Dispatch: `on_backend!` over the
//! compiled-in backends, `with_dtype!` over every scalar element type and
//! `with_rank!` over ranks 0..=8 (the kernels' `MAX_RANK`) pick one
//! `MemArray<T, N, D>`; nothing else is a table of instantiations.
//!
//! ```
//! use gpuport::dynamic::{new_owned, AnyStream, DType};
//! let dev = gpuport::open("host")?;
//! let mut a = new_owned(&dev, DType::Float32, &[2, 3])?;
//! a.add_index(&AnyStream::default_for(&dev), None)?;
//! assert_eq!(a.shape()[..], [2, 3]);
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::sync::Arc;

use smallvec::SmallVec;

use super::any::DynDevice;
pub use super::imported::{ImportedArray, RawImport};
use super::stream::AnyStream;
use crate::array::dtype::{with_dtype, with_rank, DType, MAX_RANK};
use crate::array::DeviceCopyToken;
use crate::array::{Element, Location, LockId, MemArray, Residency, ShapeError, Transfer};
use crate::backend::order::{hold_in_order, OrderLock};
use crate::backend::registry::AnyDevice;
use crate::backend::{Advice, ManagedPlace, MemoryDevice};
use crate::backend::{Device, Stream as BackendStream};
use crate::dlpack::{DLDevice, DLDeviceType, DLPackError, ImportedTensor};
use crate::error::{BackendKind, Error, Result};
use crate::on_backend;

/// The most bytes, elements or extent an array may span: DLPack describes
/// shapes and strides as signed 64-bit integers.
pub const MAX_EXTENT: u64 = i64::MAX as u64;

/// Refuses a shape whose row-major span (zero extents counted as one)
/// passes [`MAX_EXTENT`] bytes of `itemsize`-byte elements.
pub fn check_extents(shape: &[usize], itemsize: usize) -> Result<()> {
    let span = shape
        .iter()
        .try_fold(itemsize.max(1) as u64, |acc, &e| acc.checked_mul((e as u64).max(1)))
        .filter(|&b| b <= MAX_EXTENT);
    match span {
        Some(_) => Ok(()),
        None => Err(Error::Shape(ShapeError::TooLarge { shape: shape.to_vec(), elem_size: itemsize })),
    }
}

/// One extent as a caller whose integers are signed and unbounded (Python)
/// gave it: converted to `i64` where it fits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GivenExtent {
    /// An integer that fits in `i64`.
    Int(i64),
    /// An integer that does not, as its decimal text.
    Wide(String),
}

/// The extent `given` names: from 0 to [`MAX_EXTENT`], else
/// [`ShapeError::NegativeExtent`] or [`ShapeError::ExtentOutOfRange`]. A
/// shape's rank is checked where the array is made ([`new_checked_in`]).
///
/// ```
/// use gpuport::dynamic::array::{extent_from, GivenExtent};
/// assert_eq!(extent_from(GivenExtent::Int(3))?, 3);
/// assert!(extent_from(GivenExtent::Int(-1)).is_err());
/// assert!(extent_from(GivenExtent::Wide("18446744073709551616".into())).is_err());
/// # Ok::<(), gpuport::Error>(())
/// ```
pub fn extent_from(given: GivenExtent) -> Result<usize> {
    match given {
        GivenExtent::Int(value) if value < 0 => Err(ShapeError::NegativeExtent { value }.into()),
        GivenExtent::Int(value) => {
            usize::try_from(value).map_err(|_| ShapeError::ExtentOutOfRange { given: value.to_string() }.into())
        }
        GivenExtent::Wide(given) => Err(ShapeError::ExtentOutOfRange { given }.into()),
    }
}

/// An array's extents, inline (an array has at most [`MAX_RANK`] axes).
pub type Shape = SmallVec<[usize; MAX_RANK]>;

/// An array's strides in elements, inline as [`Shape`].
pub type Strides = SmallVec<[i64; MAX_RANK]>;

// ---- elements ------------------------------------------------------------------

/// The element types the Python layer stores, and the error of a kernel
/// one lacks: written by the dtype table (`src/array/dtype.rs`).
pub use crate::array::dtype::{no_kernel_for, Stored};

// ---- owned arrays ------------------------------------------------------------------

/// One `MemArray<T, N, D>` behind a run-time interface.
pub trait DynArray: Send + Sync {
    /// The element type.
    fn dtype(&self) -> DType;
    /// The extents.
    fn shape(&self) -> Shape;
    /// The device.
    fn device(&self) -> AnyDevice;
    /// Which copies are current.
    fn residency(&self) -> Residency;
    /// The id of the lock held on the array, if any.
    fn lock_id(&self) -> Option<u64>;
    /// Takes the array's lock with `id` (see `MemArray::enter`).
    fn enter(&mut self, id: u64) -> Result<()>;
    /// Releases the lock.
    fn exit(&mut self);
    /// Makes the copy at `to` current (see `MemArray::move_to`).
    fn move_to(&mut self, to: Location, s: &AnyStream, mode: Transfer, lock: Option<LockId>) -> Result<()>;
    /// Waits for the array's pending work.
    fn synchronize(&mut self) -> Result<()>;
    /// Whether an asynchronous move is still running.
    fn transfer_pending(&mut self) -> Result<bool>;
    /// Address of the copy at `loc` and an owner keeping it alive.
    fn parts(&self, loc: Location, lock: Option<LockId>) -> Result<(u64, Arc<dyn Send + Sync>)>;
    /// The DLPack device of the copy at `loc`.
    fn dl_device(&self, loc: Location) -> DLDevice;
    /// Makes `consumer` wait for the array's pending work (no host wait).
    fn order_on(&self, consumer: &AnyStream) -> Result<()>;
    /// A new array with the same contents.
    fn try_clone(&self, lock: Option<LockId>) -> Result<Box<dyn DynArray>>;
    /// Copies the elements of host-accessible `t` (same shape and dtype)
    /// into the array where its data lives, an upload enqueued on `s` when
    /// that is the device (see `MemArray::read_from_slice`).
    fn read_imported(&mut self, t: &ImportedTensor, s: &AnyStream, lock: Option<LockId>) -> Result<()>;
    /// Copies the elements of host-accessible `t` into both copies of the
    /// array, the upload enqueued on `s` (see `MemArray::upload_from_slice`).
    fn upload_imported(&mut self, t: &ImportedTensor, s: &AnyStream, lock: Option<LockId>) -> Result<()>;
    /// Runs the built-in `add_index` kernel on the array (captured on a
    /// capturing stream; see `MemArray::add_index`).
    fn add_index(&mut self, s: &AnyStream, lock: Option<LockId>) -> Result<()>;
    /// Runs `enqueue` with the address of the array's device copy, ordered
    /// on `s` as a kernel method is, or captured when `s` is capturing
    /// (then the device copy the graph uses; see
    /// `MemArray::with_device_data`).
    fn with_device_data(
        &mut self,
        what: &'static str,
        writes: bool,
        s: &AnyStream,
        enqueue: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<Option<DeviceCopyToken>>;
    /// The device copy, as a token that names it (see `MemArray::device_copy_token`).
    fn device_copy_token(&self) -> Option<DeviceCopyToken>;
    /// The lock of the array's replay link, if a graph replays its device
    /// copy (see `MemArray::order_lock`).
    fn order_lock(&self) -> Option<OrderLock>;
    /// Sets every element of the host copy (which becomes the only current
    /// one) to the element whose bytes are `value` (`itemsize` bytes, a valid
    /// value of the dtype).
    fn fill_bytes(&mut self, value: &[u8], lock: Option<LockId>) -> Result<()>;
    /// Exports of the array still alive.
    fn live_exports(&self) -> usize;
    /// Marks the copy at `loc` as the only current one (a writable export may change it).
    fn mark_written(&mut self, loc: Location, lock: Option<LockId>) -> Result<()>;
    /// Whether the device copy is managed memory (see `MemArray::is_managed`).
    fn is_managed(&self) -> bool;
    /// Enqueues on `s` moving the managed device copy toward `to` (see `MemArray::prefetch`).
    fn prefetch(&mut self, to: ManagedPlace, s: &AnyStream, lock: Option<LockId>) -> Result<()>;
    /// Gives the driver `advice` about the managed device copy (see `MemArray::advise`).
    fn advise(&mut self, advice: Advice, place: ManagedPlace, lock: Option<LockId>) -> Result<()>;
}

/// Why an imported array's `add_index` refuses a capturing stream.
const IMPORT_NOT_CAPTURED: &str =
    "add_index on an imported array waits for the kernel before returning, which a capture cannot do; capture \
    it on a gpuport array, or launch the kernel through gpuport.runtime on the import's memory";

struct Typed<T: Element, const N: usize, D: Device> {
    a: MemArray<T, N, D>,
    dtype: DType,
}

impl<T: Stored, const N: usize, D: DynDevice> Typed<T, N, D> {
    fn stream<'s>(&self, s: &'s AnyStream) -> Result<&'s BackendStream<D::B>> {
        s.of(self.a.device())
    }

    /// Runs `write` with the array and the elements of `t` as one slice.
    fn with_elements_of(
        &mut self,
        t: &ImportedTensor,
        write: impl FnOnce(&mut MemArray<T, N, D>, &[T]) -> Result<()>,
    ) -> Result<()> {
        // A tensor exported from this very array (`a.read_numpy_array(a)`)
        // would alias the host copy being written: any live export may be
        // it, so copy the source out first then.
        if t.is_contiguous() && self.a.live_exports() == 0 {
            write(&mut self.a, t.as_slice::<T>()?)
        } else {
            let v = t.to_vec::<T>()?;
            write(&mut self.a, &v)
        }
    }
}

impl<T: Stored, const N: usize, D: DynDevice + MemoryDevice> DynArray for Typed<T, N, D> {
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn shape(&self) -> Shape {
        Shape::from_slice(&self.a.shape())
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
    fn enter(&mut self, id: u64) -> Result<()> {
        self.a.enter(LockId(id))
    }
    fn exit(&mut self) {
        self.a.exit()
    }
    fn move_to(&mut self, to: Location, s: &AnyStream, mode: Transfer, lock: Option<LockId>) -> Result<()> {
        let s = self.stream(s)?;
        self.a.move_to(to, s, mode, lock)
    }
    fn synchronize(&mut self) -> Result<()> {
        self.a.synchronize()
    }
    fn transfer_pending(&mut self) -> Result<bool> {
        self.a.poll_transfer()
    }
    fn parts(&self, loc: Location, lock: Option<LockId>) -> Result<(u64, Arc<dyn Send + Sync>)> {
        let (p, keep) = match loc {
            Location::Host => self.a.host_parts(lock)?,
            Location::Device => self.a.device_parts(lock)?,
        };
        Ok((p as usize as u64, keep))
    }
    fn dl_device(&self, loc: Location) -> DLDevice {
        self.a.dl_device(loc)
    }
    fn with_device_data(
        &mut self,
        what: &'static str,
        writes: bool,
        s: &AnyStream,
        enqueue: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<Option<DeviceCopyToken>> {
        let st = self.stream(s)?.clone();
        self.a.with_device_data(what, writes, &st, None, enqueue).map(|((), captured)| captured)
    }
    fn order_on(&self, consumer: &AnyStream) -> Result<()> {
        self.a.order_stream(self.stream(consumer)?)
    }
    fn try_clone(&self, lock: Option<LockId>) -> Result<Box<dyn DynArray>> {
        Ok(Box::new(Typed { a: self.a.try_clone(lock)?, dtype: self.dtype }))
    }
    fn read_imported(&mut self, t: &ImportedTensor, s: &AnyStream, lock: Option<LockId>) -> Result<()> {
        let s = s.of(self.a.device())?;
        self.with_elements_of(t, |a, src| a.read_from_slice(src, s, lock))
    }
    fn upload_imported(&mut self, t: &ImportedTensor, s: &AnyStream, lock: Option<LockId>) -> Result<()> {
        let s = s.of(self.a.device())?;
        self.with_elements_of(t, |a, src| a.upload_from_slice(src, s, lock))
    }
    fn add_index(&mut self, s: &AnyStream, lock: Option<LockId>) -> Result<()> {
        let s = s.of(self.a.device())?;
        T::add_index(&mut self.a, s, lock)
    }
    fn order_lock(&self) -> Option<OrderLock> {
        self.a.order_lock()
    }
    fn device_copy_token(&self) -> Option<DeviceCopyToken> {
        self.a.device_copy_token()
    }
    fn fill_bytes(&mut self, value: &[u8], lock: Option<LockId>) -> Result<()> {
        let v = element_from_bytes::<T>(value, self.dtype)?;
        self.a.fill(v, lock)
    }
    fn live_exports(&self) -> usize {
        self.a.live_exports()
    }
    fn mark_written(&mut self, loc: Location, lock: Option<LockId>) -> Result<()> {
        match loc {
            Location::Host => self.a.host_ptr_mut(lock).map(drop),
            Location::Device => self.a.device_ptr_mut(lock).map(drop),
        }
    }
    fn is_managed(&self) -> bool {
        self.a.is_managed()
    }
    fn prefetch(&mut self, to: ManagedPlace, s: &AnyStream, lock: Option<LockId>) -> Result<()> {
        let s = s.of(self.a.device())?;
        self.a.prefetch(to, s, lock)
    }
    fn advise(&mut self, advice: Advice, place: ManagedPlace, lock: Option<LockId>) -> Result<()> {
        self.a.advise(advice, place, lock)
    }
}

/// The element of type `T` whose bytes are `value`, checked for size and validity.
fn element_from_bytes<T: Element>(value: &[u8], dtype: DType) -> Result<T> {
    if value.len() != std::mem::size_of::<T>() {
        return Err(Error::InvalidArgument {
            name: "value",
            reason: format!("a {} element is {} bytes, not {}", dtype.name(), std::mem::size_of::<T>(), value.len()),
        });
    }
    if !T::valid_bytes(value) {
        return Err(Error::InvalidArgument {
            name: "value",
            reason: format!(
                "bytes [{}] are not a valid {} value",
                value.iter().map(|b| format!("{b:#04x}")).collect::<Vec<_>>().join(", "),
                dtype.name()
            ),
        });
    }
    // SAFETY: `value` holds exactly `size_of::<T>()` bytes that
    // `T::valid_bytes` accepts, which the `Element` contract makes a valid
    // `T`; the read is unaligned.
    Ok(unsafe { value.as_ptr().cast::<T>().read_unaligned() })
}

fn new_typed<T: Stored, const N: usize, D: DynDevice + MemoryDevice>(
    d: &Arc<D>,
    dtype: DType,
    shape: &[usize],
    memory: ArrayMemory,
) -> Result<Box<dyn DynArray>> {
    let mut s = [0usize; N];
    s.copy_from_slice(shape);
    let a = match memory {
        ArrayMemory::Device => MemArray::<T, N, D>::zeros(d, s)?,
        ArrayMemory::Managed => MemArray::<T, N, D>::managed(d, s)?,
    };
    Ok(Box::new(Typed { a, dtype }))
}

/// The error for an array of `n` dimensions (more than `MAX_RANK`).
pub fn rank_error(n: usize) -> Error {
    Error::InvalidArgument {
        name: "shape",
        reason: format!("{n} dimensions; MemArray has 0 to {MAX_RANK} dimensions (the built-in kernels' MAX_RANK)"),
    }
}

/// A zero-filled array of any dtype, rank (0..=8) and device.
pub fn new_owned(dev: &AnyDevice, dtype: DType, shape: &[usize]) -> Result<Box<dyn DynArray>> {
    new_owned_in(dev, dtype, shape, ArrayMemory::Device)
}

/// As [`new_owned`], with the device copy's memory of kind `memory`.
pub fn new_owned_in(dev: &AnyDevice, dtype: DType, shape: &[usize], memory: ArrayMemory) -> Result<Box<dyn DynArray>> {
    on_backend!(dev, d => with_dtype!(dtype, T => with_rank!(shape.len(), N => new_typed::<T, N, _>(d, dtype, shape, memory),
        else => Err(rank_error(shape.len())))))
}

/// A zero-filled array of `shape` (checked: at most `MAX_RANK` axes, then
/// [`check_extents`]) and `dtype` on `dev`: `MemArray(shape, dtype, device)`.
pub fn new_checked(dev: &AnyDevice, dtype: DType, shape: &[usize]) -> Result<Box<dyn DynArray>> {
    new_checked_in(dev, dtype, shape, ArrayMemory::Device)
}

/// As [`new_checked`], with the device copy's memory of kind `memory`:
/// `MemArray(shape, dtype, device, memory)`.
pub fn new_checked_in(
    dev: &AnyDevice,
    dtype: DType,
    shape: &[usize],
    memory: ArrayMemory,
) -> Result<Box<dyn DynArray>> {
    if shape.len() > MAX_RANK {
        return Err(rank_error(shape.len()));
    }
    check_extents(shape, dtype.itemsize())?;
    new_owned_in(dev, dtype, shape, memory)
}

// ---- storage -----------------------------------------------------------------------

/// What a Python `MemArray` holds.
// An import keeps its shape and strides inline (no heap allocation per
// import, the point of `Shape`/`Strides`); one `AnyArray` lives in each
// Python array object, so the owned variant's unused bytes cost nothing else.
#[allow(clippy::large_enum_variant)]
pub enum AnyArray {
    /// A gpuport `MemArray`.
    Owned(Box<dyn DynArray>),
    /// Another library's memory.
    Imported(ImportedArray),
}

impl AnyArray {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            AnyArray::Owned(a) => a.dtype(),
            AnyArray::Imported(f) => f.dtype(),
        }
    }
    /// The extents.
    pub fn shape(&self) -> Shape {
        match self {
            AnyArray::Owned(a) => a.shape(),
            AnyArray::Imported(f) => f.shape().clone(),
        }
    }
    /// The device whose kernels reach the memory.
    pub fn device(&self) -> AnyDevice {
        match self {
            AnyArray::Owned(a) => a.device(),
            AnyArray::Imported(f) => f.device().clone(),
        }
    }
    /// Whether it is another library's memory ([`AnyArray::Imported`]).
    pub fn is_imported(&self) -> bool {
        matches!(self, AnyArray::Imported(_))
    }
    /// Whether it may not be written: an import its producer marked
    /// read-only (a gpuport array is always writable).
    pub fn is_read_only(&self) -> bool {
        matches!(self, AnyArray::Imported(f) if f.is_read_only())
    }
    /// The id of the lock held, if any.
    pub fn lock_id(&self) -> Option<u64> {
        match self {
            AnyArray::Owned(a) => a.lock_id(),
            AnyArray::Imported(f) => f.lock(),
        }
    }
    /// Takes the lock with `id`.
    pub fn enter(&mut self, id: u64) -> Result<()> {
        match self {
            AnyArray::Owned(a) => a.enter(id),
            AnyArray::Imported(f) => f.enter(id),
        }
    }
    /// Releases the lock.
    pub fn exit(&mut self) {
        match self {
            AnyArray::Owned(a) => a.exit(),
            AnyArray::Imported(f) => f.exit(),
        }
    }

    /// Where an export goes when the consumer does not say: the device copy
    /// of a GPU array when it is current, else the current copy.
    pub fn natural(&self) -> Location {
        match self {
            AnyArray::Owned(a) => natural_of(a.as_ref()),
            AnyArray::Imported(f) => f.location(),
        }
    }

    /// The DLPack device of the copy at `loc` (an import has one place).
    pub fn dl(&self, loc: Location) -> DLDevice {
        match self {
            AnyArray::Owned(a) => a.dl_device(loc),
            AnyArray::Imported(f) => f.dl(),
        }
    }
}

/// Where an export of `a` goes when the consumer does not say: the device
/// copy of a GPU array when it is current, else the current copy.
pub fn natural_of(a: &dyn DynArray) -> Location {
    match a.residency() {
        Residency::Host => Location::Host,
        Residency::Device => Location::Device,
        Residency::Both if a.device().backend() != BackendKind::Host => Location::Device,
        Residency::Both => Location::Host,
    }
}

/// The gpuport device whose kernels reach memory of DLPack device `dl`.
pub fn device_for_dl(dl: DLDevice) -> Result<AnyDevice> {
    let kind = match dl.device_type {
        t if crate::dlpack::is_host_memory(t) => return crate::open_kind(BackendKind::Host, 0),
        DLDeviceType::CUDA | DLDeviceType::CUDA_MANAGED => BackendKind::Cuda,
        DLDeviceType::ROCM => BackendKind::Rocm,
        other => {
            return Err(DLPackError::UnsupportedDevice { device_type: other.0, device_id: dl.device_id }.into());
        }
    };
    crate::open_kind(kind, usize::try_from(dl.device_id).unwrap_or(0))
}

impl AnyArray {
    /// Runs the built-in `add_index` kernel (each element plus its flat
    /// index) on `s`; for an import, waits for it.
    ///
    /// On a stream that is capturing a graph, the kernel is captured (an
    /// owned array only, whose device copy is current; see
    /// `MemArray::add_index`), and the result is the device copy the graph
    /// writes. Each replay of the graph is ordered with the array's work by
    /// the core (`AnyGraphExec::launch`). `None` otherwise.
    pub fn add_index(&mut self, s: &AnyStream, lock: Option<LockId>) -> Result<Option<DeviceCopyToken>> {
        let dtype = self.dtype();
        if !dtype.has_kernels() {
            return Err(no_kernel_for("add_index", dtype.name(), self.device().backend()));
        }
        match self {
            AnyArray::Owned(a) => {
                // No replay runs in between (`order.rs`), and the capture
                // state asked after the kernel is the one it saw (`gate.rs`).
                let _order = hold_in_order(a.order_lock());
                let _section = s.capture_section();
                a.add_index(s, lock)?;
                let captured = s.capture_status().is_ok_and(|c| c.is_capturing());
                Ok(if captured { a.device_copy_token() } else { None })
            }
            AnyArray::Imported(f) => {
                s.refuse_in_capture("add_index", IMPORT_NOT_CAPTURED)?;
                f.check_lock("add_index", lock.map(|l| l.0))?;
                f.add_index_imported(s).map(|()| None)
            }
        }
    }

    /// Runs `enqueue` with the address of the array's data on its device,
    /// for work another module enqueues on `s` (a collective): an owned
    /// array moves to the device first and records the work as its pending
    /// work, as its kernel methods do; an import gives its memory when it
    /// is the device's own (the caller keeps the import alive until `s`
    /// has run the work). `writes`: the work writes the data. On a
    /// capturing `s` an owned array's work is captured (its replays are
    /// ordered with the array by `AnyGraphExec::launch`) and its device copy
    /// returned; `None` otherwise.
    pub(crate) fn with_device_data(
        &mut self,
        what: &'static str,
        writes: bool,
        s: &AnyStream,
        enqueue: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<Option<DeviceCopyToken>> {
        match self {
            AnyArray::Owned(a) => a.with_device_data(what, writes, s, enqueue),
            AnyArray::Imported(f) => {
                f.check_usable(what, writes)?;
                let (dl, dev) = (f.dl(), f.device());
                let own = match dev.backend() {
                    BackendKind::Host => dl.device_type == crate::dlpack::ffi::DLDeviceType::CPU,
                    b => dl == crate::dlpack::dl_device(b, crate::backend::MemoryKind::Device, dev.info().ordinal),
                };
                if !own {
                    return Err(Error::InvalidArgument {
                        name: "array",
                        reason: format!(
                            "{what} needs the memory of {}; the import's memory is DLPack device {:?}",
                            dev.info().spec(),
                            dl
                        ),
                    });
                }
                // An import's memory is its producer's: the caller keeps the
                // array (and so the memory) alive for the stream or graph.
                enqueue(f.data()).map(|()| None)
            }
        }
    }

    /// [`with_device_data`](Self::with_device_data) of a send and a
    /// receive operand at once, for one collective: `enqueue` gets both
    /// addresses. Graph replays of either array wait for both steps
    /// (their orders are taken together, `src/backend/order.rs`).
    pub(crate) fn with_device_data_pair(
        send: &mut AnyArray,
        recv: &mut AnyArray,
        what: &'static str,
        s: &AnyStream,
        enqueue: &mut dyn FnMut(u64, u64) -> Result<()>,
    ) -> Result<(Option<DeviceCopyToken>, Option<DeviceCopyToken>)> {
        let _order = hold_in_order(send.order_lock().into_iter().chain(recv.order_lock()));
        let mut recv_used = None;
        let send_used = send.with_device_data(what, false, s, &mut |sp| {
            recv_used = recv.with_device_data(what, true, s, &mut |rp| enqueue(sp, rp))?;
            Ok(())
        })?;
        Ok((send_used, recv_used))
    }

    /// The lock of the array's replay link (`None` for an import, or an
    /// array no graph replays).
    fn order_lock(&self) -> Option<OrderLock> {
        match self {
            AnyArray::Owned(a) => a.order_lock(),
            AnyArray::Imported(_) => None,
        }
    }

    /// Sets every element to the one whose bytes are `value` (the dtype's
    /// `itemsize` bytes, a valid value): the host copy of an owned array,
    /// which becomes the only current one. An import is filled in its
    /// producer library (a typed `InvalidArgument` here).
    pub fn fill_bytes(&mut self, value: &[u8], lock: Option<LockId>) -> Result<()> {
        match self {
            AnyArray::Owned(a) => a.fill_bytes(value, lock),
            AnyArray::Imported(_) => Err(Error::InvalidArgument {
                name: "array",
                reason: "fill of an imported array: fill it in its producer library".into(),
            }),
        }
    }

    /// Whether an asynchronous move is still running (never, for an import);
    /// one that is done is forgotten (see `MemArray::poll_transfer`).
    pub fn transfer_pending(&mut self) -> Result<bool> {
        match self {
            AnyArray::Owned(a) => a.transfer_pending(),
            AnyArray::Imported(_) => Ok(false),
        }
    }

    /// Waits for the array's pending work (an import has none of gpuport's).
    pub fn synchronize(&mut self) -> Result<()> {
        match self {
            AnyArray::Owned(a) => a.synchronize(),
            AnyArray::Imported(_) => Ok(()),
        }
    }

    /// Exports (or other owners) of the array's memory still alive.
    pub fn live_exports(&self) -> usize {
        match self {
            AnyArray::Owned(a) => a.live_exports(),
            AnyArray::Imported(f) => f.other_owners(),
        }
    }
}

/// The memory of an array's device copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArrayMemory {
    /// From the device's current resource (`MemArray::zeros`).
    #[default]
    Device,
    /// Managed (unified) memory, which host and device both reach
    /// (`MemArray::managed`); [`Error::Unsupported`] on a device without it.
    Managed,
}

impl ArrayMemory {
    /// Every kind, in the order the names are listed.
    pub const ALL: [ArrayMemory; 2] = [ArrayMemory::Device, ArrayMemory::Managed];

    /// The name a caller passes (`"device"`, `"managed"`).
    pub fn name(self) -> &'static str {
        match self {
            ArrayMemory::Device => "device",
            ArrayMemory::Managed => "managed",
        }
    }

    /// The kind named `name`; [`Error::InvalidArgument`], listing the
    /// names, for any other.
    pub fn named(name: &str) -> Result<ArrayMemory> {
        ArrayMemory::ALL.into_iter().find(|m| m.name() == name).ok_or_else(|| {
            let names: Vec<String> = ArrayMemory::ALL.iter().map(|m| format!("'{}'", m.name())).collect();
            Error::InvalidArgument {
                name: "memory",
                reason: format!("unknown memory '{name}'; one of {}", names.join(", ")),
            }
        })
    }
}
