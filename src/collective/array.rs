//! Collectives on [`MemArray`]s: safe, and ordered like the arrays' kernel
//! methods. Each moves its arrays to the device (on the stream), makes the
//! stream wait for their pending work, enqueues the collective, and records
//! it as their pending work, so host access waits for it.
//!
//! They are refused inside [`Communicator::group`] (the engine would run
//! them after the arrays recorded their pending work). The calls that need
//! a group are made whole here instead: [`Communicator::send_recv_array`],
//! and [`Communicator::all_reduce_arrays`] for the communicators of
//! [`Communicator::init_all`].

use std::cell::Cell;

use crate::array::dtype::DType;
use crate::array::{Element, MemArray};
use crate::backend::order::hold_in_order;
use crate::backend::{Device, Stream};
use crate::error::{Error, Result};

use super::engine::{CollectiveBackend, Op, OpKind, ReduceOp};
use super::Communicator;

thread_local! {
    /// How deeply this thread is inside `Communicator::group`.
    pub(super) static GROUP_DEPTH: Cell<usize> = const { Cell::new(0) };
}

fn dtype_of<T: Element>() -> Result<DType> {
    DType::from_dlpack(T::DTYPE).ok_or_else(|| Error::InvalidArgument {
        name: "array",
        reason: format!("collectives take arrays of scalar elements, not {:?}", T::DTYPE),
    })
}

fn refuse_in_group(what: &'static str) -> Result<()> {
    if GROUP_DEPTH.with(Cell::get) > 0 {
        return Err(Error::InvalidArgument {
            name: "group",
            reason: format!(
                "{what} on arrays cannot run inside Communicator::group (the array would count the collective as \
                 done before the group enqueued it); use send_recv_array or all_reduce_arrays, which group their \
                 calls themselves, or the unsafe enqueue on buffers"
            ),
        });
    }
    Ok(())
}

type Array<T, const N: usize, B> = MemArray<T, N, <B as crate::Backend>::Device>;

impl<B: CollectiveBackend> Communicator<B> {
    fn check_device<T: Element, const N: usize>(&self, what: &'static str, a: &Array<T, N, B>) -> Result<()> {
        let (mine, theirs) = (self.device().info(), a.device().info());
        if mine.ordinal != theirs.ordinal {
            return Err(Error::DeviceMismatch { what, expected: mine.spec(), found: theirs.spec() });
        }
        Ok(())
    }

    /// `op` in place on `a` (send and receive are the array's device copy).
    fn in_place<T: Element, const N: usize>(
        &self,
        kind: OpKind,
        a: &mut Array<T, N, B>,
        stream: &Stream<B>,
    ) -> Result<()> {
        refuse_in_group(kind.name())?;
        self.check_device("array", a)?;
        let op = Op { kind, dtype: dtype_of::<T>()?, count: a.len() };
        let writes = !matches!(kind, OpKind::Send { .. });
        // SAFETY: the address is the array's device copy of `a.len()`
        // elements (what `op` reads and writes), kept alive by the array
        // until the work recorded as its pending work has run.
        a.with_device_data(kind.name(), writes, stream, None, |p| unsafe { self.enqueue_raw(&op, p, p, stream) })
            .map(|(r, _)| r)
    }

    /// Every rank's `a` becomes the reduction of all ranks' `a`.
    ///
    /// ```
    /// use gpuport::{Device, Host, HostDevice, MemArray};
    /// use gpuport::collective::{Communicator, ReduceOp};
    /// let dev = HostDevice::open(0)?;
    /// let comm = Communicator::<Host>::init_all(&[dev.clone()])?.remove(0);
    /// let mut a = MemArray::<i32, 1, _>::from_vec(&dev, [2], vec![3, 4])?;
    /// comm.all_reduce_array(&mut a, ReduceOp::Max, dev.default_stream())?;
    /// a.move_to(gpuport::Location::Host, dev.default_stream(), gpuport::Transfer::Sync, None)?;
    /// assert_eq!(a.to_vec(None)?, vec![3, 4]); // one rank
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn all_reduce_array<T: Element, const N: usize>(
        &self,
        a: &mut Array<T, N, B>,
        op: ReduceOp,
        stream: &Stream<B>,
    ) -> Result<()> {
        self.in_place(OpKind::AllReduce(op), a, stream)
    }

