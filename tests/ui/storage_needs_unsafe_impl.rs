// A caching pool's Storage is an unsafe trait: the pool hands its segments
// out as memory no one else uses.
use std::sync::Arc;

use gpuport::memory::Storage;
use gpuport::backend::host::HostBuffer;
use gpuport::{Device, Host, HostDevice};

#[derive(Debug)]
struct Mine(Arc<HostDevice>);

impl Storage<Host> for Mine {
    type Segment = HostBuffer;
    fn device(&self) -> &Arc<HostDevice> {
        &self.0
    }
    fn alloc(&self, bytes: usize) -> gpuport::Result<HostBuffer> {
        self.0.alloc(bytes)
    }
}

fn main() {}
