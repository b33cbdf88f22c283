//! Import: zero-copy access to a managed tensor from any producer.

use std::ffi::c_void;
use std::ptr::NonNull;

use super::ffi::{
    DLDataType, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_MAJOR_VERSION,
};
use super::{is_host_accessible, DLPackError};
use crate::array::element::{dtype_is_subbyte, dtype_is_supported, dtype_name, dtype_size};
use crate::array::{DeviceSpace, Element, HostSpace, ManagedSpace, Space, View};
use crate::error::Result;

enum Owner {
    Legacy(NonNull<DLManagedTensor>),
    Versioned(NonNull<DLManagedTensorVersioned>),
}

impl Owner {
    /// Calls the producer's deleter. Consumes the owner, so at most once.
    fn release(self) {
        // SAFETY: the pointer is the producer's live managed tensor, handed
        // to us with the duty to call its deleter once; `self` is consumed.
        unsafe {
            match self {
                Owner::Legacy(p) => {
                    if let Some(d) = p.as_ref().deleter {
                        d(p.as_ptr());
                    }
                }
                Owner::Versioned(p) => {
                    if let Some(d) = p.as_ref().deleter {
                        d(p.as_ptr());
                    }
                }
            }
        }
    }
}

/// A managed tensor from any producer, validated, giving zero-copy views.
///
/// Dropping it calls the producer's deleter exactly once. Null strides are
/// read as compact row-major; `byte_offset` is applied; a read-only tensor
/// gives no mutable access.
///
/// # Invariants
/// `shape` and `strides` have `ndim` entries, extents are `>= 0`, every
/// reachable element's byte offset from `data` fits in `isize`, the dtype
/// is one gpuport supports (a sub-byte one only when flagged padded), and
/// the device type is one it knows.
pub struct ImportedTensor {
    owner: Option<Owner>,
    data: *mut c_void,
    byte_offset: u64,
    device: DLDevice,
    dtype: DLDataType,
    shape: Vec<i64>,
    strides: Vec<i64>,
    flags: u64,
    version: Option<DLPackVersion>,
}

impl std::fmt::Debug for ImportedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedTensor")
            .field("device", &self.device)
            .field("dtype", &dtype_name(self.dtype))
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .field("byte_offset", &self.byte_offset)
            .field("flags", &self.flags)
            .finish()
    }
}

impl Drop for ImportedTensor {
    fn drop(&mut self) {
        if let Some(o) = self.owner.take() {
            o.release();
        }
    }
}

impl ImportedTensor {
    /// Takes ownership of a legacy managed tensor.
    ///
    /// On success and on error alike the tensor is consumed: its deleter
    /// has been called (error) or will be called once on drop (success).
    /// A null pointer is an error with nothing to delete.
    ///
    /// # Safety
    /// - `ptr` is null or a live `DLManagedTensor` whose deleter nobody else
    ///   will call;
    /// - its `shape` (and `strides`, if not null) point to `ndim` readable
    ///   `i64`s, and `data` addresses every element they reach, until the
    ///   deleter is called;
    /// - while a slice or view borrowed from the result is alive, nobody
    ///   else writes the memory (or, for mutable borrows, reads it).
    pub unsafe fn from_legacy(ptr: *mut DLManagedTensor) -> Result<Self> {
        let p = NonNull::new(ptr).ok_or(DLPackError::NullPointer { what: "DLManagedTensor" })?;
        // SAFETY: the caller guarantees a live tensor.
        let t = unsafe { p.as_ref().dl_tensor };
        // SAFETY: the caller's contract covers the tensor's pointers.
        unsafe { Self::validate(Owner::Legacy(p), &t, 0, None) }
    }