    /// Every rank's `a` becomes `root`'s.
    pub fn broadcast_array<T: Element, const N: usize>(
        &self,
        a: &mut Array<T, N, B>,
        root: usize,
        stream: &Stream<B>,
    ) -> Result<()> {
        self.in_place(OpKind::Broadcast { root }, a, stream)
    }

    /// `root`'s `a` becomes the reduction of all ranks' `a`; the others' are unchanged.
    pub fn reduce_array<T: Element, const N: usize>(
        &self,
        a: &mut Array<T, N, B>,
        op: ReduceOp,
        root: usize,
        stream: &Stream<B>,
    ) -> Result<()> {
        self.in_place(OpKind::Reduce { op, root }, a, stream)
    }

    /// Sends `a` to `peer`, which calls [`recv_array`](Self::recv_array)
    /// with an array of as many elements of the same type.
    pub fn send_array<T: Element, const N: usize>(
        &self,
        a: &mut Array<T, N, B>,
        peer: usize,
        stream: &Stream<B>,
    ) -> Result<()> {
        self.in_place(OpKind::Send { peer }, a, stream)
    }

    /// Receives into `a` what `peer` sends with [`send_array`](Self::send_array).
    pub fn recv_array<T: Element, const N: usize>(
        &self,
        a: &mut Array<T, N, B>,
        peer: usize,
        stream: &Stream<B>,
    ) -> Result<()> {
        self.in_place(OpKind::Recv { peer }, a, stream)
    }

    /// `recv` gets every rank's `send`, in rank order: it holds
    /// [`size`](Self::size) times as many elements.
    pub fn all_gather_array<T: Element, const N: usize, const M: usize>(
        &self,
        send: &mut Array<T, N, B>,
        recv: &mut Array<T, M, B>,
        stream: &Stream<B>,
    ) -> Result<()> {
        let op = Op { kind: OpKind::AllGather, dtype: dtype_of::<T>()?, count: send.len() };
        self.two_arrays(op, send, recv, stream)
    }

    /// `recv` gets this rank's block of the reduction of every rank's
    /// `send`, which holds [`size`](Self::size) times as many elements.
    pub fn reduce_scatter_array<T: Element, const N: usize, const M: usize>(
        &self,
        send: &mut Array<T, N, B>,
        recv: &mut Array<T, M, B>,
        op: ReduceOp,
        stream: &Stream<B>,
    ) -> Result<()> {
        let op = Op { kind: OpKind::ReduceScatter(op), dtype: dtype_of::<T>()?, count: recv.len() };
        self.two_arrays(op, send, recv, stream)
    }

    fn two_arrays<T: Element, const N: usize, const M: usize>(
        &self,
        op: Op,
        send: &mut Array<T, N, B>,
        recv: &mut Array<T, M, B>,
        stream: &Stream<B>,
    ) -> Result<()> {
        refuse_in_group(op.kind.name())?;
        self.check_device("send", send)?;
        self.check_device("recv", recv)?;
        let (want_send, want_recv) = (op.send_len(self.size()), op.recv_len(self.size()));
        if send.len() != want_send || recv.len() != want_recv {
            return Err(Error::InvalidArgument {
                name: "recv",
                reason: format!(
                    "{op} across {} ranks takes {want_send} elements and gives {want_recv}; the arrays hold {} and {}",
                    self.size(),
                    send.len(),
                    recv.len()
                ),
            });
        }
        let what = op.kind.name();
        // Both arrays' replay orders at once, before either section (`src/backend/order.rs`).
        let _order = hold_in_order(send.order_lock().into_iter().chain(recv.order_lock()));
        send.with_device_data(what, false, stream, None, |s| {
            // SAFETY: `s` and `r` are the arrays' device copies with the
            // element counts checked above, kept alive by the arrays until
            // the work recorded as their pending work has run.
            recv.with_device_data(what, true, stream, None, |r| unsafe { self.enqueue_raw(&op, s, r, stream) })
                .map(|(r, _)| r)
        })
        .map(|(r, _)| r)
    }

