//! IPC: a second process (this test binary, started again with an
//! environment variable) opens a handle and reads what this one wrote.
//! Runs for real on `cuda:0` and `rocm:0`; the host backend has no IPC and
//! must say so with a typed error.

mod common;

use std::io::Write;
use std::sync::Arc;

use common::pattern;
use gpuport::memory::{open_ipc, Allocator, CachingPool, IpcHandle, MemoryDevice, PlainResource, PoolConfig};
use gpuport::{Backend, BackendKind, DeviceMemory, Error};
use rstest::rstest;

/// Set in the child: the handle to open, as `IpcHandle::to_text`.
const CHILD_ENV: &str = "GPUPORT_IPC_CHILD_HANDLE";
/// Set in the child: the pattern seed the parent wrote.
const SEED_ENV: &str = "GPUPORT_IPC_CHILD_SEED";
const CHILD_TEST: &str = "the_ipc_child_reads_the_exported_bytes";

fn export_and_read_in_a_child<D: MemoryDevice>(d: &Arc<D>) {
    let resources: [(&str, Allocator<D::B>); 2] = [
        ("plain", Allocator::new(PlainResource::new(d.clone()))),
        ("caching-pool", Allocator::new(CachingPool::new(d.clone(), PoolConfig::default()))),
    ];
    for (seed, (name, alloc)) in resources.into_iter().enumerate() {
        let s = d.default_stream();
        // A first block, so the exported one sits at an offset inside its pool segment.
        // (2 MiB and 1 MiB + 100 are both "large": they share a 20 MiB segment.)
        let _first = alloc.alloc(2 << 20, s).unwrap();
        let block = alloc.alloc((1 << 20) + 100, s).unwrap();
        let data = pattern(block.len(), seed as u8 + 1);
        d.copy_to_device(&data, &block, 0).unwrap();
        let handle = match alloc.ipc_handle(&block) {
            Err(Error::Unsupported { .. }) if <D::B as Backend>::KIND == BackendKind::Host => {
                let _ = writeln!(std::io::stderr(), "skipped: IPC on {}: the host backend has none", d.info().spec());
                return;
            }
            other => other.unwrap(),
        };
        if name == "caching-pool" {
            assert!(handle.offset > 0, "pool blocks are exported with their offset in the segment");
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, handle.to_text())
            .env(SEED_ENV, (seed + 1).to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: child failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains("ipc child read"), "{name}: the child did not run the check:\n{stdout}\n{stderr}");
        drop(block);
    }
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn another_process_reads_what_this_one_wrote_through_an_ipc_handle(#[case] spec: &str) {
    if std::env::var_os(CHILD_ENV).is_some() {
        return; // in the child only the child test does anything
    }
    if let Some(dev) = common::open_or_skip(spec) {
        gpuport::with_device!(dev, d => export_and_read_in_a_child(d));
    }
}

fn read_in_child<D: MemoryDevice>(d: &Arc<D>, handle: &IpcHandle, seed: u8) {
    let memory = open_ipc::<D::B>(d, handle).unwrap();
    let mut back = vec![0u8; memory.len()];
    d.copy_to_host(&memory, 0, &mut back).unwrap();
    assert!(back == pattern(handle.len, seed), "the child read other bytes than the parent wrote");
    println!("ipc child read {} bytes at offset {}", back.len(), handle.offset);
}

/// Does nothing unless started by the test above with the handle in `CHILD_ENV`.
#[test]
fn the_ipc_child_reads_the_exported_bytes() {
    let Ok(text) = std::env::var(CHILD_ENV) else { return };
    let handle = IpcHandle::from_text(&text).unwrap();
    let seed: u8 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let dev = gpuport::open(&format!("{}:{}", handle.backend, handle.ordinal)).unwrap();
    gpuport::with_device!(dev, d => read_in_child(d, &handle, seed));
}
