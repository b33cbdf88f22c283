//! Conversions between Python objects and the core's values: the lowest
//! floor of the binding. Nothing here imports a class file; the class types
//! that a conversion must recognise (`Pointer`, `Device`, `Stream`) are
//! defined here, and their Python methods in the class files above.
//!
//! [`pointer`](mod@pointer) (pointer arguments into `Ptr`s; the `Pointer` type),
//! [`arglist`] (lists, kernel arguments), [`buffer`] (the buffer protocol),
//! [`cai`] (reading the CUDA Array Interface; layouts), [`capsule`] (DLPack
//! capsules), [`dtype`] (element types), [`device`] and [`stream`] (device
//! and stream arguments; the `Device` and `Stream` types).

pub mod arglist;
pub mod buffer;
pub mod cai;
pub mod capsule;
pub mod device;
pub mod dtype;
pub mod pointer;
pub mod stream;
