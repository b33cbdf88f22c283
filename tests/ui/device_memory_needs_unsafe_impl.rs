// Safe copies trust what `DeviceMemory` says about an address range, so a
// type that merely claims to be device memory (here: any address) must not
// be accepted without an `unsafe impl` and its written contract.
use gpuport::{DeviceMemory, Host, MemoryKind};

#[derive(Debug)]
struct Lies;

impl DeviceMemory for Lies {
    type B = Host;
    fn len(&self) -> usize {
        1 << 20
    }
    fn device_ptr(&self) -> u64 {
        0x10
    }
    fn ordinal(&self) -> usize {
        0
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Host
    }
}

fn main() {}
