//! Export: arrays and views as owning DLPack managed tensors.
//!
//! The manager context is one heap block holding the managed tensor struct
//! itself, the shape and stride arrays it points into, and an `Arc` of the
//! storage. The consumer's single call of the deleter frees the block; the
//! storage is freed when its last `Arc` goes, so it outlives the Rust owner
//! as long as the consumer holds the tensor.

use std::alloc::{alloc, handle_alloc_error, Layout};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{addr_of_mut, NonNull};
use std::sync::Arc;

use smallvec::SmallVec;

use super::ffi::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
};
use super::DLPackError;
use crate::array::element::{dtype_is_subbyte, dtype_name};
use crate::array::{Element, ExportOptions, Location, LockId, MemArray};
use crate::backend::Device;
use crate::error::Result;

/// Shape and strides side by side, inline up to rank 8 (so the manager
/// context is one heap block then).
pub(crate) type Dims = SmallVec<[i64; 16]>;

/// Everything a managed tensor describes, plus the owner of its memory.
pub struct ExportSource {
    data: *mut c_void,
    device: DLDevice,
    dtype: DLDataType,
    /// The rank: `dims` holds the shape, then as many strides.
    ndim: usize,
    dims: Dims,
    byte_offset: u64,
    /// Owns the memory; held (never read) so that dropping the export frees it.
    _keep: Arc<dyn Send + Sync>,
}

impl std::fmt::Debug for ExportSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportSource")
            .field("data", &self.data)
            .field("device", &self.device)
            .field("dtype", &self.dtype)
            .field("shape", &&self.dims[..self.ndim])
            .field("strides", &&self.dims[self.ndim..])
            .field("byte_offset", &self.byte_offset)
            .finish()
    }
}

impl ExportSource {
    /// Describes memory that `keep` owns, for export.
    ///
    /// # Safety
    /// - `shape.len() == strides.len()` and fits in `i32`;
    /// - while `keep` is alive, `data + byte_offset` addresses every element
    ///   the shape and strides (in elements of `dtype`) reach, in the memory
    ///   `device` describes (or `data` is null and the shape has no element);
    /// - that memory may be read and written by the consumer (unless the
    ///   export is marked read-only).
    pub unsafe fn new(
        data: *mut c_void,
        device: DLDevice,
        dtype: DLDataType,
        shape: &[i64],
        strides: &[i64],
        byte_offset: u64,
        keep: Arc<dyn Send + Sync>,
    ) -> Self {
        debug_assert_eq!(shape.len(), strides.len());
        let dims: Dims = shape.iter().chain(strides).copied().collect();
        // SAFETY: forwarded contract; `dims` is the shape, then the strides.
        unsafe { Self::from_dims(data, device, dtype, shape.len(), dims, byte_offset, keep) }
    }

    /// [`ExportSource::new`] with the shape and strides already side by side
    /// in `dims` (`ndim` of each).
    ///
    /// # Safety
    /// As for [`ExportSource::new`], with `dims.len() == 2 * ndim`.
    #[inline]
    pub(crate) unsafe fn from_dims(
        data: *mut c_void,
        device: DLDevice,
        dtype: DLDataType,
        ndim: usize,
        dims: Dims,
        byte_offset: u64,
        keep: Arc<dyn Send + Sync>,
    ) -> Self {
        debug_assert_eq!(dims.len(), 2 * ndim);
        ExportSource { data, device, dtype, ndim, dims, byte_offset, _keep: keep }
    }

    /// The tensor, whose shape and strides point into `self.dims`: called
    /// only once `self` is in the manager context's heap block, where it
    /// stays until the deleter frees it (inline dims move with `self`).
    fn tensor(&mut self) -> DLTensor {
        let ndim = self.ndim;
        let base = self.dims.as_mut_ptr();
        DLTensor {
            data: self.data,
            device: self.device,
            // Fits: guaranteed by `new`'s contract (ranks are const generics).
            #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
            ndim: ndim as i32,
            dtype: self.dtype,
            shape: if ndim == 0 { std::ptr::null_mut() } else { base },
            // SAFETY: `dims` holds `2 * ndim` elements, so `base + ndim` is
            // within it.
            strides: if ndim == 0 { std::ptr::null_mut() } else { unsafe { base.add(ndim) } },
            byte_offset: self.byte_offset,
        }
    }

