//! Which route a binding takes to import another library's array: the order
//! of `from_dlpack`'s routes (a gpuport array, DLPack 1.3's C exchange
//! table, the `__dlpack__` protocol), what `copy=True` asks of the producer,
//! the versions `__dlpack__` is called with, `asarray`'s protocol order, and
//! the lazy views a table's import refuses.
//! The binding says what an object offers; these functions decide.
//!
//! ```
//! use gpuport::dynamic::import_route::{from_dlpack_route, DlpackRoute, ProtocolCall};
//! // A NumPy array: no exchange table, so the `__dlpack__` protocol.
//! let route = from_dlpack_route(None, || Ok::<_, ()>(false), || Ok(None::<()>))?;
//! assert_eq!(route, DlpackRoute::Protocol(ProtocolCall { ask_copy: None, host_copy: false }));
//! # Ok::<(), ()>(())
//! ```

use crate::dlpack::ffi::DLPACK_MINOR_VERSION;
use crate::dlpack::DLPackError;
use crate::error::Error;

/// A way `asarray` can take an object, as a binding finds it on the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// The object is a gpuport array.
    GpuportArray,
    /// It has `__dlpack__` (or is a DLPack capsule).
    Dlpack,
    /// It has `__cuda_array_interface__`.
    CudaArrayInterface,
}

/// How `from_dlpack` imports an object; `T`: the exchange table found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DlpackRoute<T = ()> {
    /// A gpuport array, as through its own exchange table but with no
    /// tensor in between.
    GpuportArray,
    /// Through the type's C exchange table, with no Python call.
    ExchangeTable(T),
    /// Through `__dlpack__` (or the capsule given).
    Protocol(ProtocolCall),
}

/// An import through `__dlpack__`: the producer asked for `ask_copy`; with
/// `host_copy`, gpuport then makes an owned host copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolCall {
    /// The `copy` argument passed to the producer.
    pub ask_copy: Option<bool>,
    /// Whether gpuport copies the tensor into a new host array.
    pub host_copy: bool,
}

/// `from_dlpack(obj, copy=copy)`'s route. With `copy=None`: a gpuport
/// array as itself, else the exchange table where the object's type offers
/// one (`exchange_table` finds it: a known major version with a consumer's
/// functions), else `__dlpack__`. `copy=True` makes the copy in gpuport
/// (the producer is not asked for one, so no copy is made twice);
/// `copy=False` is passed on. The probes run in that order, only as far as
/// needed.
///
/// ```
/// use gpuport::dynamic::import_route::{from_dlpack_route, DlpackRoute, ProtocolCall};
/// // A torch tensor: not gpuport's, its type has a table.
/// let (not_ours, table) = (|| Ok::<_, ()>(false), || Ok(Some("torch's table")));
/// assert_eq!(from_dlpack_route(None, not_ours, table)?, DlpackRoute::ExchangeTable("torch's table"));
/// assert_eq!(
///     from_dlpack_route(Some(true), not_ours, table)?,
///     DlpackRoute::Protocol(ProtocolCall { ask_copy: None, host_copy: true })
/// );
/// # Ok::<(), ()>(())
/// ```
pub fn from_dlpack_route<T, E>(
    copy: Option<bool>,
    is_gpuport_array: impl FnOnce() -> Result<bool, E>,
    exchange_table: impl FnOnce() -> Result<Option<T>, E>,
) -> Result<DlpackRoute<T>, E> {
    if copy.is_some() {
        return Ok(DlpackRoute::Protocol(protocol_route(copy)));
    }
    if is_gpuport_array()? {
        return Ok(DlpackRoute::GpuportArray);
    }
    if let Some(table) = exchange_table()? {
        return Ok(DlpackRoute::ExchangeTable(table));
    }
    Ok(DlpackRoute::Protocol(protocol_route(None)))
}

/// The `__dlpack__` protocol's route for `copy` (what `from_dlpack` takes
/// when no other route applies): `copy=True` asks the producer for no copy
/// and copies into a new host array.
///
/// ```
/// use gpuport::dynamic::import_route::{protocol_route, ProtocolCall};
/// assert_eq!(protocol_route(Some(false)), ProtocolCall { ask_copy: Some(false), host_copy: false });
/// ```
pub fn protocol_route(copy: Option<bool>) -> ProtocolCall {
    match copy {
        Some(true) => ProtocolCall { ask_copy: None, host_copy: true },
        other => ProtocolCall { ask_copy: other, host_copy: false },
    }
}

