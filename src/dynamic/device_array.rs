//! [`DeviceArray`]: raw memory with a shape and an array-interface type
//! string, as a binding's `DeviceArray` (`gpuport.runtime.DeviceArray`)
//! describes it: the rules of `configure` (which shapes and types fit the
//! memory), of indexing (ints, then at most one partial step-1 slice: the
//! result stays contiguous), of the memory a CUDA Array Interface lends
//! one ([`ArrayDims::of_interface`]: C order only), and of freeing what
//! `malloc` returned ([`free`]; where managed memory may be placed is
//! `src/dynamic/managed.rs`'s). The memory itself is the binding's pointer;
//! the errors are [`DeviceArrayError`]s.

use std::sync::{Arc, Mutex, TryLockError};

use super::cai::{itemsize_of, CudaArrayInterface};
use super::keep;
use super::raw::RawAllocation;
use crate::array::dtype::DType;
use crate::array::LockError;
pub use crate::error::device_array::DeviceArrayError;
use crate::error::{Error, Result};

/// Bytes of `shape` elements of `itemsize` bytes; [`DeviceArrayError::TooLarge`] on overflow.
pub fn nbytes_of(shape: &[usize], itemsize: usize) -> Result<usize> {
    shape
        .iter()
        .try_fold(itemsize, |acc, &e| acc.checked_mul(e))
        .ok_or_else(|| DeviceArrayError::TooLarge { shape: shape.to_vec(), indexing: false }.into())
}

/// A type as a caller named it for [`DeviceArray::configure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeName {
    /// A string: an array-interface type string (`"<f4"`) or an element type's name (`"float32"`).
    Text(String),
    /// An element type.
    DType(DType),
    /// An object that names no element type, as the caller writes it (Python's `repr`).
    Unknown(String),
}

impl TypeName {
    /// The array-interface type string it names.
    pub fn typestr(&self) -> Result<String> {
        let dtype = match self {
            TypeName::Text(s) if itemsize_of(s).is_ok() => return Ok(s.clone()),
            TypeName::Text(s) => {
                DType::parse(s).ok_or_else(|| DeviceArrayError::BadTypestr { given: format!("'{s}'") })
            }
            TypeName::DType(d) => Ok(*d),
            TypeName::Unknown(shown) => Err(DeviceArrayError::BadTypestr { given: shown.clone() }),
        }?;
        let typestr = dtype.typestr().ok_or_else(|| DeviceArrayError::NoTypestr { dtype: dtype.name().into() })?;
        Ok(typestr.to_owned())
    }
}

/// A shape (`None`: unknown) and an array-interface type string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayDims {
    shape: Option<Vec<usize>>,
    typestr: String,
    itemsize: usize,
}

impl ArrayDims {
    /// `len` bytes (`"|u1"`); no shape for `None`.
    pub fn bytes(len: Option<usize>) -> ArrayDims {
        ArrayDims { shape: len.map(|n| vec![n]), typestr: "|u1".into(), itemsize: 1 }
    }

    /// `shape` of `typestr` (`None`: bytes, `"|u1"`); the type string must name a size.
    pub fn new(shape: Option<Vec<usize>>, typestr: Option<String>) -> Result<ArrayDims> {
        let typestr = typestr.unwrap_or_else(|| "|u1".into());
        Ok(ArrayDims { shape, itemsize: itemsize_of(&typestr)?, typestr })
    }

    /// The dims of the memory a CUDA Array Interface describes: its shape
    /// and type string, where given (bytes otherwise, as [`ArrayDims::new`]).
    /// Strides that are not C order are refused
    /// ([`DeviceArrayError::NotCContiguous`], naming `producer`, the type of
    /// the object that gave the interface): a `DeviceArray` describes
    /// C-contiguous memory.
    pub fn of_interface(cai: &CudaArrayInterface, producer: &str) -> Result<ArrayDims> {
        if let Some(layout) = cai.layout()? {
            if !layout.c_order {
                return Err(DeviceArrayError::NotCContiguous {
                    producer: producer.into(),
                    shape: cai.shape.clone().unwrap_or_default(),
                    strides: cai.strides.clone().unwrap_or_default(),
                }
                .into());
            }
        }
        ArrayDims::new(cai.shape.clone(), cai.typestr.clone())
    }

    /// The shape, where known.
    pub fn shape(&self) -> Option<&[usize]> {
        self.shape.as_deref()
    }

    /// The array-interface type string.
    pub fn typestr(&self) -> &str {
        &self.typestr
    }

    /// Bytes per element.
    pub fn itemsize(&self) -> usize {
        self.itemsize
    }

    /// Shape times item size (0 without a shape).
    pub fn nbytes(&self) -> Result<usize> {
        self.shape.as_deref().map_or(Ok(0), |s| nbytes_of(s, self.itemsize))
    }

