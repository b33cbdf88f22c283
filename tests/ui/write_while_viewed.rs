// A host view of a buffer promises that nobody writes the bytes while it
// lives, so the safe memset needs `&mut`: through a shared borrow (what
// used to compile) it is refused, and `&mut` conflicts with the view.
use gpuport::{BackendKind, Device, HostDevice, View};

fn main() {
    let dev = HostDevice::open(0).unwrap();
    let mut buf = dev.alloc(16).unwrap();
    let view = View::<u8, 1>::from_buffer(&buf, BackendKind::Host, [16], [1]).unwrap();
    dev.memset(&buf, 0, 16, 1).unwrap();
    dev.memset(&mut buf, 0, 16, 1).unwrap();
    println!("{:?}", view.get([0]));
}
