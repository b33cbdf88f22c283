//! What a caller of the run-time layer does with an [`AnyArray`]'s data
//! directly: moves, residency by name, the address of its natural copy,
//! host views and bytes (also as a borrowed slice), the host export of
//! low-precision elements as unsigned bits, host uploads, fills from a
//! binding's value ([`FillValue`]) and deep copies. Each method says what an owned array does
//! and what an import refuses ([`ImportRefusal`]): an import's memory, and
//! where it lives, are its producer's.
//!
//! ```
//! use gpuport::array::{Location, Transfer};
//! use gpuport::dynamic::{new_owned, AnyArray, AnyStream, DType};
//! let dev = gpuport::open("host")?;
//! let s = AnyStream::default_for(&dev);
//! let mut a = AnyArray::Owned(new_owned(&dev, DType::Int32, &[3])?);
//! a.move_to(Location::Device, &s, Transfer::Sync, None)?;
//! let (ptr, _keep) = a.host_bytes("tobytes")?; // the device copy: host memory on this backend
//! assert_ne!(ptr, 0);
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::marker::PhantomData;
use std::sync::Arc;

use super::array::{AnyArray, DynArray};
use super::exchange::{self, Export, ExportRequest};
use super::stream::AnyStream;
use crate::array::dtype::DType;
use crate::array::{ImportRefusal, LockId, Residency, ResidencyError, Transfer};
use crate::dlpack::{is_host_accessible, DLDeviceType, ImportedTensor};
use crate::error::array::Location;
use crate::error::array::ShapeError;
use crate::error::python::tuple;
use crate::error::{Error, Result};

/// The host-readable memory of an array, as the NumPy array interface
/// describes it ([`AnyArray::host_interface`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInterface {
    /// The address of the first element.
    pub data: u64,
    /// Strides in bytes; `None` for a compact row-major array.
    pub byte_strides: Option<Vec<i64>>,
    /// Whether consumers must not write it.
    pub read_only: bool,
}

/// A value for [`AnyArray::fill_value`], as a binding converted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FillValue {
    /// One element's bytes, as the caller gave them (checked for size and
    /// validity by the fill).
    Bytes(Vec<u8>),
    /// A number converted to the array's dtype by the binding's value
    /// library (NumPy; ml_dtypes for the low-precision floats): the shape of
    /// what the conversion gave (empty: one value) and its bytes.
    Converted {
        /// The shape of the converted value; one value has none.
        shape: Vec<usize>,
        /// The converted elements' bytes.
        bytes: Vec<u8>,
    },
    /// A number, for a dtype the binding cannot convert numbers to.
    NotConverted,
}

/// An array's bytes in row-major order in host memory
/// ([`AnyArray::host_bytes_view`]): borrowed from the array, which no
/// method can write while the view lives.
pub struct HostBytes<'a> {
    ptr: u64,
    len: usize,
    /// Keeps the memory alive.
    _keep: Arc<dyn Send + Sync>,
    _array: PhantomData<&'a mut AnyArray>,
}

impl HostBytes<'_> {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        #[allow(clippy::cast_possible_truncation)] // a host address of this process fits a pointer
        let ptr = self.ptr as usize as *const u8;
        // SAFETY: `ptr` addresses the `len` bytes of the array's
        // host-readable copy (`host_bytes`), kept alive by `_keep`; the
        // array is borrowed mutably for the view's life, so none of its
        // methods writes them meanwhile.
        unsafe { std::slice::from_raw_parts(ptr, self.len) }
    }
}

