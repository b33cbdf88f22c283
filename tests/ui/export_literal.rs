// An Export cannot be made with struct literal syntax: its fields are
// private, so a forged export cannot become a capsule of any pointer.
use std::sync::Arc;

use gpuport::dlpack::{DLDevice, DLDeviceType};
use gpuport::dynamic::exchange::Export;
use gpuport::dynamic::{DType, Shape};

fn main() {
    let forged = Export {
        data: 0x10,
        device: DLDevice { device_type: DLDeviceType::CPU, device_id: 0 },
        dtype: DType::Int32,
        shape: Shape::from_slice(&[4]),
        strides: None,
        keep: Arc::new(()),
        versioned_minor: Some(1),
        read_only: false,
        copied: false,
    };
    drop(forged.into_versioned());
}
