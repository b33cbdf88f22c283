//! IPC: a second process (this test binary, started again with an
//! environment variable) opens handles, reads what this one wrote, and
//! writes something this one then reads. Runs for real on `cuda:0` and
//! `rocm:0`; the host backend has no IPC and must say so with a typed error.
//!
//! Two kinds of handle: the driver's IPC memory handles (PlainResource,
//! CachingPool) and blocks of a shareable stream-ordered pool
//! (`NativePoolResource::shareable`), whose pool descriptor the child takes
//! from this process with `pidfd_getfd`. Where the system refuses that
//! (ptrace restrictions, seccomp, a kernel before 5.6) the pool case prints
//! `skipped: ...` with the reason and passes.

mod common;

use std::io::Write;
use std::sync::Arc;

use common::pattern;
use gpuport::memory::{
    allow_pool_importers, imported_pool_count, open_ipc, Allocator, CachingPool, IpcHandle, IpcKind, MemoryDevice,
    NativePoolResource, PlainResource, PoolConfig, PoolImporters,
};
use gpuport::{Backend, BackendKind, DeviceMemory, Error};
use rstest::rstest;

/// Set in the child: the handles to open, as `IpcHandle::to_text`, separated by spaces.
const CHILD_ENV: &str = "GPUPORT_IPC_CHILD_HANDLE";
/// Set in the child: the pattern seed the parent wrote to the first block
/// (the next blocks: seed + 1, ...). The child writes seed + 100 (+ 1, ...).
const SEED_ENV: &str = "GPUPORT_IPC_CHILD_SEED";
const CHILD_TEST: &str = "the_ipc_child_reads_the_exported_bytes";
/// What the child prints when the system would not let it take the pool's descriptor.
const CHILD_SKIPPED: &str = "ipc child skipped:";
/// `Error::Unsupported::op` of a pool descriptor that could not be taken.
const TAKING_REFUSED: &str = "importing another process's stream-ordered pool";
const MIB: usize = 1 << 20;

/// The pattern the child writes back into block `i` of a run with `seed`.
fn written_back(len: usize, seed: u8, i: usize) -> Vec<u8> {
    pattern(len, seed.wrapping_add(100).wrapping_add(i as u8))
}

/// Runs the child on `handles`, whose blocks hold `pattern(len, seed + i)`.
/// Returns `false` (after printing why) where the child was not allowed to
/// take a pool's descriptor.
fn run_child(name: &str, handles: &[IpcHandle], seed: u8) -> bool {
    let text: Vec<String> = handles.iter().map(IpcHandle::to_text).collect();
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, text.join(" "))
        .env(SEED_ENV, seed.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: child failed:\n{stdout}\n{stderr}");
    if let Some(line) = stdout.lines().find(|l| l.starts_with(CHILD_SKIPPED)) {
        let _ = writeln!(std::io::stderr(), "skipped: {name}: {}", line.trim_start_matches(CHILD_SKIPPED).trim());
        return false;
    }
    assert!(stdout.contains("ipc child read"), "{name}: the child did not run the check:\n{stdout}\n{stderr}");
    true
}

/// Writes the patterns, exports every block (`check` sees the handles),
/// lets the child check and overwrite them, and checks what it wrote.
fn share_with_a_child<D: MemoryDevice>(
    d: &Arc<D>,
    name: &str,
    alloc: &Allocator<D::B>,
    lens: &[usize],
    seed: u8,
    check: impl FnOnce(&[IpcHandle]),
) {
    let s = d.default_stream();
    let mut blocks: Vec<_> = lens.iter().map(|&n| alloc.alloc(n, s).unwrap()).collect();
    // The allocations are stream-ordered: the child may touch them only after they completed.
    d.synchronize(s).unwrap();
    for (i, block) in blocks.iter_mut().enumerate() {
        d.copy_to_device(&pattern(block.len(), seed + i as u8), block, 0).unwrap();
    }
    let handles = match blocks.iter().map(|b| alloc.ipc_handle(b)).collect::<Result<Vec<_>, _>>() {
        Err(Error::Unsupported { .. }) if <D::B as Backend>::KIND == BackendKind::Host => {
            let _ = writeln!(std::io::stderr(), "skipped: IPC on {}: the host backend has none", d.info().spec());
            return;
        }
        other => other.unwrap(),
    };
    check(&handles);
    if !run_child(name, &handles, seed) {
        return;
    }
    for (i, block) in blocks.iter().enumerate() {
        let mut back = vec![0u8; block.len()];
        d.copy_to_host(block, 0, &mut back).unwrap();
        assert!(back == written_back(block.len(), seed, i), "{name}: block {i} does not hold what the child wrote");
    }
}

