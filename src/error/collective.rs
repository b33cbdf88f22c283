//! [`ArgumentError`]: a collective's arguments that its communicator cannot
//! take (see [`crate::collective::Operands`]).
//!
//! Public as `gpuport::collective::ArgumentError`. It is defined in the
//! error layer, beside the [`Error`](super::Error) that wraps it, as
//! `DLPackError` is: the error layer names nothing above it.

/// Why a collective refused its arguments (an
/// [`Error::CollectiveArgument`](crate::Error::CollectiveArgument)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgumentError {
    /// No collective has this name ([`OpKind::from_name`](crate::collective::OpKind::from_name)).
    #[error("collective {0:?}: use all_reduce, broadcast, reduce, all_gather, reduce_scatter, send or recv")]
    UnknownCollective(String),
    /// No reduction has this name.
    #[error("op {0:?}: use \"sum\", \"prod\", \"max\", \"min\" or \"avg\"")]
    UnknownReduction(String),
    /// The collective reads or writes `elems` elements on side `what`, and
    /// no buffer was given there.
    #[error("{op}: {what} is needed ({elems} elements)")]
    Missing {
        /// The collective, as `Op` writes it (`"all_reduce(sum) of 4 float32"`).
        op: String,
        /// `"send"` or `"recv"`.
        what: &'static str,
        /// The elements it needs.
        elems: usize,
    },
    /// The collective's byte count on one side overflows.
    #[error("{op}: too many elements")]
    TooManyElements {
        /// The collective, as `Op` writes it (`"all_reduce(sum) of 4 float32"`).
        op: String,
    },
    /// An array with fewer bytes than the collective reads or writes.
    #[error("{op}: {what} holds {have} bytes, and the collective needs {need}")]
    TooSmall {
        /// The collective, as `Op` writes it (`"all_reduce(sum) of 4 float32"`).
        op: String,
        /// `"send"` or `"recv"`.
        what: &'static str,
        /// The array's bytes.
        have: usize,
        /// The collective's bytes on this side.
        need: usize,
    },
    /// A read-only buffer where the collective writes.
    #[error("{op}: {what} is read-only")]
    ReadOnly {
        /// The collective, as `Op` writes it (`"all_reduce(sum) of 4 float32"`).
        op: String,
        /// The side written (`"recv"`).
        what: &'static str,
    },
    /// Host memory given to a GPU engine, which would fault on it.
    #[error("{what} is host memory; a {device} communicator needs memory of its device")]
    HostMemory {
        /// `"send"` or `"recv"`.
        what: &'static str,
        /// The communicator's device, e.g. `"cuda:0"`.
        device: String,
    },
    /// Memory the host engine cannot check: a bare address (never
    /// dereferenced), or memory the host cannot reach.
    #[error("{what}: the host engine reads and writes only host memory it holds; a bare address is not dereferenced")]
    NotHeld {
        /// `"send"` or `"recv"`.
        what: &'static str,
    },
}
