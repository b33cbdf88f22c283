// MemoryResource is an unsafe trait: unsafe code trusts the blocks a
// resource returns, so a resource (like this lying one) needs `unsafe impl`.
use std::sync::Arc;

use gpuport::backend::{Event, Stream};
use gpuport::memory::{Block, MemoryResource, PlainResource};
use gpuport::{Host, HostDevice};

#[derive(Debug)]
struct Liar(PlainResource<Host>);

impl MemoryResource<Host> for Liar {
    fn device(&self) -> &Arc<HostDevice> {
        self.0.device()
    }
    fn name(&self) -> &'static str {
        "liar"
    }
    fn allocate(&self, _bytes: usize, stream: &Stream<Host>) -> gpuport::Result<Block<Host>> {
        self.0.allocate(16, stream)
    }
    fn deallocate(&self, block: Block<Host>, stream: &Stream<Host>, after: Vec<Event<Host>>) -> gpuport::Result<()> {
        self.0.deallocate(block, stream, after)
    }
}

fn main() {}
