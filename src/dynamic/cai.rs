//! The CUDA Array Interface (versions 0 to 3) as data: what a binding
//! read from an object's `__cuda_array_interface__` ([`CudaArrayInterface`]),
//! the memory its shape, strides and type describe ([`Layout`]), and its
//! import as an [`ImportedArray`] with every check of the interface's rules,
//! and its export from an array ([`export`]): which arrays have it, which
//! copy becomes current and which stream the consumer is handed.
//!
//! ```
//! use gpuport::dynamic::cai::Layout;
//! // A 2x3 array of 4-byte elements, row-major, then its transpose.
//! let c = Layout::of(&[2, 3], Some(&[12, 4]), 4)?;
//! assert!(c.c_order && !c.f_order && c.bytes == 24);
//! let f = Layout::of(&[2, 3], Some(&[4, 8]), 4)?;
//! assert!(f.f_order && !f.c_order && f.is_dense());
//! assert!(!Layout::of(&[2, 3], Some(&[24, 8]), 4)?.is_dense()); // every other element
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::sync::Arc;

use super::array::{check_extents, AnyArray, Shape, MAX_EXTENT};
use super::imported::{ImportedArray, RawImport};
use super::stream::AnyStream;
use crate::array::dtype::DType;
use crate::array::Location;
use crate::backend::registry::AnyDevice;
use crate::dlpack::{DLDevice, DLDeviceType};
use crate::error::python::tuple;
use crate::error::{BackendKind, Error, Result};

fn invalid(name: &'static str, reason: String) -> Error {
    Error::InvalidArgument { name, reason }
}

/// The memory a shape, strides and element size describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of all elements (the range's size when the layout is dense).
    pub bytes: usize,
    /// Row-major (C order) without gaps.
    pub c_order: bool,
    /// Column-major (Fortran order) without gaps.
    pub f_order: bool,
}

impl Layout {
    /// Whether the elements fill one contiguous range (C or Fortran order).
    pub fn is_dense(&self) -> bool {
        self.c_order || self.f_order
    }

    /// The layout of `shape` with `strides` in bytes (`None`: C order) of
    /// `itemsize`-byte elements. Refused ([`Error::InvalidArgument`]):
    /// sizes beyond [`MAX_EXTENT`] bytes, strides of another rank.
    pub fn of(shape: &[usize], strides: Option<&[i64]>, itemsize: usize) -> Result<Layout> {
        let too_large = || {
            invalid(
                "shape",
                format!(
                    "shape {} of {itemsize}-byte elements is too large (more than {MAX_EXTENT} bytes)",
                    tuple(shape)
                ),
            )
        };
        let elems = shape.iter().try_fold(1usize, |acc, &e| acc.checked_mul(e)).ok_or_else(too_large)?;
        let bytes = elems.checked_mul(itemsize).filter(|&b| b as u64 <= MAX_EXTENT).ok_or_else(too_large)?;
        let Some(strides) = strides else { return Ok(Layout { bytes, c_order: true, f_order: shape.len() <= 1 }) };
        if strides.len() != shape.len() {
            return Err(invalid("strides", format!("strides {} do not match shape {}", tuple(strides), tuple(shape))));
        }
        if elems == 0 {
            return Ok(Layout { bytes: 0, c_order: true, f_order: true });
        }
        // The extents and the element size fit in `i64`: their product,
        // `bytes`, is at most `MAX_EXTENT`.
        let wide = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let compact = |axes: &mut dyn Iterator<Item = usize>| {
            let mut expect = wide(itemsize);
            for a in axes {
                if shape[a] != 1 && strides[a] != expect {
                    return false;
                }
                expect = expect.saturating_mul(wide(shape[a]));
            }
            true
        };
        let c_order = compact(&mut (0..shape.len()).rev());
        let f_order = compact(&mut (0..shape.len()));
        Ok(Layout { bytes, c_order, f_order })
    }
}

/// Bytes per element of an array-interface type string such as `"<f4"`.
///
/// ```
/// assert_eq!(gpuport::dynamic::cai::itemsize_of("<f8")?, 8);
/// assert!(gpuport::dynamic::cai::itemsize_of("float32").is_err());
/// # Ok::<(), gpuport::Error>(())
/// ```
pub fn itemsize_of(typestr: &str) -> Result<usize> {
    let b = typestr.as_bytes();
    let ok = b.len() >= 3 && matches!(b[0], b'<' | b'>' | b'|' | b'=') && b[1].is_ascii_alphabetic();
    let n: Option<usize> = if ok { typestr[2..].parse().ok() } else { None };
    match n {
        Some(n) if n > 0 => Ok(n),
        _ => Err(invalid(
            "typestr",
            format!("typestr {typestr:?} is not an array-interface type string such as \"<f4\" or \"|u1\""),
        )),
    }
}

