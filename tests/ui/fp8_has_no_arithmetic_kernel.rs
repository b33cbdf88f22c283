// fp8 elements are stored, copied and exchanged, never computed with: the
// arithmetic kernels are instantiated for integer and IEEE/bfloat types only.
use gpuport::array::element::F8E4M3;
use gpuport::{Device, HostDevice, MemArray};

fn main() {
    let dev = HostDevice::open(0).unwrap();
    let mut a = MemArray::<F8E4M3, 1>::zeros(&dev, [4]).unwrap();
    let _ = a.add_index(dev.default_stream(), None);
}
