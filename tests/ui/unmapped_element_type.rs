// Only types with a DLPack data type can be array elements (docs/design.md#data-types).
use gpuport::{Device, HostDevice, MemArray};

fn main() {
    let dev = HostDevice::open(0).unwrap();
    let _ = MemArray::<String, 1>::zeros(&dev, [4]);
}