    /// Sends `send` to rank `to` and receives `recv` from rank `from`, as one
    /// group (a ring's step: every rank sends and receives at once without
    /// waiting for each other).
    pub fn send_recv_array<T: Element, const N: usize, const M: usize>(
        &self,
        send: &mut Array<T, N, B>,
        to: usize,
        recv: &mut Array<T, M, B>,
        from: usize,
        stream: &Stream<B>,
    ) -> Result<()> {
        refuse_in_group("send_recv")?;
        self.check_device("send", send)?;
        self.check_device("recv", recv)?;
        let dtype = dtype_of::<T>()?;
        let s_op = Op { kind: OpKind::Send { peer: to }, dtype, count: send.len() };
        let r_op = Op { kind: OpKind::Recv { peer: from }, dtype, count: recv.len() };
        let _order = hold_in_order(send.order_lock().into_iter().chain(recv.order_lock())); // as in `two_arrays`
        send.with_device_data("send", false, stream, None, |s| {
            recv.with_device_data("recv", true, stream, None, |r| {
                // SAFETY: as in `two_arrays`; the group ends before the
                // arrays record their pending work.
                Self::group_unchecked(|| unsafe {
                    self.enqueue_raw(&s_op, s, 0, stream)?;
                    self.enqueue_raw(&r_op, 0, r, stream)
                })
            })
            .map(|(r, _)| r)
        })
        .map(|(r, _)| r)
    }

    /// All-reduce of one array per communicator of one process
    /// ([`init_all`](Self::init_all)): `arrays[i]` on `comms[i]`'s device,
    /// on `streams[i]`, as one group.
    ///
    /// ```
    /// use gpuport::{Device, Host, HostDevice, MemArray};
    /// use gpuport::collective::{Communicator, ReduceOp};
    /// let dev = HostDevice::open(0)?;
    /// let comms = Communicator::<Host>::init_all(&[dev.clone(), dev.clone()])?;
    /// let mut a = MemArray::<f32, 1, _>::from_vec(&dev, [2], vec![1.0, 2.0])?;
    /// let mut b = MemArray::<f32, 1, _>::from_vec(&dev, [2], vec![10.0, 20.0])?;
    /// let s = dev.default_stream();
    /// Communicator::all_reduce_arrays(&comms, &mut [&mut a, &mut b], ReduceOp::Sum, &[s, s])?;
    /// b.move_to(gpuport::Location::Host, dev.default_stream(), gpuport::Transfer::Sync, None)?;
    /// assert_eq!(b.to_vec(None)?, vec![11.0, 22.0]);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn all_reduce_arrays<T: Element, const N: usize>(
        comms: &[Self],
        arrays: &mut [&mut Array<T, N, B>],
        op: ReduceOp,
        streams: &[&Stream<B>],
    ) -> Result<()> {
        refuse_in_group("all_reduce")?;
        if arrays.len() != comms.len() || streams.len() != comms.len() {
            return Err(Error::InvalidArgument {
                name: "arrays",
                reason: format!(
                    "one array and one stream per communicator: {} communicators, {} arrays, {} streams",
                    comms.len(),
                    arrays.len(),
                    streams.len()
                ),
            });
        }
        for (c, a) in comms.iter().zip(arrays.iter()) {
            c.check_device("array", a)?;
        }
        let dtype = dtype_of::<T>()?;
        let lens: Vec<usize> = arrays.iter().map(|a| a.len()).collect();
        let mut addresses = Vec::with_capacity(comms.len());
        // Every array's replay order at once, before any section (`src/backend/order.rs`).
        let _order = hold_in_order(arrays.iter().filter_map(|a| a.order_lock()));
        nest(arrays, streams, &mut addresses, &mut |addrs: &[u64]| {
            Self::group_unchecked(|| {
                for (((c, a), s), len) in comms.iter().zip(addrs).zip(streams).zip(&lens) {
                    let call = Op { kind: OpKind::AllReduce(op), dtype, count: *len };
                    // SAFETY: each address is its array's device copy of
                    // `len` elements (see `nest`); the group ends before the
                    // arrays record their pending work.
                    unsafe { c.enqueue_raw(&call, *a, *a, s)? };
                }
                Ok(())
            })
        })
    }
}

/// Calls `f` with the device-copy addresses of every array, each taken
/// with [`MemArray::with_device_data`] on its stream, so `f`'s work becomes
/// every array's pending work.
fn nest<T: Element, const N: usize, D: Device>(
    arrays: &mut [&mut MemArray<T, N, D>],
    streams: &[&Stream<D::B>],
    addresses: &mut Vec<u64>,
    f: &mut dyn FnMut(&[u64]) -> Result<()>,
) -> Result<()> {
    match (arrays.split_first_mut(), streams.split_first()) {
        (Some((a, rest)), Some((s, more))) => a
            .with_device_data("all_reduce", true, s, None, |p| {
                addresses.push(p);
                nest(rest, more, addresses, f)
            })
            .map(|(r, _)| r),
        _ => f(addresses),
    }
}
