// The `&mut` a safe write needs cannot be had while a host view of the
// buffer is alive.
use gpuport::{BackendKind, Device, HostDevice, View};

fn main() {
    let dev = HostDevice::open(0).unwrap();
    let mut buf = dev.alloc(16).unwrap();
    let view = View::<u8, 1>::from_buffer(&buf, BackendKind::Host, [16], [1]).unwrap();
    dev.memset(&mut buf, 0, 16, 1).unwrap();
    println!("{:?}", view.get([0]));
}
