//! An all-reduce over two ranks on the host engine (no GPU needed). On GPUs
//! the same calls go through NCCL or RCCL, one rank per device.
//!
//! `cargo run --example 07-collectives`
use gpuport::collective::{Communicator, ReduceOp};
use gpuport::{Device, Host, HostDevice, Location, MemArray, Transfer};

fn main() -> gpuport::Result<()> {
    let dev = HostDevice::open(0)?;
    // Two ranks driven by this one process (`init_rank` joins ranks of other
    // processes through a TcpStore instead).
    let comms = Communicator::<Host>::init_all(&[dev.clone(), dev.clone()])?;
    let mut a = MemArray::<f32, 1, _>::from_vec(&dev, [3], vec![1.0, 2.0, 3.0])?;
    let mut b = MemArray::<f32, 1, _>::from_vec(&dev, [3], vec![10.0, 20.0, 30.0])?;
    let s = dev.default_stream();
    // One thread drives both ranks: their calls run as one group.
    Communicator::all_reduce_arrays(&comms, &mut [&mut a, &mut b], ReduceOp::Sum, &[s, s])?;
    for x in [&mut a, &mut b] {
        x.move_to(Location::Host, s, Transfer::Sync, None)?;
        assert_eq!(x.to_vec(None)?, vec![11.0, 22.0, 33.0]);
    }
    println!("rank {} of {}: {:?}", comms[0].rank(), comms[0].size(), a.to_vec(None)?);
    println!("host engine: collectives ok");
    Ok(())
}
