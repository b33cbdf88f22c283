//! Several processes or GPUs working together: communicators and
//! collectives, written once for every backend.
//!
//! A [`Communicator`] joins one device to a group of ranks. Its collectives
//! (all-reduce, broadcast, reduce, all-gather, reduce-scatter, send and
//! receive) run on a stream, in order with the stream's other work, as
//! kernels do; on `MemArray`s they are ordered with the arrays' pending work
//! too ([`array`](mod@array)).
//!
//! The work is done by an engine per backend, never by gpuport itself on
//! a GPU:
//! - CUDA and ROCm: NCCL and RCCL, loaded at run time through one function
//!   table (the `nccl` module, with the `cuda` or `rocm` feature): RCCL exports NCCL's C API;
//! - the host backend: ranks exchange their data through the job's
//!   [`TcpStore`] ([`host`]), so the whole API runs, and is tested, without
//!   a GPU.
//!
//! Communicators are made in two ways:
//! - one process driving several devices: [`Communicator::init_all`];
//! - one process (or thread) per device: [`Communicator::init_rank`],
//!   which meets the other ranks through a [`TcpStore`] (rank 0 listens on
//!   `GPUPORT_MASTER_ADDR:GPUPORT_MASTER_PORT`).
//!
//! ```
//! use gpuport::{Device, Host, HostDevice, Location, MemArray, Transfer};
//! use gpuport::collective::{Communicator, ReduceOp};
//! let dev = HostDevice::open(0)?;
//! // Two ranks driven by one process (on the host backend, both on host:0).
//! let comms = Communicator::<Host>::init_all(&[dev.clone(), dev.clone()])?;
//! let mut a = MemArray::<f32, 1, _>::from_vec(&dev, [3], vec![1.0, 2.0, 3.0])?;
//! let mut b = MemArray::<f32, 1, _>::from_vec(&dev, [3], vec![10.0, 20.0, 30.0])?;
//! let s = dev.default_stream();
//! Communicator::all_reduce_arrays(&comms, &mut [&mut a, &mut b], ReduceOp::Sum, &[s, s])?;
//! a.move_to(Location::Host, s, Transfer::Sync, None)?;
//! assert_eq!(a.to_vec(None)?, vec![11.0, 22.0, 33.0]);
//! # Ok::<(), gpuport::Error>(())
//! ```
//!
//! - `store.rs`: [`TcpStore`], the bootstrap; `store/server.rs`: its
//!   server, which trusts no client;
//! - `engine.rs`: what an engine does, the collectives' description ([`Op`]);
//! - `communicator.rs`: [`Communicator`], its checks and its watchdog;
//! - `rendezvous.rs`: ranks meeting to make a communicator, failing fast
//!   when one of them fails;
//! - `regroup.rs`: [`Communicator::split`] and [`Communicator::shrink`];
//! - `registration.rs`: [`Communicator::register`], and
//!   [`AnyCommunicator::register_range`] for bindings;
//! - `array.rs`: collectives on `MemArray`s;
//! - `nccl/`: the NCCL/RCCL table and the GPU engine;
//! - `host.rs`: the host engine;
//! - `any.rs`: [`AnyCommunicator`], a communicator of a backend chosen at run time;
//! - `operands.rs`: one collective as a binding calls it: its buffers
//!   ([`Operands`], sorted from the caller's objects by [`Sides`]), their
//!   checks, the whole call ([`AnyCommunicator::collective`]), and a
//!   binding's group ([`AnyCommunicator::group_with`]).

mod any;
pub mod arguments;
pub mod array;
mod communicator;
mod engine;
pub mod host;
#[cfg(any(feature = "cuda", feature = "rocm"))]
pub mod nccl;
pub mod operands;
mod poll;
mod registration;
mod regroup;
mod rendezvous;
pub mod store;

pub use crate::error::collective::ArgumentError;
pub use any::{AnyCommunicator, Communicators};
pub use communicator::Communicator;
pub use engine::{CallMode, CollectiveBackend, Op, OpKind, ReduceOp};
pub use operands::{Captured, Given, GroupFailure, Operand, Operands, Sides};
pub use registration::{RangeRegistration, Registration};
pub use rendezvous::{
    fail_next_engine_init_on_this_thread, fail_next_init_on_this_thread, fake_next_engine_version_on_this_thread,
};
pub use store::TcpStore;
