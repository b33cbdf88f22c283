//! Strided views (docs/design.md#strided-views): host, device and managed windows of memory
//! with extents and element strides, and their DLPack form.
//!
//! [`View::to_dlpack`] returns a [`DLPackTensor`] that owns the shape and
//! stride arrays inline (no heap allocation). Its [`DLTensorRef`] borrows
//! the wrapper, so the two misuses docs/design.md#strided-views names do not compile:
//!
//! ```compile_fail
//! # use gpuport::array::View;
//! let data = [0f32; 6];
//! let v = View::from_slice(&data, [2, 3]).unwrap();
//! let t = v.to_dlpack().unwrap().tensor(); // the wrapper is a temporary
//! assert_eq!(t.ndim(), 2);
//! ```
//!
//! ```compile_fail
//! # use gpuport::array::View;
//! fn shape(v: &View<'_, f32, 2>) -> &[i64] {
//!     let dl = v.to_dlpack().unwrap();
//!     dl.tensor().shape() // would dangle once `dl` is dropped
//! }
//! ```
//! (`tests/ui/` proves both with trybuild, with the exact compiler errors.)

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use super::{checked_len, row_major_strides, to_isize, Element, LockId, MemArray, ShapeError};
use crate::backend::{address_to_usize, Device, DeviceMemory, MemoryKind};
use crate::dlpack::ffi::{DLDataType, DLDevice, DLDeviceType, DLTensor};
use crate::dlpack::{dl_device, DLPackError, ExportSource, ManagedTensor, ManagedTensorVersioned};
use crate::error::{BackendKind, Result};

mod sealed {
    pub trait Sealed {}
}

/// The memory space a [`View`] points into; decides what the host may do
/// with it and which DLPack device types it accepts.
pub trait Space: sealed::Sealed + Copy + Send + Sync + fmt::Debug + 'static {
    /// A name for messages.
    const NAME: &'static str;
    /// Whether a backend buffer of `kind` belongs to this space.
    fn accepts(kind: MemoryKind) -> bool;
    /// Whether memory of this DLPack device type belongs to this space.
    fn accepts_dl(device_type: DLDeviceType) -> bool;
}

/// Host memory: ordinary or pinned. Elements can be read safely.
#[derive(Debug, Clone, Copy)]
pub struct HostSpace;
/// Device memory: addresses only the device (or its kernels) may use.
#[derive(Debug, Clone, Copy)]
pub struct DeviceSpace;
/// Managed (unified) memory, reachable from host and device.
#[derive(Debug, Clone, Copy)]
pub struct ManagedSpace;

impl sealed::Sealed for HostSpace {}
impl sealed::Sealed for DeviceSpace {}
impl sealed::Sealed for ManagedSpace {}

impl Space for HostSpace {
    const NAME: &'static str = "host";
    fn accepts(kind: MemoryKind) -> bool {
        matches!(kind, MemoryKind::Host | MemoryKind::Pinned)
    }
    fn accepts_dl(t: DLDeviceType) -> bool {
        crate::dlpack::is_host_memory(t)
    }
}

impl Space for DeviceSpace {
    const NAME: &'static str = "device";
    fn accepts(kind: MemoryKind) -> bool {
        // The host backend's device memory is host memory (kind `Host`).
        matches!(kind, MemoryKind::Device | MemoryKind::Host)
    }
    fn accepts_dl(t: DLDeviceType) -> bool {
        matches!(t, DLDeviceType::CUDA | DLDeviceType::ROCM)
    }
}

impl Space for ManagedSpace {
    const NAME: &'static str = "managed";
    fn accepts(kind: MemoryKind) -> bool {
        kind == MemoryKind::Managed
    }
    fn accepts_dl(t: DLDeviceType) -> bool {
        t == DLDeviceType::CUDA_MANAGED
    }
}

