// A Block cannot be made with struct literal syntax: its fields are private,
// so a forged block cannot name another resource's memory.
use gpuport::memory::Block;
use gpuport::Host;

fn main() {
    let block = Block::<Host> { ptr: 0x1000, len: 16, token: 0, buffer: None };
    drop(block);
}
