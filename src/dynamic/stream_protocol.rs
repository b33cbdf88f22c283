//! A foreign stream object's handle as a binding reads it: the rule of
//! cuda.core's `__cuda_stream__` protocol (a 2-tuple `(0, handle)`), which
//! handles name a stream, and when the object must be kept.
//!
//! ```
//! use gpuport::dynamic::stream_protocol::{cuda_stream_handle, GivenItem, GivenValue};
//! let value = GivenValue::Tuple(vec![GivenItem::Int(0), GivenItem::Int(0x1234)]);
//! assert_eq!(cuda_stream_handle("Stream", value), Ok(0x1234));
//! ```

use crate::error::python::ExceptionClass;

/// One item of the value, as the binding read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GivenItem {
    /// An integer that fits in `isize`.
    Int(isize),
    /// Anything else, by its type's name.
    Other(String),
}

/// What `__cuda_stream__` gave (called where it is a method, read where an
/// attribute), as the binding read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GivenValue {
    /// A tuple, item by item.
    Tuple(Vec<GivenItem>),
    /// Anything else, by its type's name.
    Other(String),
}

/// Why a stream argument names no stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamArgError {
    /// `__cuda_stream__` gave no 2-tuple of ints.
    #[error("{owner}.__cuda_stream__ must give a 2-tuple of ints (version, handle), with version 0; got {got}")]
    Shape {
        /// The type of the stream object.
        owner: String,
        /// What it gave instead (`"a list"`, `"a tuple of 3 item(s)"`).
        got: String,
    },
    /// `__cuda_stream__` gave another version than 0.
    #[error("{owner}.__cuda_stream__ gave version {version}; gpuport accepts version 0 only, (0, handle)")]
    Version {
        /// The type of the stream object.
        owner: String,
        /// The version given.
        version: isize,
    },
    /// A negative handle.
    #[error("stream {0} is not a stream handle")]
    NotAHandle(isize),
}

impl StreamArgError {
    /// The Python class: `TypeError` for a value of the wrong shape,
    /// `ValueError` otherwise.
    pub fn python_class(&self) -> ExceptionClass {
        match self {
            StreamArgError::Shape { .. } => ExceptionClass::Type,
            _ => ExceptionClass::Value,
        }
    }
}

/// `"an int"`, `"a tuple"`: a type's name with its article.
fn a_or_an(name: &str) -> String {
    let vowel = name.starts_with(|c: char| "aeiouAEIOU".contains(c));
    format!("{} {name}", if vowel { "an" } else { "a" })
}

/// The handle in the `__cuda_stream__` value of an object of type `owner`:
/// its `(0, handle)`. Another shape or item type is
/// [`StreamArgError::Shape`], another version [`StreamArgError::Version`].
///
/// ```
/// use gpuport::dynamic::stream_protocol::{cuda_stream_handle, GivenItem, GivenValue, StreamArgError};
/// let v1 = GivenValue::Tuple(vec![GivenItem::Int(1), GivenItem::Int(7)]);
/// assert!(matches!(cuda_stream_handle("S", v1), Err(StreamArgError::Version { version: 1, .. })));
/// ```
pub fn cuda_stream_handle(owner: &str, value: GivenValue) -> Result<isize, StreamArgError> {
    let shape = |got: String| StreamArgError::Shape { owner: owner.to_string(), got };
    let items = match value {
        GivenValue::Tuple(items) if items.len() == 2 => items,
        GivenValue::Tuple(items) => return Err(shape(format!("a tuple of {} item(s)", items.len()))),
        GivenValue::Other(type_name) => return Err(shape(a_or_an(&type_name))),
    };
    let int = |item: &GivenItem, what: &str| match item {
        GivenItem::Int(i) => Ok(*i),
        GivenItem::Other(type_name) => Err(shape(format!("{} as the {what}", a_or_an(type_name)))),
    };
    let (version, handle) = (int(&items[0], "version")?, int(&items[1], "handle")?);
    if version != 0 {
        return Err(StreamArgError::Version { owner: owner.to_string(), version });
    }
    Ok(handle)
}

/// The stream handle an integer names: a negative one names none.
///
/// ```
/// use gpuport::dynamic::stream_protocol::stream_handle;
/// assert_eq!(stream_handle(2), Ok(2));
/// assert!(stream_handle(-1).is_err());
/// ```
pub fn stream_handle(handle: isize) -> Result<usize, StreamArgError> {
    usize::try_from(handle).map_err(|_| StreamArgError::NotAHandle(handle))
}

/// Whether a call keeps the object that named stream `handle` until its
/// work has run: an object that is not an int and names a stream other than
/// the default (0), which it may own.
///
/// ```
/// use gpuport::dynamic::stream_protocol::keeps_stream_object;
/// assert!(keeps_stream_object(0x1234, false));
/// assert!(!keeps_stream_object(0, false) && !keeps_stream_object(0x1234, true));
/// ```
pub fn keeps_stream_object(handle: usize, is_int: bool) -> bool {
    handle != 0 && !is_int
}