    /// Takes ownership of a versioned managed tensor; as
    /// [`from_legacy`](Self::from_legacy). A major version other than 1 is
    /// an error (after calling the deleter, as the DLPack spec requires).
    ///
    /// # Safety
    /// As for [`from_legacy`](Self::from_legacy), for a
    /// `DLManagedTensorVersioned`.
    pub unsafe fn from_versioned(ptr: *mut DLManagedTensorVersioned) -> Result<Self> {
        let p = NonNull::new(ptr).ok_or(DLPackError::NullPointer { what: "DLManagedTensorVersioned" })?;
        // SAFETY: the caller guarantees a live tensor; `version` is at the
        // same place in every major version.
        let version = unsafe { p.as_ref().version };
        if version.major != DLPACK_MAJOR_VERSION {
            Owner::Versioned(p).release();
            return Err(DLPackError::UnsupportedVersion { major: version.major, minor: version.minor }.into());
        }
        // SAFETY: a major-1 tensor has the layout of `DLManagedTensorVersioned`.
        let (t, flags) = unsafe { (p.as_ref().dl_tensor, p.as_ref().flags) };
        // SAFETY: the caller's contract covers the tensor's pointers.
        unsafe { Self::validate(Owner::Versioned(p), &t, flags, Some(version)) }
    }

    /// Checks every field; on failure releases the owner and returns the error.
    ///
    /// # Safety
    /// As for `from_legacy`.
    unsafe fn validate(owner: Owner, t: &DLTensor, flags: u64, version: Option<DLPackVersion>) -> Result<Self> {
        // SAFETY: forwarded contract.
        match unsafe { Self::parse(t, flags) } {
            Ok((shape, strides)) => Ok(ImportedTensor {
                owner: Some(owner),
                data: t.data,
                byte_offset: t.byte_offset,
                device: t.device,
                dtype: t.dtype,
                shape,
                strides,
                flags,
                version,
            }),
            Err(e) => {
                owner.release();
                Err(e.into())
            }
        }
    }

    /// # Safety
    /// As for `from_legacy`.
    unsafe fn parse(t: &DLTensor, flags: u64) -> std::result::Result<(Vec<i64>, Vec<i64>), DLPackError> {
        if !dtype_is_supported(t.dtype) {
            return Err(DLPackError::UnknownDType { code: t.dtype.code.0, bits: t.dtype.bits, lanes: t.dtype.lanes });
        }
        // Sub-byte elements are packed unless the producer flags them padded;
        // a legacy tensor has no flags, so it is packed.
        if dtype_is_subbyte(t.dtype) && flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED == 0 {
            return Err(DLPackError::SubByteLayout {
                dtype: dtype_name(t.dtype),
                problem: "the tensor is packed (no DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED flag, or a legacy tensor, which has no flags)",
            });
        }
        if !matches!(
            t.device.device_type,
            DLDeviceType::CPU
                | DLDeviceType::CUDA
                | DLDeviceType::CUDA_HOST
                | DLDeviceType::CUDA_MANAGED
                | DLDeviceType::ROCM
                | DLDeviceType::ROCM_HOST
        ) {
            return Err(DLPackError::UnsupportedDevice {
                device_type: t.device.device_type.0,
                device_id: t.device.device_id,
            });
        }
        let ndim = usize::try_from(t.ndim)
            .map_err(|_| DLPackError::RankMismatch { expected: "a non-negative value".into(), found: t.ndim })?;
        let shape: Vec<i64> = if ndim == 0 {
            Vec::new()
        } else if t.shape.is_null() {
            return Err(DLPackError::NullPointer { what: "shape" });
        } else {
            // SAFETY: the caller guarantees `ndim` readable extents.
            unsafe { std::slice::from_raw_parts(t.shape, ndim) }.to_vec()
        };
        if let Some((axis, &value)) = shape.iter().enumerate().find(|(_, &e)| e < 0) {
            return Err(DLPackError::NegativeExtent { axis, value });
        }
        let overflow =
            |strides: Vec<i64>| DLPackError::Overflow { shape: shape.clone(), strides, byte_offset: t.byte_offset };
        let strides: Vec<i64> = if ndim == 0 {
            Vec::new()
        } else if t.strides.is_null() {
            // Before DLPack 1.2, null strides mean compact row-major.
            let mut s = vec![0i64; ndim];
            let mut acc: i64 = 1;
            for axis in (0..ndim).rev() {
                s[axis] = acc;
                acc = acc.checked_mul(shape[axis].max(1)).ok_or_else(|| overflow(vec![]))?;
            }
            s
        } else {
            // SAFETY: the caller guarantees `ndim` readable strides.
            unsafe { std::slice::from_raw_parts(t.strides, ndim) }.to_vec()
        };
        // Every reachable byte offset must fit in isize: the element count,
        // the lowest and highest element offsets, and the byte offset.
        let elem = dtype_size(t.dtype) as i128;
        let mut count: i128 = 1;
        let (mut lo, mut hi) = (0i128, 0i128);
        for axis in 0..ndim {
            count = count.saturating_mul(i128::from(shape[axis]));
            if shape[axis] > 0 {
                let reach = (i128::from(shape[axis]) - 1) * i128::from(strides[axis]);
                if reach < 0 {
                    lo += reach;
                } else {
                    hi += reach;
                }
            }
        }
        if count > 0 {
            let base = i128::from(t.byte_offset);
            let first = base + lo * elem;
            let end = base + (hi + 1) * elem;
            let max = isize::MAX as i128;
            if count.saturating_mul(elem) > max || end > max || first < -max {
                return Err(overflow(strides));
            }
            if t.data.is_null() {
                return Err(DLPackError::NullPointer { what: "data" });
            }
        }
        Ok((shape, strides))
    }

