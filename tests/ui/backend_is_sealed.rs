// The layers above the backends trust what a backend's copies and buffers
// do, so no type outside gpuport can become a backend.
use gpuport::Backend;

#[derive(Debug)]
struct Mine;

impl Backend for Mine {
    const KIND: gpuport::BackendKind = gpuport::BackendKind::Host;
    type Device = gpuport::HostDevice;
    type Stream = ();
    type Event = ();
    type Buffer = gpuport::backend::host::HostBuffer;
    type PinnedBuffer = gpuport::backend::host::HostBuffer;
    type HostRegistration = ();
    type Module = ();
    type Kernel = ();
    type RawGraph = ();
    type RawGraphExec = ();
}

fn main() {}
