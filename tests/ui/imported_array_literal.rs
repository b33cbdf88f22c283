// An ImportedArray cannot be made with struct literal syntax: its fields are
// private, so a forged import cannot hand add_index an arbitrary address.
use std::sync::Arc;

use gpuport::dlpack::{DLDevice, DLDeviceType};
use gpuport::dynamic::{AnyArray, DType, ImportedArray, Shape, Strides};

fn main() {
    let forged = ImportedArray {
        dtype: DType::Int32,
        shape: Shape::from_slice(&[4]),
        strides: Strides::from_slice(&[1]),
        data: 0x10,
        dl: DLDevice { device_type: DLDeviceType::CPU, device_id: 0 },
        read_only: false,
        keep: Arc::new(()),
        device: gpuport::open("host").unwrap(),
        lock: None,
    };
    drop(AnyArray::Imported(forged));
}
