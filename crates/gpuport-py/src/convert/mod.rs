//! Conversions between Python objects and the core's values: the lowest
//! floor of the binding. Nothing here imports a class file; the class types
//! that a conversion must recognise or that several class files hand out
//! (`Pointer`, `Device`, `Stream`, `MemArray`) are defined here, and their
//! Python methods in the class files above.
//!
//! [`pointer`](mod@pointer) (pointer arguments into `Ptr`s; the `Pointer` type),
//! [`arglist`] (lists, kernel arguments), [`buffer`] (the buffer protocol),
//! [`cai`] (the CUDA Array Interface, read and written; layouts),
//! [`capsule`] (DLPack capsules), [`exchange`] (a `MemArray`'s DLPack
//! export and import, array-interface dicts), [`exchange_api`] (DLPack
//! 1.3's C exchange table), [`dtype`] (element types), [`device`] and
//! [`stream`] (device and stream arguments; the `Device` and `Stream`
//! types), [`memarray`] (the `MemArray` type and its state), [`exclusive`]
//! (the core's lock, waited for with the GIL released) and [`error`] (the
//! exception classes and the one mapping of the core's errors).

pub mod arglist;
pub mod buffer;
pub mod cai;
pub mod capsule;
pub mod device;
pub mod dtype;
pub mod error;
pub mod exchange;
pub mod exchange_api;
pub mod exclusive;
pub mod memarray;
pub mod pointer;
pub mod stream;
