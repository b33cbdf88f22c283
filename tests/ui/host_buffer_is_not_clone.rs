// Two handles on one host allocation would let safe code hold `&[u8]` and
// `&mut [u8]` of the same bytes: host buffers cannot be cloned.
use gpuport::{Device, HostDevice};

fn main() {
    let dev = HostDevice::open(0).unwrap();
    let buf = dev.alloc(16).unwrap();
    let _twin = buf.clone();
}