/// A strided `N`-dimensional window of `T`s in memory space `S`, borrowed
/// for `'a`.
///
/// # Invariants
/// - `ptr` is the address of element `[0, .., 0]` in `S`'s address space;
///   element `i` is at `ptr + Σ i[k] * strides[k]` (strides in elements,
///   possibly negative or zero).
/// - Every reachable element's offset from `ptr`, in bytes, fits in `isize`.
/// - For `HostSpace`, every reachable element is readable host memory
///   holding a valid `T` for `'a`, not written by anyone while the view
///   exists (views from slices and `MemArray`s borrow them).
/// - `keep`, if set, owns the memory (for managed-tensor export).
pub struct View<'a, T: Element, const N: usize, S: Space = HostSpace> {
    ptr: *const T,
    extents: [usize; N],
    strides: [isize; N],
    device: DLDevice,
    keep: Option<Arc<dyn Send + Sync>>,
    _marker: PhantomData<(&'a [T], S)>,
}

// SAFETY: a view is a shared borrow of `T`s (`&'a [T]`), which is `Send`
// and `Sync` for `T: Sync`; `keep` is `Send + Sync`.
unsafe impl<T: Element, const N: usize, S: Space> Send for View<'_, T, N, S> {}
// SAFETY: as above.
unsafe impl<T: Element, const N: usize, S: Space> Sync for View<'_, T, N, S> {}

impl<T: Element, const N: usize, S: Space> Clone for View<'_, T, N, S> {
    fn clone(&self) -> Self {
        View {
            ptr: self.ptr,
            extents: self.extents,
            strides: self.strides,
            device: self.device,
            keep: self.keep.clone(),
            _marker: PhantomData,
        }
    }
}

impl<T: Element, const N: usize, S: Space> fmt::Debug for View<'_, T, N, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View")
            .field("space", &S::NAME)
            .field("ptr", &self.ptr)
            .field("extents", &self.extents)
            .field("strides", &self.strides)
            .field("device", &self.device)
            .finish()
    }
}

/// Lowest and highest element offsets a layout reaches, checked to fit in
/// `isize` bytes. `None` for a layout with no element.
fn span<const N: usize>(
    extents: &[usize; N],
    strides: &[isize; N],
    elem_size: usize,
) -> std::result::Result<Option<(isize, isize)>, ShapeError> {
    if extents.contains(&0) {
        return Ok(None);
    }
    let (mut lo, mut hi) = (0i128, 0i128);
    for axis in 0..N {
        let reach = (extents[axis] as i128 - 1) * strides[axis] as i128;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    let max = isize::MAX as i128;
    let size = elem_size.max(1) as i128;
    if lo * size < -max || (hi + 1) * size > max || checked_count(extents).is_none_or(|n| n * size > max) {
        return Err(ShapeError::OutOfRange {
            extents: extents.to_vec(),
            strides: strides.to_vec(),
            reason: "reaches offsets that do not fit in isize bytes".into(),
        });
    }
    Ok(Some((lo as isize, hi as isize)))
}

fn checked_count(extents: &[usize]) -> Option<i128> {
    extents.iter().try_fold(1i128, |acc, &e| acc.checked_mul(e as i128))
}

impl<'a, T: Element, const N: usize> View<'a, T, N, HostSpace> {
    /// A compact row-major view of the first `product(extents)` elements of `data`.
    pub fn from_slice(data: &'a [T], extents: [usize; N]) -> Result<Self> {
        Self::from_slice_strided(data, extents, row_major_strides(&extents))
    }

    /// A compact column-major view (first axis contiguous) of `data`.
    pub fn column_major(data: &'a [T], extents: [usize; N]) -> Result<Self> {
        let mut strides = [0isize; N];
        let mut s: isize = 1;
        for axis in 0..N {
            strides[axis] = s;
            s = s.wrapping_mul(to_isize(extents[axis]));
        }
        Self::from_slice_strided(data, extents, strides)
    }

    /// A view of `data` with arbitrary element strides; every reachable
    /// element must lie inside `data`.
    pub fn from_slice_strided(data: &'a [T], extents: [usize; N], strides: [isize; N]) -> Result<Self> {
        if let Some((lo, hi)) = span(&extents, &strides, std::mem::size_of::<T>())? {
            if lo < 0 || usize::try_from(hi).map_or(true, |hi| hi >= data.len()) {
                return Err(ShapeError::OutOfRange {
                    extents: extents.to_vec(),
                    strides: strides.to_vec(),
                    reason: format!("reaches elements {lo}..={hi}, outside a slice of {} elements", data.len()),
                }
                .into());
            }
        }
        Ok(View {
            ptr: data.as_ptr(),
            extents,
            strides,
            device: dl_device(BackendKind::Host, MemoryKind::Host, 0),
            keep: None,
            _marker: PhantomData,
        })
    }

    /// The element at `index`, or `None` if out of bounds.
    pub fn get(&self, index: [usize; N]) -> Option<T> {
        let off = self.offset_of(index)?;
        // SAFETY: in bounds, so the element is reachable; the invariants make
        // it readable host memory holding a valid `T`.
        Some(unsafe { *self.ptr.offset(off) })
    }

    /// The elements in row-major order of the view's indices.
    pub fn to_vec(&self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.len());
        self.for_each_offset(|off| {
            // SAFETY: as in `get`.
            out.push(unsafe { *self.ptr.offset(off) })
        });
        out
    }
}