    /// The first axis's extent.
    pub fn len(&self) -> Result<usize> {
        match self.shape.as_deref() {
            Some([n, ..]) => Ok(*n),
            _ => Err(DeviceArrayError::NoFirstAxis.into()),
        }
    }

    /// Whether the first axis is empty (see [`len`](Self::len)).
    pub fn is_empty(&self) -> Result<bool> {
        self.len().map(|n| n == 0)
    }

    /// The dims `shape` and `typestr` make (`None`: as they are; a retype
    /// of one axis keeps the byte size: `(n,)` of `|u1` becomes `(n/4,)` of
    /// `<f4`). Sizes past `memory_bytes`, or any size when the memory's size
    /// is unknown, are refused unless `force`.
    pub fn configured(
        &self,
        shape: Option<Vec<usize>>,
        typestr: Option<&TypeName>,
        memory_bytes: Option<usize>,
        force: bool,
    ) -> Result<ArrayDims> {
        let typestr = match typestr {
            Some(t) => t.typestr()?,
            None => self.typestr.clone(),
        };
        let itemsize = itemsize_of(&typestr)?;
        let shape = match (shape, &self.shape) {
            (Some(s), _) => s,
            (None, Some(old)) if old.len() == 1 => vec![nbytes_of(old, self.itemsize)? / itemsize],
            (None, Some(old)) => old.clone(),
            (None, None) => return Err(DeviceArrayError::NoShapeToKeep.into()),
        };
        let need = nbytes_of(&shape, itemsize)?;
        match memory_bytes {
            Some(have) if need > have && !force => {
                return Err(DeviceArrayError::ExceedsMemory { need, shape, typestr, have }.into())
            }
            None if !force => return Err(DeviceArrayError::UnknownSize.into()),
            _ => {}
        }
        Ok(ArrayDims { shape: Some(shape), typestr, itemsize })
    }

    /// The sub-array `keys` select: integers along the leading axes, then
    /// slices of step 1, of which only the first may be partial (so the
    /// result is one contiguous range).
    pub fn index(&self, keys: &[IndexKey]) -> Result<SubArray> {
        let shape = self.shape.as_deref().ok_or(DeviceArrayError::NotIndexable)?;
        if keys.len() > shape.len() {
            return Err(DeviceArrayError::TooManyIndices { given: keys.len(), ndim: shape.len() }.into());
        }
        let too_big = || Error::from(DeviceArrayError::TooLarge { shape: shape.to_vec(), indexing: true });
        let mut strides = vec![1usize; shape.len()];
        for a in (0..shape.len().saturating_sub(1)).rev() {
            strides[a] = strides[a + 1].checked_mul(shape[a + 1]).ok_or_else(too_big)?;
        }
        let mut offset = 0usize; // elements
        let mut out_shape = Vec::new();
        let mut sliced = false;
        for (axis, key) in keys.iter().enumerate() {
            let n = shape[axis];
            let first = match *key {
                IndexKey::Slice { start, stop, step } => {
                    let (first, len) = step_one_slice(n, start, stop, step)?;
                    let whole = first == 0 && len == n;
                    if sliced && !whole {
                        return Err(DeviceArrayError::PartialSliceThenSlice.into());
                    }
                    sliced |= !whole;
                    out_shape.push(len);
                    first
                }
                IndexKey::Int(i) => {
                    if sliced || !out_shape.is_empty() {
                        return Err(DeviceArrayError::IntAfterSlice.into());
                    }
                    let j = if i < 0 { i.checked_add_unsigned(n) } else { Some(i) };
                    match j.and_then(|j| usize::try_from(j).ok()).filter(|&j| j < n) {
                        Some(j) => j,
                        None => return Err(DeviceArrayError::IndexOutOfBounds { index: i, axis, size: n }.into()),
                    }
                }
            };
            offset = first.checked_mul(strides[axis]).and_then(|o| o.checked_add(offset)).ok_or_else(too_big)?;
        }
        out_shape.extend_from_slice(&shape[keys.len()..]);
        let byte_offset = offset.checked_mul(self.itemsize).ok_or_else(too_big)?;
        let nbytes = nbytes_of(&out_shape, self.itemsize)?;
        let dims = ArrayDims { shape: Some(out_shape), typestr: self.typestr.clone(), itemsize: self.itemsize };
        Ok(SubArray { dims, byte_offset, nbytes })
    }
}

/// An index along one axis, as a caller wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKey {
    /// One position (negative: from the end).
    Int(isize),
    /// A slice, with Python's meaning of its bounds (`None`: the whole axis
    /// that way; negative: from the end; past the ends: clamped).
    Slice {
        /// First position.
        start: Option<isize>,
        /// Position after the last.
        stop: Option<isize>,
        /// Step; only 1 is accepted.
        step: Option<isize>,
    },
}