fn export_and_read_in_a_child<D: MemoryDevice>(d: &Arc<D>) {
    // Plain segments, whatever GPUPORT_POOL says: expandable ones refuse IPC
    // (tests/memory_expandable.rs checks that refusal).
    let plain_segments = PoolConfig { expandable: false, ..PoolConfig::default() };
    let resources: [(&str, Allocator<D::B>); 2] = [
        ("plain", Allocator::new(PlainResource::new(d.clone()))),
        ("caching-pool", Allocator::new(CachingPool::new(d.clone(), plain_segments))),
    ];
    for (seed, (name, alloc)) in resources.into_iter().enumerate() {
        // A first block, so the exported one sits at an offset inside its pool segment.
        // (2 MiB and 1 MiB + 100 are both "large": they share a 20 MiB segment.)
        let _first = alloc.alloc(2 << 20, d.default_stream()).unwrap();
        share_with_a_child(d, name, &alloc, &[MIB + 100], seed as u8 + 1, |handles| {
            assert_eq!(handles[0].kind, IpcKind::Memory);
            if name == "caching-pool" {
                assert!(handles[0].offset > 0, "pool blocks are exported with their offset in the segment");
            }
        });
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
        gpuport::on_backend!(&dev, d => export_and_read_in_a_child(d));
    }
}

fn export_native_pool_blocks_to_a_child<D: MemoryDevice>(d: &Arc<D>) {
    let spec = d.info().spec();
    let resource = match NativePoolResource::<D::B>::shareable(d.clone(), Some(64 * MIB as u64)) {
        Ok(r) => r,
        Err(e @ Error::Unsupported { .. })
            if <D::B as Backend>::KIND == BackendKind::Host || !d.info().stream_ordered_alloc =>
        {
            let _ = writeln!(std::io::stderr(), "skipped: shareable native pool on {spec}: {e}");
            return;
        }
        Err(e) => panic!("{spec}: {e}"),
    };
    // Under Yama's ptrace_scope 1 a child may not take its parent's descriptors unless allowed.
    allow_pool_importers(PoolImporters::Any).unwrap();
    let alloc = Allocator::new(resource);
    assert_eq!(alloc.resource().name(), "shareable-native-pool");
    // Two blocks of one pool: the child imports the pool once and keeps it
    // until it closes the second.
    let probe = alloc.alloc(4096, d.default_stream()).unwrap();
    let handle = alloc.ipc_handle(&probe).unwrap();
    let IpcKind::PoolBlock { pid, fd, pool } = handle.kind else { panic!("{spec}: not a pool handle: {handle:?}") };
    assert_eq!(pid, std::process::id());
    assert!(fd >= 0);
    assert_eq!((handle.offset, handle.len), (0, 4096), "a pool block is exported by itself, at offset 0");
    let again = alloc.ipc_handle(&probe).unwrap();
    assert_eq!(again.kind, IpcKind::PoolBlock { pid, fd, pool }, "the pool is exported once, its descriptor reused");
    drop(probe);
    share_with_a_child(d, "shareable-native-pool", &alloc, &[MIB + 100, 3000], 11, |handles| {
        for h in handles {
            assert_eq!(h.kind, IpcKind::PoolBlock { pid, fd, pool }, "every block names the same pool");
            assert_eq!(h.offset, 0);
        }
    });
    alloc.reset().unwrap();
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn another_process_reads_and_writes_shareable_native_pool_blocks(#[case] spec: &str) {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    if let Some(dev) = common::open_or_skip(spec) {
        gpuport::on_backend!(&dev, d => export_native_pool_blocks_to_a_child(d));
    }
}

fn the_default_pool_refuses<D: MemoryDevice>(d: &Arc<D>) {
    let spec = d.info().spec();
    let alloc = match NativePoolResource::<D::B>::new(d.clone(), None) {
        Ok(r) => Allocator::new(r),
        Err(e @ Error::Unsupported { .. }) => {
            let _ = writeln!(std::io::stderr(), "skipped: default native pool on {spec}: {e}");
            return;
        }
        Err(e) => panic!("{spec}: {e}"),
    };
    assert_eq!(alloc.resource().name(), "native-pool");
    let block = alloc.alloc(4096, d.default_stream()).unwrap();
    match alloc.ipc_handle(&block) {
        Err(Error::Unsupported { hint: Some(hint), .. }) => {
            assert!(hint.contains("NativePoolResource::shareable"), "{spec}: the hint names the way out: {hint}")
        }
        other => panic!("{spec}: the default pool's memory was exported: {other:?}"),
    }
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn the_default_native_pool_still_refuses_ipc_export(#[case] spec: &str) {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    if let Some(dev) = common::open_or_skip(spec) {
        gpuport::on_backend!(&dev, d => the_default_pool_refuses(d));
    }
}

// ---- the child ------------------------------------------------------------------------