impl<'a, T: Element, const N: usize, S: Space> View<'a, T, N, S> {
    /// A view of raw memory.
    ///
    /// # Safety
    /// - every element the layout reaches from `ptr` lies in memory of space
    ///   `S` described by `device`, alive and not freed for `'a`;
    /// - for `HostSpace`: that memory holds valid `T`s and nobody writes it
    ///   during `'a`.
    pub unsafe fn from_raw_parts(
        ptr: *const T,
        extents: [usize; N],
        strides: [isize; N],
        device: DLDevice,
    ) -> Result<Self> {
        span(&extents, &strides, std::mem::size_of::<T>())?;
        Ok(View { ptr, extents, strides, device, keep: None, _marker: PhantomData })
    }

    /// A view of a backend buffer of `backend`, whose memory kind must
    /// belong to `S` (e.g. `Managed` for `ManagedSpace`), reaching only
    /// inside the buffer.
    pub fn from_buffer<M: DeviceMemory>(
        buffer: &'a M,
        backend: BackendKind,
        extents: [usize; N],
        strides: [isize; N],
    ) -> Result<Self> {
        if !S::accepts(buffer.kind()) {
            return Err(ShapeError::OutOfRange {
                extents: extents.to_vec(),
                strides: strides.to_vec(),
                reason: format!("was asked of a {:?} buffer, which is not {} memory", buffer.kind(), S::NAME),
            }
            .into());
        }
        let elems = buffer.len() / std::mem::size_of::<T>().max(1);
        if let Some((lo, hi)) = span(&extents, &strides, std::mem::size_of::<T>())? {
            if lo < 0 || usize::try_from(hi).map_or(true, |hi| hi >= elems) {
                return Err(ShapeError::OutOfRange {
                    extents: extents.to_vec(),
                    strides: strides.to_vec(),
                    reason: format!("reaches elements {lo}..={hi}, outside a buffer of {elems} elements"),
                }
                .into());
            }
        }
        Ok(View {
            ptr: address_to_usize(buffer.device_ptr()) as *const T,
            extents,
            strides,
            device: dl_device(backend, buffer.kind(), buffer.ordinal()),
            keep: None,
            _marker: PhantomData,
        })
    }

    /// The extents.
    pub fn extents(&self) -> [usize; N] {
        self.extents
    }

    /// The strides, in elements.
    pub fn strides(&self) -> [isize; N] {
        self.strides
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        if self.is_empty() {
            // Extents of an empty view are unchecked and may overflow a product.
            return 0;
        }
        // Fits: checked by `span` at construction.
        self.extents.iter().product()
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.extents.contains(&0)
    }

    /// The DLPack device of the memory.
    pub fn dl_device(&self) -> DLDevice {
        self.device
    }

    /// The address of element `[0, .., 0]` in the view's address space.
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// Whether the layout is compact row-major (axes of extent <= 1 ignored).
    pub fn is_row_major(&self) -> bool {
        let mut expect = 1isize;
        for axis in (0..N).rev() {
            if self.extents[axis] > 1 && self.strides[axis] != expect {
                return false;
            }
            expect = expect.wrapping_mul(to_isize(self.extents[axis]));
        }
        true
    }