    /// The error of a legacy export of a sub-byte `dtype`.
    pub(crate) fn refuse_legacy<R>(dtype: DLDataType) -> Result<R> {
        Err(DLPackError::SubByteLayout {
            dtype: dtype_name(dtype),
            problem: "a legacy (unversioned) DLPack tensor has no flag to say its elements are padded",
        }
        .into())
    }

    /// Packs this into a legacy managed tensor. Refused for sub-byte element
    /// types (fp6, fp4): a legacy tensor has no flags, so a consumer would
    /// read gpuport's padded elements as packed
    /// ([`DLPackError::SubByteLayout`]).
    pub fn into_legacy(self) -> Result<ManagedTensor> {
        if dtype_is_subbyte(self.dtype) {
            return Self::refuse_legacy(self.dtype);
        }
        let ctx = Box::into_raw(Box::new(LegacyCtx {
            managed: DLManagedTensor { dl_tensor: null_tensor(), manager_ctx: std::ptr::null_mut(), deleter: None },
            source: self,
        }));
        // SAFETY: `ctx` is a live, unique heap block; the tensor's pointers
        // go into the block's own `dims` (inline, or its heap buffer), which
        // stay in place until the deleter frees the block.
        unsafe {
            (*ctx).managed.dl_tensor = (*ctx).source.tensor();
            (*ctx).managed.manager_ctx = ctx.cast::<c_void>();
            (*ctx).managed.deleter = Some(legacy_deleter);
            Ok(ManagedTensor { ptr: NonNull::new_unchecked(std::ptr::addr_of_mut!((*ctx).managed)) })
        }
    }

    /// A versioned managed tensor with `flags` that states version
    /// `1.minor` (at most the version gpuport speaks), built straight in its
    /// manager context: the scalar fields are written into the heap block
    /// and `fill` pushes the shape, then the strides (`ndim` of each), into
    /// the block's own `dims`. Nothing the size of an `ExportSource` (about
    /// 200 bytes with inline dims) is moved: on the exchange table's export
    /// those moves were a fifth of the time (perf, 2026-11-24; `git log -p BENCHMARKS.md`).
    ///
    /// A dtype code newer than `1.minor` (the fp8/fp6/fp4 codes of DLPack
    /// 1.1) raises the stated minor version to the one that defines it:
    /// minor versions share one ABI and a consumer checks the codes it
    /// reads, so a 1.0 consumer (PyTorch asks with `max_version=(1, 0)`)
    /// that knows the code reads it, and one that does not refuses it, as it
    /// should. A sub-byte element type (fp6, fp4) also gets
    /// `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`.
    ///
    /// # Safety
    /// As for [`ExportSource::new`], with `fill` pushing exactly `2 * ndim`
    /// values.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn versioned_in_place(
        data: *mut c_void,
        device: DLDevice,
        dtype: DLDataType,
        ndim: usize,
        byte_offset: u64,
        fill: impl FnOnce(&mut Dims),
        keep: Arc<dyn Send + Sync>,
        flags: u64,
        minor: u32,
    ) -> ManagedTensorVersioned {
        let flags = if dtype_is_subbyte(dtype) { flags | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED } else { flags };
        let minor = minor.max(dtype.code.since_minor()).min(DLPACK_MINOR_VERSION);
        let layout = Layout::new::<VersionedCtx>();
        // SAFETY: `VersionedCtx` is not zero-sized.
        let ctx = unsafe { alloc(layout) }.cast::<VersionedCtx>();
        if ctx.is_null() {
            handle_alloc_error(layout);
        }
        // SAFETY: `ctx` is a fresh, unique block of `VersionedCtx`'s layout
        // (the one `Box` uses, so the deleter's `Box::from_raw` frees it).
        // Every field is written before the block is read or handed out;
        // `dims` is written (empty) before `fill` borrows it. Until the
        // tensor is built nothing can unwind but `fill`, which would leak
        // the block, not free it. The tensor's pointers go into the
        // block's own `dims`, which stay in place until the deleter runs.
        unsafe {
            let src = addr_of_mut!((*ctx).source);
            addr_of_mut!((*src).data).write(data);
            addr_of_mut!((*src).device).write(device);
            addr_of_mut!((*src).dtype).write(dtype);
            addr_of_mut!((*src).ndim).write(ndim);
            addr_of_mut!((*src).dims).write(Dims::new());
            addr_of_mut!((*src).byte_offset).write(byte_offset);
            addr_of_mut!((*src)._keep).write(keep);
            fill(&mut *addr_of_mut!((*src).dims));
            debug_assert_eq!((*src).dims.len(), 2 * ndim);
            addr_of_mut!((*ctx).managed).write(DLManagedTensorVersioned {
                version: DLPackVersion { major: DLPACK_MAJOR_VERSION, minor },
                manager_ctx: ctx.cast::<c_void>(),
                deleter: Some(versioned_deleter),
                flags,
                dl_tensor: (*src).tensor(),
            });
            ManagedTensorVersioned { ptr: NonNull::new_unchecked(addr_of_mut!((*ctx).managed)) }
        }
    }

    /// Packs this into a versioned managed tensor with `flags`; a sub-byte
    /// element type (fp6, fp4) also gets `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`,
    /// since gpuport holds those elements one per byte.
    #[inline]
    pub fn into_versioned(self, flags: u64) -> ManagedTensorVersioned {
        let ExportSource { data, device, dtype, ndim, dims, byte_offset, _keep } = self;
        // SAFETY: `self` was made under `new`'s contract, and its `dims`
        // hold the shape and the strides, `2 * ndim` values.
        unsafe {
            Self::versioned_in_place(
                data,
                device,
                dtype,
                ndim,
                byte_offset,
                |d| d.extend_from_slice(&dims),
                _keep,
                flags,
                DLPACK_MINOR_VERSION,
            )
        }
    }
}