impl AnyArray {
    /// Sets every element to `value` ([`AnyArray::fill_bytes`], without a
    /// lock id): one element's bytes as given, or one converted number.
    /// Refused: a conversion that gave more than one value
    /// ([`Error::InvalidArgument`]), a number for a dtype the binding
    /// cannot convert to ([`Error::NoValueConversion`], whose wording names
    /// ml_dtypes where installing it gives the conversion).
    pub fn fill_value(&mut self, value: FillValue) -> Result<()> {
        let bytes = match value {
            FillValue::Bytes(bytes) => bytes,
            FillValue::Converted { shape, .. } if !shape.is_empty() => {
                return Err(Error::InvalidArgument {
                    name: "value",
                    reason: format!("fill takes one value, not an array of shape {}", tuple(&shape)),
                })
            }
            FillValue::Converted { bytes, .. } => bytes,
            FillValue::NotConverted => {
                let dtype = self.dtype();
                return Err(Error::NoValueConversion {
                    op: "fill",
                    dtype: dtype.name().into(),
                    itemsize: dtype.itemsize(),
                    in_ml_dtypes: dtype.in_ml_dtypes(),
                });
            }
        };
        self.fill_bytes(&bytes, None)
    }

    /// [`residency`](Self::residency) as Python names it: `"host"`,
    /// `"device"`, `"both"`, or `"imported"` for an import.
    pub fn residency_name(&self) -> &'static str {
        match self.residency() {
            Some(Residency::Host) => "host",
            Some(Residency::Device) => "device",
            Some(Residency::Both) => "both",
            None => "imported",
        }
    }

    /// The array's bytes in host memory as [`host_bytes`](Self::host_bytes)
    /// finds them (the same errors), as a slice (`tobytes`).
    pub fn host_bytes_view(&mut self, op: &'static str) -> Result<HostBytes<'_>> {
        let len = self.shape().iter().product::<usize>() * self.dtype().itemsize();
        let (ptr, keep) = self.host_bytes(op)?;
        Ok(HostBytes { ptr, len, _keep: keep, _array: PhantomData })
    }

    /// The host elements of a dtype NumPy cannot read from DLPack (bfloat16,
    /// the fp8/fp6/fp4 types), exported to the host (DLPack 1.1, a copy
    /// where the data is on the device) and viewed as the unsigned integers
    /// of the same bytes: `uint16` for 2-byte elements, else `uint8`
    /// (sub-byte elements are held one a byte). A binding views those as
    /// the dtype's ml_dtypes type.
    pub fn export_host_bits(&mut self) -> Result<Export> {
        let req = ExportRequest { max_version: Some((1, 1)), dl_device: Some((1, 0)), ..ExportRequest::default() };
        // SAFETY: `req` names no stream.
        let mut e = unsafe { exchange::export(self, req)? };
        e.view_as(if self.dtype().itemsize() == 2 { DType::UInt16 } else { DType::UInt8 })?;
        Ok(e)
    }

    /// Which copies are current; `None` for an import (its memory is its producer's).
    pub fn residency(&self) -> Option<Residency> {
        match self {
            AnyArray::Owned(a) => Some(a.residency()),
            AnyArray::Imported(_) => None,
        }
    }

    /// Makes the copy at `to` current (see `MemArray::move_to`). An
    /// import does not move: `to` must be where its memory is, or its
    /// memory must be host-accessible ([`ImportRefusal::Move`] otherwise).
    pub fn move_to(&mut self, to: Location, s: &AnyStream, mode: Transfer, lock: Option<LockId>) -> Result<()> {
        match self {
            AnyArray::Owned(a) => a.move_to(to, s, mode, lock),
            AnyArray::Imported(f) => {
                f.check_lock("move_memory", lock.map(|l| l.0))?;
                if f.location() == to || is_host_accessible(f.dl().device_type) {
                    return Ok(());
                }
                Err(ImportRefusal::Move { op: "move_memory", at: f.device().info().spec(), to }.into())
            }
        }
    }

    /// Enters a `get_dlpack` block: takes the lock with `id`, then, for an
    /// owned array, makes the copy `prefer` names current again on its
    /// stream, waiting (another thread may have moved the array since the
    /// block was made). An import stays where it is. On failure the lock
    /// is released again.
    pub fn enter_block(&mut self, id: u64, prefer: Option<(Location, &AnyStream)>) -> Result<()> {
        self.enter(id)?;
        let (AnyArray::Owned(a), Some((to, s))) = (&mut *self, prefer) else { return Ok(()) };
        let moved = a.move_to(to, s, Transfer::Sync, Some(LockId(id)));
        if moved.is_err() {
            self.exit();
        }
        moved
    }

    /// The address of the copy DLPack exports by default, to write
    /// through: that copy becomes the only current one (after pending work
    /// on host-reachable memory is waited for). An import gives its memory.
    pub fn data_ptr(&mut self) -> Result<u64> {
        let loc = self.natural();
        let host_reachable = is_host_accessible(self.dl(loc).device_type);
        match self {
            AnyArray::Owned(a) => {
                if host_reachable {
                    a.synchronize()?;
                }
                let (p, _) = a.parts(loc, None)?;
                a.mark_written(loc, None)?;
                Ok(p)
            }
            AnyArray::Imported(f) => Ok(f.data()),
        }
    }

    /// The host memory the NumPy array interface hands out, or `None` when
    /// the host cannot reach the array's natural copy (then the interface
    /// is absent): host and pinned memory and CUDA managed memory it can. An owned array's exported copy becomes the only current one
    /// (the consumer may write it), after its pending work.
    pub fn host_interface(&mut self) -> Result<Option<HostInterface>> {
        let loc = self.natural();
        let dl = self.dl(loc);
        if !is_host_accessible(dl.device_type) {
            return Ok(None);
        }
        Ok(Some(match self {
            AnyArray::Owned(a) => {
                a.synchronize()?;
                let data = a.parts(loc, None)?.0;
                a.mark_written(loc, None)?;
                HostInterface { data, byte_strides: None, read_only: false }
            }
            AnyArray::Imported(f) => {
                HostInterface { data: f.data(), byte_strides: Some(f.byte_strides()), read_only: f.is_read_only() }
            }
        }))
    }

    /// The address of the array's bytes in row-major order in host memory,
    /// and an owner that keeps them alive, for `op` to read: an owned
    /// array's current host copy (or its device copy where that is host
    /// memory), after its pending work ([`ResidencyError`] when the data is
    /// only in device memory); an import's compact host memory
    /// ([`ImportRefusal::NotCompactHost`] otherwise).
    pub fn host_bytes(&mut self, op: &'static str) -> Result<(u64, Arc<dyn Send + Sync>)> {
        let natural = self.natural();
        match self {
            AnyArray::Owned(a) => {
                a.synchronize()?;
                let loc = if a.residency().includes(Location::Host) { Location::Host } else { natural };
                if a.dl_device(loc).device_type != DLDeviceType::CPU {
                    return Err(ResidencyError::new(op, Location::Host, Location::Device).into());
                }
                a.parts(loc, None)
            }
            AnyArray::Imported(f) => {
                if !is_host_accessible(f.dl().device_type) || !f.is_row_major() {
                    return Err(ImportRefusal::NotCompactHost { op }.into());
                }
                Ok((f.data(), f.owner()))
            }
        }
    }

    /// Copies the elements of host-accessible `t` (same dtype) into an
    /// owned array (see `MemArray::read_from_slice`); a tensor of another
    /// shape is [`ShapeError::ShapeMismatch`], and an import is written
    /// through its producer ([`ImportRefusal::ProducerOnly`]).
    pub fn read_host(&mut self, op: &'static str, t: &ImportedTensor, s: &AnyStream) -> Result<()> {
        let shape = self.shape();
        if !t.shape().iter().map(|&e| usize::try_from(e).ok()).eq(shape.iter().map(|&e| Some(e))) {
            let found = t.shape().iter().map(|&e| usize::try_from(e).unwrap_or(usize::MAX)).collect();
            return Err(ShapeError::ShapeMismatch { what: op, expected: shape.to_vec(), found }.into());
        }
        match self {
            AnyArray::Owned(a) => a.read_imported(t, s, None),
            AnyArray::Imported(_) => Err(ImportRefusal::ProducerOnly { op }.into()),
        }
    }

    /// A new owned array with the same contents; an import is copied by
    /// its producer ([`ImportRefusal::ProducerOnly`]).
    pub fn deep_copy(&self, op: &'static str) -> Result<Box<dyn DynArray>> {
        match self {
            AnyArray::Owned(a) => a.try_clone(None),
            AnyArray::Imported(_) => Err(ImportRefusal::ProducerOnly { op }.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynamic::{new_owned, DType};
    use crate::error::Error;

    fn host_array() -> (AnyArray, AnyStream) {
        let dev = crate::open("host").unwrap();
        let s = AnyStream::default_for(&dev);
        (AnyArray::Owned(new_owned(&dev, DType::Int32, &[3]).unwrap()), s)
    }

    #[test]
    fn an_owned_array_moves_and_gives_its_host_bytes() {
        let (mut a, s) = host_array();
        assert_eq!(a.residency(), Some(Residency::Host));
        a.move_to(Location::Device, &s, Transfer::Sync, None).unwrap();
        assert_eq!(a.residency(), Some(Residency::Both));
        let (ptr, _keep) = a.host_bytes("tobytes").unwrap();
        assert_ne!(ptr, 0);
        let view = a.host_interface().unwrap().expect("host memory on the host backend");
        assert_eq!(view.byte_strides, None);
        assert!(!view.read_only);
        assert!(a.deep_copy("copy").is_ok());
    }

    #[test]
    fn residency_is_named_and_host_bytes_are_the_elements() {
        let (mut a, s) = host_array();
        assert_eq!(a.residency_name(), "host");
        a.fill_bytes(&258i32.to_le_bytes(), None).unwrap();
        assert_eq!(a.host_bytes_view("tobytes").unwrap().as_slice(), [2, 1, 0, 0].repeat(3));
        a.add_index(&s, None).unwrap();
        assert_eq!(a.residency_name(), "device");
        a.move_to(Location::Host, &s, Transfer::Sync, None).unwrap();
        assert_eq!(a.residency_name(), "both");
        let dev = crate::open("host").unwrap();
        let mut empty = AnyArray::Owned(new_owned(&dev, DType::Float64, &[0, 4]).unwrap());
        assert!(empty.host_bytes_view("tobytes").unwrap().as_slice().is_empty());
    }

    #[test]
    fn low_precision_elements_export_as_unsigned_bits() {
        let dev = crate::open("host").unwrap();
        for (dtype, bits) in [(DType::BFloat16, 16), (DType::Float8E4M3Fn, 8)] {
            let mut a = AnyArray::Owned(new_owned(&dev, dtype, &[4]).unwrap());
            let e = a.export_host_bits().unwrap();
            assert_eq!(e.dtype(), if bits == 16 { DType::UInt16 } else { DType::UInt8 }, "{dtype:?}");
            assert_eq!(e.device().device_type, DLDeviceType::CPU);
        }
    }

    #[test]
    fn refusals_are_typed() {
        let e: Error = ImportRefusal::Move { op: "move_memory", at: "cuda:0".into(), to: Location::Host }.into();
        assert_eq!(e.python_class().name(), "ResidencyError");
        assert!(
            e.python_message(None).contains("stays where its producer put it (cuda:0)"),
            "{}",
            e.python_message(None)
        );
        let e: Error = ImportRefusal::ProducerOnly { op: "copy" }.into();
        assert!(e.to_string().starts_with("copy of an imported array"), "{e}");
        let e: Error = ImportRefusal::NotCompactHost { op: "tobytes" }.into();
        assert_eq!(e.python_message(None), "tobytes needs compact host memory; the imported array is not");
    }
}