fn read_and_write_in_child<D: MemoryDevice>(d: &Arc<D>, handles: &[IpcHandle], seed: u8) {
    let mut opened = Vec::new();
    for handle in handles {
        // SAFETY: the handles are the parent's exports, parsed back from the
        // text it passed, of allocations it keeps alive until this child exits.
        match unsafe { open_ipc::<D::B>(d, handle) } {
            Ok(memory) => opened.push(memory),
            Err(Error::Unsupported { op, hint, .. }) if op == TAKING_REFUSED => {
                println!("{CHILD_SKIPPED} {}", hint.unwrap_or_default());
                return;
            }
            Err(e) => panic!("opening {handle:?}: {e}"),
        }
    }
    let pools: std::collections::HashSet<_> = handles
        .iter()
        .filter_map(|h| match h.kind {
            IpcKind::PoolBlock { pid, pool, .. } => Some((pid, pool)),
            IpcKind::Memory => None,
        })
        .collect();
    assert_eq!(imported_pool_count(), pools.len(), "each exporter's pool is imported once");
    for (i, memory) in opened.iter_mut().enumerate() {
        let mut back = vec![0u8; memory.len()];
        d.copy_to_host(&*memory, 0, &mut back).unwrap();
        assert!(back == pattern(memory.len(), seed + i as u8), "block {i}: the child read other bytes than written");
        d.copy_to_device(&written_back(memory.len(), seed, i), memory, 0).unwrap();
        println!("ipc child read {} bytes at offset {} and wrote them back", back.len(), handles[i].offset);
    }
    d.synchronize_device().unwrap();
    // Closing every block but the last keeps the pool imported; the last one destroys it.
    let last = opened.pop();
    drop(opened);
    assert_eq!(imported_pool_count(), pools.len(), "the pool stays imported while a block of it is open");
    drop(last);
    assert_eq!(imported_pool_count(), 0, "closing the last block destroys the imported pool");
}

/// Does nothing unless started by a test above with the handles in `CHILD_ENV`.
#[test]
fn the_ipc_child_reads_the_exported_bytes() {
    let Ok(text) = std::env::var(CHILD_ENV) else { return };
    let handles: Vec<IpcHandle> = text.split_whitespace().map(|t| IpcHandle::from_text(t).unwrap()).collect();
    let seed: u8 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let first = &handles[0];
    let dev = gpuport::open(&format!("{}:{}", first.backend, first.ordinal)).unwrap();
    gpuport::on_backend!(&dev, d => read_and_write_in_child(d, &handles, seed));
}

// ---- the text form (no device needed) --------------------------------------------------------

fn pool_handle() -> IpcHandle {
    let mut handle = [0u8; 64];
    handle.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8 * 3);
    IpcHandle {
        backend: BackendKind::Rocm,
        ordinal: 2,
        kind: IpcKind::PoolBlock { pid: 4242, fd: 17, pool: 3 },
        handle,
        offset: 0,
        len: MIB + 100,
    }
}

#[test]
fn pool_handles_survive_a_text_round_trip() {
    let h = pool_handle();
    let text = h.to_text();
    let hex: String = h.handle.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(text, format!("rocm:2:0:1048676:{hex}:pool:4242:17:3"));
    assert_eq!(IpcHandle::from_text(&text).unwrap(), h);
    assert_eq!(IpcHandle::from_text(&format!("  {text}\n")).unwrap(), h, "surrounding whitespace is ignored");
    let memory = IpcHandle { kind: IpcKind::Memory, offset: 4096, ..h.clone() };
    assert_eq!(memory.to_text(), format!("rocm:2:4096:1048676:{hex}"), "memory handles print as before");
    assert_eq!(IpcHandle::from_text(&memory.to_text()).unwrap(), memory);
}

#[test]
fn malformed_pool_handles_are_rejected_with_typed_errors() {
    let good = pool_handle().to_text();
    let (head, tail) = good.split_at(good.find(":pool:").unwrap());
    let bad = [
        format!("{head}:pipe:4242:17:3"),
        format!("{head}:pool:0:17:3"),
        format!("{head}:pool:-1:17:3"),
        format!("{head}:pool:4242:-1:3"),
        format!("{head}:pool:4242:17:x"),
        format!("{head}:pool:4242:17"),
        format!("{head}:pool:4242:17:3:9"),
        format!("{head}:pool"),
        format!("{}{tail}", head.replace("rocm:", "opencl:")),
        format!("{}{tail}", &head[..head.len() - 2]),
        format!("{}zz{tail}", &head[..head.len() - 2]),
    ];
    for text in bad {
        match IpcHandle::from_text(&text) {
            Err(Error::InvalidArgument { name: "IPC handle", reason }) => assert!(!reason.is_empty()),
            other => panic!("{text:?} was not rejected as an invalid argument: {other:?}"),
        }
    }
}