    // ---- metadata --------------------------------------------------------

    /// Where the memory is.
    pub fn device(&self) -> DLDevice {
        self.device
    }

    /// The element type.
    pub fn dtype(&self) -> DLDataType {
        self.dtype
    }

    /// The extents.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// The strides in elements (compact row-major if the producer sent none).
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        if self.shape.contains(&0) {
            // Extents of an empty tensor are not bounded; their product may overflow.
            return 0;
        }
        // Fits: checked against isize::MAX bytes on import.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let len = self.shape.iter().product::<i64>() as usize;
        len
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The producer's byte offset.
    pub fn byte_offset(&self) -> u64 {
        self.byte_offset
    }

    /// Whether the producer marked the tensor read-only (versioned only).
    pub fn is_read_only(&self) -> bool {
        self.flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0
    }

    /// Whether the producer flagged sub-byte elements padded (versioned only).
    pub fn is_subbyte_padded(&self) -> bool {
        self.flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0
    }

    /// Reads the tensor's elements as `dtype` from now on: the same bytes,
    /// another element type of the same size (e.g. the `uint8` view of an
    /// ml_dtypes `float8_e4m3fn` array NumPy can only export as bytes). A
    /// sub-byte `dtype` reads one padded element per byte. Refused (nothing
    /// changes) when `dtype` is not one gpuport holds or its elements have
    /// another size. Typed access still checks alignment and values.
    pub fn reinterpret(&mut self, dtype: DLDataType) -> Result<()> {
        if !dtype_is_supported(dtype) {
            return Err(DLPackError::UnknownDType { code: dtype.code.0, bits: dtype.bits, lanes: dtype.lanes }.into());
        }
        if dtype_size(dtype) != dtype_size(self.dtype) || dtype_is_subbyte(self.dtype) {
            return Err(DLPackError::DTypeMismatch {
                expected: format!("an element type of {} byte(s) like {}", dtype_size(dtype), dtype_name(dtype)),
                found: dtype_name(self.dtype),
            }
            .into());
        }
        if dtype_is_subbyte(dtype) {
            // One byte per element: the padded layout, which the flag states.
            self.flags |= DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
        }
        self.dtype = dtype;
        Ok(())
    }

    /// Whether the producer made a copy for this export (versioned only).
    pub fn is_copied(&self) -> bool {
        self.flags & DLPACK_FLAG_BITMASK_IS_COPIED != 0
    }

