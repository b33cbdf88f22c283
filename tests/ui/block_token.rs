// A Block's token (the caching pool's block index) is not a public field.
use gpuport::memory::{Allocator, CachingPool, MemoryResource, PoolConfig};
use gpuport::{Device, Host, HostDevice};

fn main() {
    let dev = HostDevice::open(0).unwrap();
    let pool = CachingPool::<Host>::new(dev.clone(), PoolConfig::default());
    let block = pool.allocate(64, dev.default_stream()).unwrap();
    let token: u64 = block.token;
    println!("{token}");
    let _ = Allocator::<Host>::new(pool);
}
