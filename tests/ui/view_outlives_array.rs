// A view must not outlive the MemArray it borrows.
use gpuport::{Device, HostDevice, MemArray};

fn main() {
    let dev = HostDevice::open(0).unwrap();
    let view = {
        let array = MemArray::<f32, 1>::zeros(&dev, [4]).unwrap();
        array.host_view(None).unwrap()
    };
    println!("{:?}", view.get([0]));
}
