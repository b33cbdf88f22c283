// docs/design.md#strided-views, misuse 1: taking the DLTensor from a temporary wrapper.
use gpuport::array::View;

fn main() {
    let data = [0f32; 6];
    let view = View::from_slice(&data, [2, 3]).unwrap();
    let tensor = view.to_dlpack().unwrap().tensor();
    println!("{}", tensor.ndim());
}
