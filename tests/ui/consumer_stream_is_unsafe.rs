// A consumer's stream handle is trusted as a live stream: naming one is unsafe.
use gpuport::dynamic::exchange::consumer_stream;

fn main() {
    let dev = gpuport::open("host").unwrap();
    let _ = consumer_stream(&dev, 2, Some(0xdead));
}