    /// The DLPack version of a versioned tensor; `None` for a legacy one.
    pub fn version(&self) -> Option<DLPackVersion> {
        self.version
    }

    /// The address of the element at index 0 (`data + byte_offset`), in the
    /// tensor's address space; null for an empty tensor without data.
    // Where there are elements the offset was checked to fit isize on import;
    // an empty tensor's address is never dereferenced.
    #[allow(clippy::cast_possible_truncation)]
    pub fn data_ptr(&self) -> *mut c_void {
        self.data.cast::<u8>().wrapping_add(self.byte_offset as usize).cast::<c_void>()
    }

    /// Whether the strides are compact row-major (extents of 1 or 0 ignored).
    pub fn is_contiguous(&self) -> bool {
        let mut expect: i64 = 1;
        for axis in (0..self.shape.len()).rev() {
            if self.shape[axis] > 1 && self.strides[axis] != expect {
                return false;
            }
            expect = expect.saturating_mul(self.shape[axis]);
        }
        true
    }

    // ---- typed access ----------------------------------------------------

    fn check_dtype<T: Element>(&self) -> Result<()> {
        if self.dtype != T::DTYPE {
            return Err(
                DLPackError::DTypeMismatch { expected: dtype_name(T::DTYPE), found: dtype_name(self.dtype) }.into()
            );
        }
        let addr = self.data_ptr() as usize;
        if !self.is_empty() && !addr.is_multiple_of(std::mem::align_of::<T>()) {
            return Err(DLPackError::Misaligned {
                address: addr,
                align: std::mem::align_of::<T>(),
                dtype: dtype_name(T::DTYPE),
            }
            .into());
        }
        Ok(())
    }

    fn check_host(&self, op: &'static str) -> Result<()> {
        if is_host_accessible(self.device.device_type) {
            Ok(())
        } else {
            Err(DLPackError::WrongDevice { op, needed: "host-accessible", found: self.device_name() }.into())
        }
    }

    fn device_name(&self) -> String {
        let t = self.device.device_type;
        format!("{}:{}", t.name().unwrap_or("unknown"), self.device.device_id)
    }

