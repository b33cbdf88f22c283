// An `Arc` shares a buffer, so writing through one clone while another is
// viewed would alias: the safe writing calls refuse an `Arc`.
use std::sync::Arc;

use gpuport::{Device, HostDevice};

fn main() {
    let dev = HostDevice::open(0).unwrap();
    let mut shared = Arc::new(dev.alloc(16).unwrap());
    let _other = shared.clone();
    dev.memset(&mut shared, 0, 16, 1).unwrap();
}
