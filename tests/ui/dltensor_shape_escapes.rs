// docs/design.md#strided-views, misuse 2: returning the shape of a DLTensor whose wrapper
// is a local of the function.
use gpuport::array::View;

fn shape_of<'a>(view: &'a View<'a, f32, 2>) -> &'a [i64] {
    let dl = view.to_dlpack().unwrap();
    let tensor = dl.tensor();
    tensor.shape()
}

fn main() {
    let data = [0f32; 6];
    let view = View::from_slice(&data, [2, 3]).unwrap();
    println!("{:?}", shape_of(&view));
}
