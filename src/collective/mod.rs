//! Several processes or GPUs working together (issue "scale-out").
//!
//! So far: [`TcpStore`], the key-value store through which the ranks of a
//! multi-process job meet (rank 0 listens on `GPUPORT_MASTER_ADDR:PORT`,
//! as `torch.distributed` does with `MASTER_ADDR`). It stands on nothing but
//! the standard library, so the bootstrap of every communicator (NCCL's
//! and RCCL's unique id, the host backend's) is written once, here.
//!
//! Still to build on it: the NCCL/RCCL function table loaded at run time,
//! communicators over it and over the host backend, collectives on
//! `MemArray`s and buffers, and peer copies.

pub mod store;

pub use store::TcpStore;