/// `(first, len)` of a step-1 slice of an axis of `n`, clamped as Python's
/// `slice.indices` clamps.
fn step_one_slice(n: usize, start: Option<isize>, stop: Option<isize>, step: Option<isize>) -> Result<(usize, usize)> {
    match step.unwrap_or(1) {
        0 => return Err(DeviceArrayError::ZeroStep.into()),
        1 => {}
        _ => return Err(DeviceArrayError::StepNotOne.into()),
    }
    let clamp = |bound: Option<isize>, default: usize| match bound {
        None => default,
        Some(b) if b < 0 => n.saturating_sub(b.unsigned_abs()),
        Some(b) => n.min(b.unsigned_abs()),
    };
    let (first, end) = (clamp(start, 0), clamp(stop, n));
    Ok((first, end.saturating_sub(first)))
}

/// What [`ArrayDims::index`] selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubArray {
    /// Its shape and type.
    pub dims: ArrayDims,
    /// Its first byte, from the array's.
    pub byte_offset: usize,
    /// Its bytes.
    pub nbytes: usize,
}

impl SubArray {
    /// Of `len` bytes known from the array's start, those of the sub-array.
    pub fn window(&self, len: usize) -> usize {
        len.saturating_sub(self.byte_offset).min(self.nbytes)
    }
}

/// A `DeviceArray`'s shape and type, and the allocation it owns (from
/// `malloc`) until freed.
#[derive(Debug)]
pub struct DeviceArray {
    dims: ArrayDims,
    owned: Option<Arc<RawAllocation>>,
    freed: bool,
}

impl DeviceArray {
    /// An array over memory it does not own.
    pub fn over(dims: ArrayDims) -> DeviceArray {
        DeviceArray { dims, owned: None, freed: false }
    }

    /// The bytes of an allocation, which it owns.
    pub fn owning(a: Arc<RawAllocation>) -> DeviceArray {
        DeviceArray { dims: ArrayDims::bytes(Some(a.len())), owned: Some(a), freed: false }
    }

    /// Its shape and type.
    pub fn dims(&self) -> &ArrayDims {
        &self.dims
    }

    /// Changes shape and/or type (see [`ArrayDims::configured`]); unchanged on error.
    pub fn configure(
        &mut self,
        shape: Option<Vec<usize>>,
        typestr: Option<&TypeName>,
        memory_bytes: Option<usize>,
        force: bool,
    ) -> Result<()> {
        self.dims = self.dims.configured(shape, typestr, memory_bytes, force)?;
        Ok(())
    }

    /// Whether it owns an allocation not yet freed.
    pub fn owns_memory(&self) -> bool {
        self.owned.is_some()
    }

    /// The owned allocation, for `op` (`prefetch`, `advise`).
    pub fn allocation(&self, op: &'static str) -> Result<Arc<RawAllocation>> {
        self.owned.clone().ok_or_else(|| DeviceArrayError::NoAllocation { op }.into())
    }

    /// Gives up the owned allocation (the caller drops it, and its pointer);
    /// the array then has no bytes. Refused twice, and for memory it does
    /// not own.
    pub fn free(&mut self) -> Result<Arc<RawAllocation>> {
        if self.freed {
            return Err(DeviceArrayError::DoubleFree.into());
        }
        let owned = self.owned.take().ok_or(DeviceArrayError::NotOwner)?;
        self.freed = true;
        self.dims.shape = Some(vec![0]);
        Ok(owned)
    }
}

/// What a binding's `free` (`hipFree`) was handed.
#[derive(Debug)]
pub enum FreeTarget<'a> {
    /// A `DeviceArray`, behind the lock a binding keeps it in.
    Array(&'a Mutex<DeviceArray>),
    /// A bare address (`0`: NULL).
    Address(u64),
}

/// A binding's whole `free`: drops the owners of completed work
/// ([`keep::prune`], before the array's lock is taken), then frees an
/// array's allocation ([`DeviceArray::free`]: refused twice, and for memory
/// the array does not own), does nothing for NULL, and refuses any other
/// bare address ([`DeviceArrayError::NotGpuportMemory`]): gpuport frees only
/// what its `malloc` returned. The freed allocation comes back, for the
/// caller to drop with its pointer (the memory goes when no view or
/// pending work needs it). An array whose lock is taken on this thread is
/// [`LockError::Busy`].
pub fn free(target: FreeTarget<'_>) -> Result<Option<Arc<RawAllocation>>> {
    keep::prune();
    match target {
        FreeTarget::Address(0) => Ok(None),
        FreeTarget::Address(addr) => Err(DeviceArrayError::NotGpuportMemory { addr }.into()),
        FreeTarget::Array(lock) => {
            let mut array = match lock.try_lock() {
                Ok(guard) => guard,
                // A panic under the lock left the dims whole: every change is one assignment.
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return Err(LockError::Busy { what: "DeviceArray" }.into()),
            };
            array.free().map(Some)
        }
    }
}