    /// The elements as a slice (host-accessible, compact row-major, `T`
    /// matching the dtype; for `bool`, every byte 0 or 1).
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        self.check_host("as_slice")?;
        self.check_dtype::<T>()?;
        if !self.is_contiguous() {
            return Err(DLPackError::NotContiguous { shape: self.shape.clone(), strides: self.strides.clone() }.into());
        }
        if self.is_empty() {
            return Ok(&[]);
        }
        // SAFETY: validated: host-readable, aligned, `len` compact elements
        // of `T` from `data_ptr` (the caller of `from_*` guarantees the
        // memory and that nobody writes it while borrowed).
        let s = unsafe { std::slice::from_raw_parts(self.data_ptr() as *const T, self.len()) };
        // SAFETY: the same bytes, viewed as bytes for validation.
        let bytes = unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) };
        if !T::valid_bytes(bytes) {
            return Err(DLPackError::InvalidValues { dtype: dtype_name(T::DTYPE) }.into());
        }
        Ok(s)
    }

    /// The elements as a mutable slice; refused for read-only tensors.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        if self.is_read_only() {
            return Err(DLPackError::ReadOnly.into());
        }
        let (p, n) = {
            let s = self.as_slice::<T>()?;
            (s.as_ptr() as *mut T, s.len())
        };
        if n == 0 {
            return Ok(&mut []);
        }
        // SAFETY: as in `as_slice`, not read-only, and `&mut self` excludes
        // other borrows through this tensor.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
    }

    fn view_parts<T: Element, const N: usize>(&self) -> Result<([usize; N], [isize; N])> {
        self.check_dtype::<T>()?;
        if self.shape.len() != N {
            return Err(DLPackError::RankMismatch {
                expected: N.to_string(),
                found: i32::try_from(self.shape.len()).unwrap_or(i32::MAX),
            }
            .into());
        }
        let mut extents = [0usize; N];
        let mut strides = [0isize; N];
        let overflow = || DLPackError::Overflow {
            shape: self.shape.clone(),
            strides: self.strides.clone(),
            byte_offset: self.byte_offset,
        };
        for axis in 0..N {
            // Fit where there are elements: validated against isize::MAX on import.
            extents[axis] = usize::try_from(self.shape[axis]).map_err(|_| overflow())?;
            strides[axis] = isize::try_from(self.strides[axis]).map_err(|_| overflow())?;
        }
        Ok((extents, strides))
    }

    /// A strided host view (host-accessible memory; `T` and `N` matching).
    pub fn host_view<T: Element, const N: usize>(&self) -> Result<View<'_, T, N, HostSpace>> {
        self.check_host("host_view")?;
        let (extents, strides) = self.view_parts::<T, N>()?;
        // SAFETY: validated on import: every reachable element lies in the
        // producer's host-readable memory, alive while `self` is borrowed.
        let view = unsafe { View::from_raw_parts(self.data_ptr() as *const T, extents, strides, self.device)? };
        if !view.values_valid() {
            return Err(DLPackError::InvalidValues { dtype: dtype_name(T::DTYPE) }.into());
        }
        Ok(view)
    }

    /// A strided view of device memory (kDLCUDA / kDLROCM).
    pub fn device_view<T: Element, const N: usize>(&self) -> Result<View<'_, T, N, DeviceSpace>> {
        self.space_view::<T, N, DeviceSpace>("device_view")
    }

    /// A strided view of managed memory (kDLCUDAManaged).
    pub fn managed_view<T: Element, const N: usize>(&self) -> Result<View<'_, T, N, ManagedSpace>> {
        self.space_view::<T, N, ManagedSpace>("managed_view")
    }

    fn space_view<T: Element, const N: usize, S: Space>(&self, op: &'static str) -> Result<View<'_, T, N, S>> {
        if !S::accepts_dl(self.device.device_type) {
            return Err(DLPackError::WrongDevice { op, needed: S::NAME, found: self.device_name() }.into());
        }
        let (extents, strides) = self.view_parts::<T, N>()?;
        // SAFETY: as in `host_view`, in the tensor's own address space.
        unsafe { View::from_raw_parts(self.data_ptr() as *const T, extents, strides, self.device) }
    }

    /// The elements in row-major order, gathered through the strides.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_host("to_vec")?;
        self.check_dtype::<T>()?;
        if self.is_contiguous() {
            return Ok(self.as_slice::<T>()?.to_vec());
        }
        let mut out = Vec::with_capacity(self.len());
        let n = self.shape.len();
        let mut idx = vec![0i64; n];
        let base = self.data_ptr() as *const T;
        for _ in 0..self.len() {
            let off: i64 = idx.iter().zip(&self.strides).map(|(i, s)| i * s).sum();
            // SAFETY: `idx` is in bounds, so the element is reachable and was
            // validated to lie in the producer's memory (offsets fit isize).
            let p = unsafe { base.offset(element_offset(off)) };
            // SAFETY: the element's bytes, read as bytes before as a `T`.
            let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), std::mem::size_of::<T>()) };
            if !T::valid_bytes(bytes) {
                return Err(DLPackError::InvalidValues { dtype: dtype_name(T::DTYPE) }.into());
            }
            // SAFETY: in bounds, aligned (checked), and a valid `T` (checked).
            out.push(unsafe { *p });
            for axis in (0..n).rev() {
                idx[axis] += 1;
                if idx[axis] < self.shape[axis] {
                    break;
                }
                idx[axis] = 0;
            }
        }
        Ok(out)
    }
}

/// An element offset of an imported tensor as an `isize`: import checked
/// that every reachable byte offset fits one.
#[allow(clippy::cast_possible_truncation)] // |off| * element size <= isize::MAX
fn element_offset(off: i64) -> isize {
    off as isize
}