/// The device an interface's memory is imported on when the caller names none.
pub const DEFAULT_DEVICE: &str = "cuda:0";

/// What an object's `__cuda_array_interface__` says, as a binding read it.
#[derive(Debug, Clone, Default)]
pub struct CudaArrayInterface {
    /// `version`, where given (0 to 3).
    pub version: Option<i64>,
    /// The device address of the first element.
    pub data: u64,
    /// The producer marked the memory read-only.
    pub read_only: bool,
    /// `shape`, where given.
    pub shape: Option<Vec<usize>>,
    /// `typestr`, where given.
    pub typestr: Option<String>,
    /// Strides in bytes; `None`: C order.
    pub strides: Option<Vec<i64>>,
    /// A `mask` was given.
    pub masked: bool,
    /// `stream` (version 3): the producer's stream, to wait for.
    pub stream: Option<isize>,
}

impl CudaArrayInterface {
    /// The layout, when the interface gives a shape and a type string.
    pub fn layout(&self) -> Result<Option<Layout>> {
        let (Some(shape), Some(typestr)) = (&self.shape, &self.typestr) else { return Ok(None) };
        Layout::of(shape, self.strides.as_deref(), itemsize_of(typestr)?).map(Some)
    }

    /// Imports the memory the interface describes on `device` (a CUDA
    /// device; `None`: `cuda:0`, opened first, as the interface names no
    /// device), without a copy; `keep` (the producer) is kept alive while
    /// the array, or an export of it, is. With a `stream` (version 3),
    /// `device`'s default stream waits for it.
    ///
    /// Refused ([`Error::InvalidArgument`] unless said): no version, a
    /// mask, no shape or type string, a type gpuport has no dtype for
    /// ([`Error::Unsupported`]), strides that are not whole elements,
    /// extents past [`MAX_EXTENT`] bytes ([`Error::Shape`]), a device that
    /// is not a CUDA device ([`Error::NoDevice`]), a null address for an
    /// array with elements, the stream 0 the interface disallows.
    ///
    /// # Safety
    /// The producer states that `data` is device memory of `device` of the
    /// shape, strides and type described, valid while `keep` lives and
    /// writable unless `read_only`, and that `stream`, where given, is a
    /// live stream of `device`.
    pub unsafe fn import(self, device: Option<&AnyDevice>, keep: Arc<dyn Send + Sync>) -> Result<ImportedArray> {
        let default;
        let device = match device {
            Some(d) => d,
            None => {
                default = crate::open(DEFAULT_DEVICE)?;
                &default
            }
        };
        let Some(version) = self.version else {
            return Err(invalid(
                "__cuda_array_interface__",
                "it has no \"version\"; versions 0 to 3 of the interface are read".into(),
            ));
        };
        if self.masked {
            return Err(invalid("__cuda_array_interface__", "masked CUDA arrays are not supported".into()));
        }
        let (Some(shape), Some(typestr)) = (self.shape.clone(), self.typestr.clone()) else {
            let k = if self.shape.is_none() { "shape" } else { "typestr" };
            return Err(invalid("__cuda_array_interface__", format!("it has no {k:?}")));
        };
        let dtype = DType::from_typestr(&typestr).ok_or_else(|| Error::Unsupported {
            op: "importing this CUDA Array Interface type",
            backend: device.backend(),
            hint: Some(format!("typestr {typestr:?} is not supported; supported: {}", DType::supported())),
        })?;
        let item = i64::try_from(dtype.itemsize()).unwrap_or(i64::MAX);
        let layout = self.layout()?.unwrap_or(Layout { bytes: 0, c_order: true, f_order: true });
        check_extents(&shape, dtype.itemsize())?;
        let strides: Vec<i64> = match &self.strides {
            Some(bytes) if bytes.iter().any(|b| b % item != 0) => {
                return Err(invalid(
                    "strides",
                    format!("strides {} (bytes) are not whole {item}-byte elements", tuple(bytes)),
                ))
            }
            Some(bytes) => bytes.iter().map(|b| b / item).collect(),
            None => row_major(&shape),
        };
        if device.backend() != BackendKind::Cuda {
            return Err(Error::NoDevice {
                backend: BackendKind::Cuda,
                reason: format!("CUDA Array Interface memory needs a CUDA device, not {}", device.info().spec()),
            });
        }
        if layout.bytes > 0 && self.data == 0 {
            return Err(invalid("data", "the CUDA Array Interface data pointer is null".into()));
        }
        if let Some(h) = self.stream.filter(|_| version >= 3) {
            let handle = usize::try_from(h).ok().filter(|&h| h != 0).ok_or_else(|| {
                invalid("stream", format!("CUDA Array Interface stream {h} is disallowed by the spec"))
            })?;
            // SAFETY: the producer states it is a live stream of `device`
            // (this function's contract); used only for this record.
            let theirs = unsafe { AnyStream::borrow(device, handle) }?;
            AnyStream::default_for(device).wait(&theirs.record()?)?;
        }
        let raw = RawImport {
            dtype,
            shape: shape.into(),
            strides: strides.into(),
            data: self.data,
            dl: DLDevice {
                device_type: DLDeviceType::CUDA,
                device_id: i32::try_from(device.info().ordinal).unwrap_or(i32::MAX),
            },
            read_only: self.read_only,
            device: device.clone(),
        };
        // SAFETY: this function's contract: the memory the interface
        // describes is device memory of `device`, valid while `keep` lives.
        unsafe { ImportedArray::from_raw(raw, keep) }
    }
}