fn null_tensor() -> DLTensor {
    DLTensor {
        data: std::ptr::null_mut(),
        device: DLDevice { device_type: super::DLDeviceType::CPU, device_id: 0 },
        ndim: 0,
        dtype: DLDataType { code: super::DLDataTypeCode::UINT, bits: 8, lanes: 1 },
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

/// The manager context of a legacy export (the managed struct comes first).
#[repr(C)]
struct LegacyCtx {
    managed: DLManagedTensor,
    source: ExportSource,
}

/// The manager context of a versioned export.
#[repr(C)]
struct VersionedCtx {
    managed: DLManagedTensorVersioned,
    source: ExportSource,
}

/// Frees a legacy export. Called once by the consumer; never unwinds.
unsafe extern "C" fn legacy_deleter(t: *mut DLManagedTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: `t` is the `managed` field of a `LegacyCtx` from `into_legacy`
    // (only those carry this deleter), still live because the deleter runs
    // at most once; `manager_ctx` is that block's `Box` pointer.
    let ctx = unsafe { (*t).manager_ctx }.cast::<LegacyCtx>();
    // Dropping the storage runs backend code (a device free) that could
    // panic; unwinding out of an `extern "C"` function is not allowed, so a
    // panic is caught and the rest of the context is leaked instead.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the block came from `Box::into_raw` and is freed only here.
        drop(unsafe { Box::from_raw(ctx) });
    }));
}

/// Frees a versioned export. Called once by the consumer; never unwinds.
unsafe extern "C" fn versioned_deleter(t: *mut DLManagedTensorVersioned) {
    if t.is_null() {
        return;
    }
    // SAFETY: as in `legacy_deleter`, for `VersionedCtx`.
    let ctx = unsafe { (*t).manager_ctx }.cast::<VersionedCtx>();
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the block came from `Box::into_raw` and is freed only here.
        drop(unsafe { Box::from_raw(ctx) });
    }));
}