    /// Whether the layout is compact column-major (axes of extent <= 1 ignored).
    pub fn is_column_major(&self) -> bool {
        let mut expect = 1isize;
        for axis in 0..N {
            if self.extents[axis] > 1 && self.strides[axis] != expect {
                return false;
            }
            expect = expect.wrapping_mul(to_isize(self.extents[axis]));
        }
        true
    }

    /// The element offset of `index` from `as_ptr()`, or `None` if out of bounds.
    pub fn offset_of(&self, index: [usize; N]) -> Option<isize> {
        let mut off = 0isize;
        for ((&i, &extent), &stride) in index.iter().zip(&self.extents).zip(&self.strides) {
            if i >= extent {
                return None;
            }
            // No overflow: the span check bounds every reachable offset.
            off += to_isize(i) * stride;
        }
        Some(off)
    }

    /// Calls `f` with the offset of every element, in row-major index order.
    fn for_each_offset(&self, mut f: impl FnMut(isize)) {
        if self.is_empty() {
            return;
        }
        let mut idx = [0usize; N];
        loop {
            let off: isize = (0..N).map(|a| to_isize(idx[a]) * self.strides[a]).sum();
            f(off);
            let mut axis = N;
            loop {
                if axis == 0 {
                    return;
                }
                axis -= 1;
                idx[axis] += 1;
                if idx[axis] < self.extents[axis] {
                    break;
                }
                idx[axis] = 0;
            }
        }
    }

    fn check_axis(op: &'static str, axis: usize) -> Result<()> {
        if axis >= N {
            return Err(ShapeError::InvalidSlice { op, axis, reason: format!("the view has {N} axes (0..{N})") }.into());
        }
        Ok(())
    }

    /// The sub-view `ranges[k]` along each axis `k`.
    pub fn slice(&self, ranges: [Range<usize>; N]) -> Result<Self> {
        let mut out = self.clone();
        let mut off = 0isize;
        for (axis, r) in ranges.iter().enumerate() {
            if r.start > r.end || r.end > self.extents[axis] {
                return Err(ShapeError::InvalidSlice {
                    op: "slice",
                    axis,
                    reason: format!(
                        "range {}..{} is not within 0..{} with start <= end",
                        r.start, r.end, self.extents[axis]
                    ),
                }
                .into());
            }
            out.extents[axis] = r.end - r.start;
            if r.start < self.extents[axis] {
                off += to_isize(r.start) * self.strides[axis];
            }
        }
        if !out.is_empty() {
            out.ptr = self.ptr.wrapping_offset(off);
        }
        Ok(out)
    }

    /// Every `step`-th element along `axis` (step >= 1).
    pub fn step(&self, axis: usize, step: usize) -> Result<Self> {
        Self::check_axis("step", axis)?;
        let bad = |reason: String| ShapeError::InvalidSlice { op: "step", axis, reason };
        if step == 0 {
            return Err(bad("step 0 is not allowed; steps are >= 1".into()).into());
        }
        let stride = isize::try_from(step)
            .ok()
            .and_then(|s| s.checked_mul(self.strides[axis]))
            .ok_or_else(|| bad(format!("step {step} times stride {} overflows isize", self.strides[axis])))?;
        let mut out = self.clone();
        out.extents[axis] = self.extents[axis].div_ceil(step);
        out.strides[axis] = stride;
        Ok(out)
    }

    /// The axes reordered: axis `k` of the result is axis `axes[k]` of `self`.
    pub fn permute(&self, axes: [usize; N]) -> Result<Self> {
        let mut seen = [false; N];
        for (k, &a) in axes.iter().enumerate() {
            if a >= N || seen[a] {
                return Err(ShapeError::InvalidSlice {
                    op: "permute",
                    axis: k,
                    reason: format!("{axes:?} is not a permutation of 0..{N}"),
                }
                .into());
            }
            seen[a] = true;
        }
        let mut out = self.clone();
        for (k, &a) in axes.iter().enumerate() {
            out.extents[k] = self.extents[a];
            out.strides[k] = self.strides[a];
        }
        Ok(out)
    }

    /// The axes in reverse order (a row-major view becomes column-major).
    pub fn transpose(&self) -> Self {
        let mut out = self.clone();
        out.extents.reverse();
        out.strides.reverse();
        out
    }

