// A Block is neither Clone nor Copy: a second copy would be a second free.
use gpuport::memory::{CachingPool, MemoryResource, PoolConfig};
use gpuport::{Device, Host, HostDevice};

fn main() {
    let dev = HostDevice::open(0).unwrap();
    let pool = CachingPool::<Host>::new(dev.clone(), PoolConfig::default());
    let block = pool.allocate(64, dev.default_stream()).unwrap();
    let copy = block.clone();
    pool.deallocate(block, dev.default_stream(), Vec::new()).unwrap();
    pool.deallocate(copy, dev.default_stream(), Vec::new()).unwrap();
}