/// Row-major strides in elements (extents of zero counted as one).
fn row_major(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for a in (0..shape.len()).rev() {
        s[a] = acc;
        acc = acc.saturating_mul(i64::try_from(shape[a].max(1)).unwrap_or(i64::MAX));
    }
    s
}

// ---- export -------------------------------------------------------------------------

/// The entries of an array's `__cuda_array_interface__` (version 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedInterface {
    /// `shape`.
    pub shape: Shape,
    /// `typestr` (and `descr`'s one field).
    pub typestr: &'static str,
    /// `data`'s address.
    pub data: u64,
    /// `data`'s read-only flag.
    pub read_only: bool,
    /// `strides` in bytes; `None`: C order.
    pub strides: Option<Vec<i64>>,
    /// `stream`: a stream of the device that waits for the array's pending
    /// work, for the consumer to wait for; `None` when there is none.
    pub stream: Option<usize>,
}

/// An array's CUDA Array Interface, or why it has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterfaceExport {
    /// The interface.
    Present(ExportedInterface),
    /// The array has no interface: a binding reports the attribute as
    /// absent (Python's `hasattr` is false), with this message.
    Absent(String),
}

fn absent(what: String) -> InterfaceExport {
    InterfaceExport::Absent(format!(
        "__cuda_array_interface__ is defined for CUDA-resident arrays only; {what}; use __dlpack__ (ROCm and host \
         memory have no CUDA Array Interface)"
    ))
}

/// The CUDA Array Interface of `array`, defined for CUDA memory only.
///
/// An owned array has it on a CUDA device while its device copy is
/// current; the device copy then becomes the only current one (the
/// consumer may write it: the next host read copies it back), and pending
/// work is handed over as a stream that waits for it (an event, not a
/// host wait). An import has it where its memory is CUDA or CUDA managed
/// memory, read-only as its producer said, with no stream. A dtype without
/// an array-interface type string has none.
///
/// ```
/// use gpuport::dynamic::cai::{export, InterfaceExport};
/// use gpuport::dynamic::{new_owned, AnyArray, DType};
/// let mut a = AnyArray::Owned(new_owned(&gpuport::open("host")?, DType::Float32, &[3])?);
/// let InterfaceExport::Absent(why) = export(&mut a)? else { panic!("a host array") };
/// assert!(why.contains("this array is on host"));
/// # Ok::<(), gpuport::Error>(())
/// ```
pub fn export(array: &mut AnyArray) -> Result<InterfaceExport> {
    let dtype = array.dtype();
    let Some(typestr) = dtype.typestr() else {
        return Ok(absent(format!("{} has no array-interface type string", dtype.name())));
    };
    match array {
        AnyArray::Owned(a) => {
            let dev = a.device();
            if dev.backend() != BackendKind::Cuda {
                return Ok(absent(format!("this array is on {}", dev.info().spec())));
            }
            if !a.residency().includes(Location::Device) {
                return Ok(absent("its device copy is not current (call move_memory(\"device\") first)".into()));
            }
            let (data, _) = a.parts(Location::Device, None)?;
            let stream = if a.transfer_pending()? {
                let s = AnyStream::export_stream(&dev)?;
                a.order_on(&s)?;
                Some(s.handle())
            } else {
                None
            };
            a.mark_written(Location::Device, None)?;
            Ok(InterfaceExport::Present(ExportedInterface {
                shape: a.shape(),
                typestr,
                data,
                read_only: false,
                strides: None,
                stream,
            }))
        }
        AnyArray::Imported(f) => {
            let dl = f.dl();
            if dl.device_type != DLDeviceType::CUDA && dl.device_type != DLDeviceType::CUDA_MANAGED {
                return Ok(absent(format!("this imported array is on DLPack device {}", dl.device_type.0)));
            }
            Ok(InterfaceExport::Present(ExportedInterface {
                shape: f.shape().clone(),
                typestr,
                data: f.data(),
                read_only: f.is_read_only(),
                strides: Some(f.byte_strides()),
                stream: None,
            }))
        }
    }
}