    /// The view with `axis` reversed (a negative stride).
    pub fn flip(&self, axis: usize) -> Result<Self> {
        Self::check_axis("flip", axis)?;
        let mut out = self.clone();
        if self.extents[axis] > 0 {
            out.ptr = self.ptr.wrapping_offset((to_isize(self.extents[axis]) - 1) * self.strides[axis]);
        }
        out.strides[axis] = -self.strides[axis];
        Ok(out)
    }

    /// Whether the host can read every element's bytes as valid `T`s
    /// (always for numbers; `bool` needs 0 or 1). Host-accessible only.
    pub(crate) fn values_valid(&self) -> bool {
        let mut ok = true;
        self.for_each_offset(|off| {
            // SAFETY: called for host-accessible views only, where every
            // reachable element is readable; read as bytes, not as `T`.
            let bytes =
                unsafe { std::slice::from_raw_parts(self.ptr.offset(off).cast::<u8>(), std::mem::size_of::<T>()) };
            ok &= T::valid_bytes(bytes);
        });
        ok
    }

    /// A non-owning DLPack description of this view. The wrapper holds the
    /// shape and strides inline (no heap allocation); an extent or stride
    /// that does not fit in `i64` is an error. The data pointer is null for
    /// an empty view; `byte_offset` is 0.
    pub fn to_dlpack(&self) -> Result<DLPackTensor<'a, N>> {
        let mut shape = [0i64; N];
        let mut strides = [0i64; N];
        for axis in 0..N {
            shape[axis] = i64::try_from(self.extents[axis]).map_err(|_| ShapeError::NotI64 {
                what: "extent",
                axis,
                value: self.extents[axis] as i128,
            })?;
            strides[axis] = i64::try_from(self.strides[axis]).map_err(|_| ShapeError::NotI64 {
                what: "stride",
                axis,
                value: self.strides[axis] as i128,
            })?;
        }
        let data = if self.is_empty() { std::ptr::null_mut() } else { self.ptr as *mut c_void };
        Ok(DLPackTensor { data, device: self.device, dtype: T::DTYPE, shape, strides, _borrow: PhantomData })
    }

    fn export_source(&self) -> Result<ExportSource> {
        let keep = self.keep.clone().ok_or(DLPackError::NoOwner)?;
        let dl = self.to_dlpack()?;
        // SAFETY: `keep` owns the memory the view points into (it came from
        // the `MemArray` the view borrows), so every reachable element stays
        // valid while the export holds it.
        Ok(unsafe { ExportSource::new(dl.data, dl.device, dl.dtype, &dl.shape, &dl.strides, 0, keep) })
    }

    /// Exports the view as an owning legacy managed tensor that keeps the
    /// `MemArray`'s memory alive until the consumer's deleter call. Views of
    /// slices or raw memory have no owner to keep: [`DLPackError::NoOwner`].
    /// Sub-byte element types (fp6, fp4) need a versioned tensor to say
    /// they are padded ([`DLPackError::SubByteLayout`]).
    pub fn to_managed(&self) -> Result<ManagedTensor> {
        self.export_source()?.into_legacy()
    }

    /// As [`to_managed`](Self::to_managed), versioned, optionally marked read-only.
    pub fn to_managed_versioned(&self, read_only: bool) -> Result<ManagedTensorVersioned> {
        let flags = if read_only { crate::dlpack::ffi::DLPACK_FLAG_BITMASK_READ_ONLY } else { 0 };
        Ok(self.export_source()?.into_versioned(flags))
    }
}

