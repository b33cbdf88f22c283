// Opening an IPC handle is unsafe: nothing checks its offset and length
// against the allocation it opens.
use gpuport::memory::{open_ipc, IpcHandle};
use gpuport::{Device, Host, HostDevice};

fn main() {
    let dev = HostDevice::open(0).unwrap();
    let text = format!("host:0:0:{}:{}", 1u64 << 40, "00".repeat(64));
    let handle = IpcHandle::from_text(&text).unwrap();
    let _ = open_ipc::<Host>(&dev, &handle);
}