/// The `max_version` of each `__dlpack__` call, in order: first
/// `(1, DLPACK_MINOR_VERSION)` with `stream` and `copy` (a versioned capsule,
/// which carries the read-only and padded sub-byte flags); then, when the
/// producer refuses those keywords (a `TypeError`: older than DLPack 1.0),
/// `None`: only `stream`, for a legacy capsule.
///
/// ```
/// use gpuport::dynamic::import_route::DLPACK_CALLS;
/// assert_eq!(DLPACK_CALLS[0].map(|v| v.0), Some(1));
/// assert_eq!(DLPACK_CALLS[1], None);
/// ```
pub const DLPACK_CALLS: [Option<(u32, u32)>; 2] = [Some((1, DLPACK_MINOR_VERSION)), None];

/// How `asarray` takes an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsarrayRoute {
    /// A gpuport array: returned as it is.
    Itself,
    /// Through DLPack: `from_dlpack`, or with a device asked for, the
    /// producer's `__dlpack__` and the import placed on that device.
    Dlpack,
    /// Through the CUDA Array Interface.
    CudaArrayInterface,
    /// Converted by NumPy (a copy), then taken as NumPy's array.
    NumpyConversion,
}

/// `asarray`'s route: a gpuport array as itself, then DLPack, then the CUDA
/// Array Interface, else NumPy's conversion. `offers` is asked in that
/// order, only as far as needed (reading `__cuda_array_interface__` may
/// cost its producer a synchronization).
///
/// ```
/// use gpuport::dynamic::import_route::{asarray_route, AsarrayRoute, Offer};
/// let numba_array = |o: Offer| Ok::<_, ()>(o == Offer::CudaArrayInterface);
/// assert_eq!(asarray_route(numba_array)?, AsarrayRoute::CudaArrayInterface);
/// assert_eq!(asarray_route(|_| Ok::<_, ()>(false))?, AsarrayRoute::NumpyConversion);
/// # Ok::<(), ()>(())
/// ```
pub fn asarray_route<E>(mut offers: impl FnMut(Offer) -> Result<bool, E>) -> Result<AsarrayRoute, E> {
    for (offer, route) in [
        (Offer::GpuportArray, AsarrayRoute::Itself),
        (Offer::Dlpack, AsarrayRoute::Dlpack),
        (Offer::CudaArrayInterface, AsarrayRoute::CudaArrayInterface),
    ] {
        if offers(offer)? {
            return Ok(route);
        }
    }
    Ok(AsarrayRoute::NumpyConversion)
}

/// A lazy-view bit a tensor may carry (torch's conjugate and negative bits):
/// its memory then holds the values without it applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LazyView {
    /// `is_conj()`.
    Conjugate,
    /// `is_neg()`.
    Negative,
}

impl LazyView {
    /// The method that says whether the bit is set: `"is_conj"`, `"is_neg"`.
    pub fn method(self) -> &'static str {
        match self {
            LazyView::Conjugate => "is_conj",
            LazyView::Negative => "is_neg",
        }
    }
}

/// Refuses a tensor imported through an exchange table whose memory holds
/// other values than the tensor: a lazy-view bit set (the Python protocol
/// refuses it, the table may export it anyway). A gpuport array has none
/// and is not asked. `is_set` is asked for each bit in turn (`Err`: the
/// probe failed); the inner `Err` is the refusal, a
/// [`DLPackError::LazyView`] naming the tensor's `type_name`.
///
/// ```
/// use gpuport::dynamic::import_route::{refuse_lazy_views, LazyView};
/// let conj = |v: LazyView| Ok::<_, ()>(v == LazyView::Conjugate);
/// assert!(refuse_lazy_views(false, conj, || "Tensor".into())?.is_err());
/// assert!(refuse_lazy_views(true, conj, || "MemArray".into())?.is_ok());
/// # Ok::<(), ()>(())
/// ```
pub fn refuse_lazy_views<E>(
    is_gpuport_array: bool,
    mut is_set: impl FnMut(LazyView) -> Result<bool, E>,
    type_name: impl FnOnce() -> String,
) -> Result<Result<(), Error>, E> {
    if is_gpuport_array {
        return Ok(Ok(()));
    }
    for (view, bit, resolve) in
        [(LazyView::Conjugate, "conjugate", "resolve_conj()"), (LazyView::Negative, "negative", "resolve_neg()")]
    {
        if is_set(view)? {
            return Ok(Err(DLPackError::LazyView { type_name: type_name(), bit, resolve }.into()));
        }
    }
    Ok(Ok(()))
}