impl<T: Element, const N: usize, D: Device> MemArray<T, N, D> {
    /// A row-major view of the host copy (which must be current), borrowing
    /// the array.
    pub fn host_view(&self, lock: Option<LockId>) -> Result<View<'_, T, N, HostSpace>> {
        let (ptr, keep) = self.host_parts(lock)?;
        let shape = self.shape();
        checked_len(&shape, std::mem::size_of::<T>())?;
        Ok(View {
            ptr,
            extents: shape,
            strides: row_major_strides(&shape),
            device: dl_device(BackendKind::Host, MemoryKind::Host, 0),
            keep: Some(keep),
            _marker: PhantomData,
        })
    }

    /// A row-major view of the device copy (which must be current),
    /// borrowing the array. Its DLPack device is where the memory really is.
    pub fn device_view(&self, lock: Option<LockId>) -> Result<View<'_, T, N, DeviceSpace>> {
        let (ptr, keep) = self.device_parts(lock)?;
        let shape = self.shape();
        Ok(View {
            ptr,
            extents: shape,
            strides: row_major_strides(&shape),
            device: self.dl_device(super::Location::Device),
            keep: Some(keep),
            _marker: PhantomData,
        })
    }
}

/// A non-owning DLPack tensor description that owns its shape and stride
/// arrays inline (no heap). Borrows the viewed memory for `'a`; hand out the
/// `DLTensor` with [`tensor`](Self::tensor), which borrows this wrapper.
#[derive(Debug, Clone, Copy)]
pub struct DLPackTensor<'a, const N: usize> {
    data: *mut c_void,
    device: DLDevice,
    dtype: DLDataType,
    shape: [i64; N],
    strides: [i64; N],
    _borrow: PhantomData<&'a ()>,
}

impl<const N: usize> DLPackTensor<'_, N> {
    /// The `DLTensor`, valid while this wrapper is alive and not moved: its
    /// shape and stride pointers point into the wrapper.
    pub fn tensor(&self) -> DLTensorRef<'_> {
        let ptr_or_null = |a: &[i64; N]| if N == 0 { std::ptr::null_mut() } else { a.as_ptr() as *mut i64 };
        DLTensorRef {
            raw: DLTensor {
                data: self.data,
                device: self.device,
                // N is a small const rank; DLPack ranks are `int`.
                #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
                ndim: N as i32,
                dtype: self.dtype,
                shape: ptr_or_null(&self.shape),
                strides: ptr_or_null(&self.strides),
                byte_offset: 0,
            },
            _borrow: PhantomData,
        }
    }

    /// The extents.
    pub fn shape(&self) -> &[i64; N] {
        &self.shape
    }

    /// The strides in elements.
    pub fn strides(&self) -> &[i64; N] {
        &self.strides
    }
}

/// A `DLTensor` borrowing the [`DLPackTensor`] that owns its shape and
/// strides for `'w`. Its accessors return borrows for `'w`, so the tensor
/// and anything taken from it cannot outlive the wrapper.
#[derive(Debug)]
pub struct DLTensorRef<'w> {
    raw: DLTensor,
    _borrow: PhantomData<&'w ()>,
}

impl<'w> DLTensorRef<'w> {
    /// The data pointer (null for an empty tensor).
    pub fn data(&self) -> *mut c_void {
        self.raw.data
    }

    /// The device.
    pub fn device(&self) -> DLDevice {
        self.raw.device
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> i32 {
        self.raw.ndim
    }

    /// The element type.
    pub fn dtype(&self) -> DLDataType {
        self.raw.dtype
    }

    /// The extents, borrowed from the wrapper.
    pub fn shape(&self) -> &'w [i64] {
        if self.raw.shape.is_null() {
            return &[];
        }
        // SAFETY: `shape` points to `ndim` extents inside the wrapper, which
        // is borrowed for `'w`.
        unsafe { std::slice::from_raw_parts(self.raw.shape, usize::try_from(self.raw.ndim).unwrap_or(0)) }
    }

    /// The strides, borrowed from the wrapper.
    pub fn strides(&self) -> &'w [i64] {
        if self.raw.strides.is_null() {
            return &[];
        }
        // SAFETY: as in `shape`.
        unsafe { std::slice::from_raw_parts(self.raw.strides, usize::try_from(self.raw.ndim).unwrap_or(0)) }
    }

    /// The byte offset (always 0 for views).
    pub fn byte_offset(&self) -> u64 {
        self.raw.byte_offset
    }

    /// A pointer to the C struct, for passing to C functions during the
    /// borrow. It points into `self`; consumers must not write through it
    /// or its shape/strides, nor keep it past `self`.
    pub fn as_raw(&self) -> *const DLTensor {
        &self.raw
    }
}