/// An owned DLPack managed tensor of C type `$raw`: handed over by
/// `into_raw` (the receiver must call its deleter exactly once), or deleted
/// when dropped unconsumed. The legacy and versioned structs differ only in
/// type and the versioned one's `flags`.
macro_rules! managed_tensor {
    ($(#[$doc:meta])* $name:ident, $raw:ty) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name {
            ptr: NonNull<$raw>,
        }

        // SAFETY: the tensor and its context are owned plain data plus an
        // `Arc<dyn Send + Sync>`; nothing in them is tied to a thread.
        unsafe impl Send for $name {}

        impl $name {
            /// Hands the tensor over: the receiver must call its deleter exactly once.
            pub fn into_raw(self) -> *mut $raw {
                let p = self.ptr.as_ptr();
                std::mem::forget(self);
                p
            }

            /// The tensor, still owned by `self`.
            pub fn as_raw(&self) -> *const $raw {
                self.ptr.as_ptr()
            }

            /// The tensor description, borrowing `self`.
            pub fn dl_tensor(&self) -> &DLTensor {
                // SAFETY: the struct lives until the deleter runs, which needs `self`.
                unsafe { &self.ptr.as_ref().dl_tensor }
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: not handed over (`into_raw` forgets `self`), so this
                // is the deleter's one call.
                unsafe {
                    if let Some(d) = self.ptr.as_ref().deleter {
                        d(self.ptr.as_ptr());
                    }
                }
            }
        }
    };
}

managed_tensor!(
    /// A legacy `DLManagedTensor` produced by gpuport, owned until
    /// [`into_raw`](Self::into_raw) hands it to a consumer; dropping it
    /// unconsumed calls its deleter.
    ManagedTensor,
    DLManagedTensor
);

managed_tensor!(
    /// A versioned `DLManagedTensorVersioned` produced by gpuport; as
    /// [`ManagedTensor`].
    ManagedTensorVersioned,
    DLManagedTensorVersioned
);

impl ManagedTensorVersioned {
    /// The `DLPACK_FLAG_BITMASK_*` flags.
    pub fn flags(&self) -> u64 {
        // SAFETY: as in `dl_tensor`.
        unsafe { self.ptr.as_ref().flags }
    }
}

impl ExportOptions {
    /// The versioned flags these options set.
    pub fn flags(self) -> u64 {
        let mut f = 0;
        if self.read_only {
            f |= DLPACK_FLAG_BITMASK_READ_ONLY;
        }
        if self.copy {
            f |= DLPACK_FLAG_BITMASK_IS_COPIED;
        }
        f
    }
}

impl<T: Element, const N: usize, D: Device> MemArray<T, N, D> {
    /// Exports the copy at `loc` as a legacy managed tensor (zero-copy
    /// unless `copy`). The memory stays alive until the consumer calls the
    /// deleter, even if this array is dropped first.
    ///
    /// Errors: locked without the id, the copy at `loc` not current, or a
    /// sub-byte element type (fp6, fp4), which needs a versioned tensor
    /// ([`to_dlpack_versioned`](Self::to_dlpack_versioned)) to say it is padded.
    pub fn to_dlpack(&self, loc: Location, copy: bool, lock: Option<LockId>) -> Result<ManagedTensor> {
        if dtype_is_subbyte(T::DTYPE) {
            // Refused before any copy is made; `into_legacy` would refuse too.
            return ExportSource::refuse_legacy(T::DTYPE);
        }
        self.export_source(loc, copy, lock)?.into_legacy()
    }

    /// Exports the copy at `loc` as a versioned managed tensor with the
    /// `READ_ONLY`/`IS_COPIED` flags of `opts` (and `IS_SUBBYTE_TYPE_PADDED`
    /// for fp6/fp4 elements).
    pub fn to_dlpack_versioned(
        &self,
        loc: Location,
        opts: ExportOptions,
        lock: Option<LockId>,
    ) -> Result<ManagedTensorVersioned> {
        Ok(self.export_source(loc, opts.copy, lock)?.into_versioned(opts.flags()))
    }
}
