//! Peer access and peer copies ([`PeerDevice`]) and moving a `MemArray` to
//! another device. Two-device cases run between `cuda:0` and `cuda:1`, and
//! `rocm:0` and `rocm:1` (through the HIP-on-CUDA shim where
//! `GPUPORT_HIP_LIBRARY` names it), and skip with a printed reason where
//! fewer than two devices exist. Single-device cases run on `host` (always),
//! `cuda:0` and `rocm:0`.

mod common;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use gpuport::array::{Location, MemArray, Transfer};
use gpuport::memory::{Allocator, CachingPool, PoolConfig};
use gpuport::{CaptureMode, Device, DeviceMemory, Error, GraphErrorKind, HostDevice, LockId, PeerDevice};

const MIB: usize = 1 << 20;

fn skip(why: &str) {
    let name = std::thread::current().name().unwrap_or("?").to_string();
    let _ = writeln!(std::io::stderr(), "skipped: {name}: {why}");
}

/// Device 1 of `d0`'s backend, or `None` (printed) where there is none.
fn second<D: Device>(d0: &D) -> Option<Arc<D>> {
    match D::count() {
        Ok(n) if n >= 2 => Some(D::open(1).expect("device 1 of a backend counting 2 or more")),
        Ok(n) => {
            skip(&format!("{} has {n} device(s); peer tests need 2", d0.info().spec()));
            None
        }
        Err(e) => {
            skip(&format!("{}: {e}", d0.info().spec()));
            None
        }
    }
}

/// One test per GPU backend for bodies `fn name<D: PeerDevice>(d0: &Arc<D>, d1: &Arc<D>)`.
macro_rules! two_device_tests {
    ($($name:ident),* $(,)?) => { $(
        #[rstest::rstest]
        #[case::cuda("cuda:0")]
        #[case::rocm("rocm:0")]
        fn $name(#[case] spec: &str) {
            if let Some(dev) = common::open_or_skip(spec) {
                gpuport::on_backend!(&dev, d => {
                    if let Some(d1) = second(d.as_ref()) {
                        super::$name(d, &d1);
                    }
                });
            }
        }
    )* };
}

fn read<D: Device>(d: &D, buf: &impl DeviceMemory<B = D::B>) -> Vec<u8> {
    let mut out = vec![0u8; buf.len()];
    d.copy_to_host(buf, 0, &mut out).unwrap();
    out
}

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect()
}

// ---- two devices -------------------------------------------------------------------

/// Peer access is queried both ways and enabled (twice: idempotent); with it,
/// a kernel on device 0 writes device 1's memory through its address.
fn peer_access_is_queried_enabled_and_used<D: PeerDevice>(d0: &Arc<D>, d1: &Arc<D>) {
    assert!(d0.can_access_peer(d0).unwrap());
    let (there, back) = (d0.can_access_peer(d1).unwrap(), d1.can_access_peer(d0).unwrap());
    if !there {
        let e = d0.enable_peer_access(d1).unwrap_err();
        assert!(matches!(e, Error::Unsupported { op: "peer access", .. }), "{e}");
        skip(&format!("{} cannot access {} directly (no P2P path)", d0.info().spec(), d1.info().spec()));
        return;
    }
    d0.enable_peer_access(d1).unwrap();
    d0.enable_peer_access(d1).unwrap();
    if back {
        d1.enable_peer_access(d0).unwrap();
    }
    const N: usize = 4096;
    let mut target = d1.alloc(4 * N).unwrap();
    d1.memset(&mut target, 0, 4 * N, 0).unwrap();
    let s0 = d0.create_stream().unwrap();
    // SAFETY: `target` holds N u32s of device 1, which device 0 may address
    // (peer access enabled); it outlives the kernel (synchronized below).
    unsafe { common::fill_u32(d0, &s0, target.device_ptr(), N, 0xC0FFEE) };
    d0.synchronize(&s0).unwrap();
    assert!(u32s(&read(d1.as_ref(), &target)).iter().all(|&v| v == 0xC0FFEE));
}

/// 64 MiB copied from device 0 to device 1 and back, pushed on device 0's
/// stream and pulled on device 1's, checked byte for byte.
fn peer_copy_of_64_mib_arrives_intact<D: PeerDevice>(d0: &Arc<D>, d1: &Arc<D>) {
    let len = 64 * MIB;
    let data = common::pattern(len, 7);
    let mut src = d0.alloc(len).unwrap();
    d0.copy_to_device(&data, &mut src, 0).unwrap();
    let mut dst = d1.alloc(len).unwrap();
    d1.memset(&mut dst, 0, len, 0).unwrap();
    d0.copy_peer(&src, 0, &mut dst, 0, len).unwrap();
    assert!(read(d1.as_ref(), &dst) == data, "push 0 -> 1 differs");

    // Back, pulled by device 1 into a fresh buffer of device 0, with offsets.
    let mut back = d0.alloc(len).unwrap();
    d0.memset(&mut back, 0, len, 0).unwrap();
    let s1 = d1.create_stream().unwrap();
    // SAFETY: both buffers outlive the copy (the stream is synchronized below).
    unsafe { d1.copy_peer_async(&dst, 100, &back, 3, len - 100, &s1) }.unwrap();
    d1.synchronize(&s1).unwrap();
    let got = read(d0.as_ref(), &back);
    assert!(got[..3].iter().all(|&b| b == 0));
    assert!(got[3..3 + len - 100] == data[100..], "pull 0 <- 1 differs");
}

/// A peer copy enqueued behind a busy stream's memset and kernel copies
/// what they wrote, not what was there before.
fn peer_copy_follows_the_source_streams_work<D: PeerDevice>(d0: &Arc<D>, d1: &Arc<D>) {
    let len = 16 * MIB;
    let mut src = d0.alloc(len).unwrap();
    d0.copy_to_device(&common::pattern(len, 1), &mut src, 0).unwrap();
    let mut dst = d1.alloc(len).unwrap();
    d1.memset(&mut dst, 0, len, 0).unwrap();
    let s0 = d0.create_stream().unwrap();
    common::hold_stream(d0, &s0, Duration::from_millis(200));
    // SAFETY: every buffer outlives the work: `s0` is synchronized below.
    unsafe {
        d0.memset_async(&src, 0, len, 0xAB, &s0).unwrap();
        common::fill_u32(d0, &s0, src.device_ptr(), 1024, 0x1234_5678);
        d0.copy_peer_async(&src, 0, &dst, 0, len, &s0).unwrap();
    }
    d0.synchronize(&s0).unwrap();
    let got = read(d1.as_ref(), &dst);
    assert!(u32s(&got[..4096]).iter().all(|&v| v == 0x1234_5678), "the kernel's words were not copied");
    assert!(got[4096..].iter().all(|&b| b == 0xAB), "the memset's bytes were not copied");
}

/// A `MemArray` whose kernel is still running on device 0 moves to device 1:
/// its data (with the kernel's result), its device, and its DLPack device.
fn memarray_moves_to_device_1<D: PeerDevice>(d0: &Arc<D>, d1: &Arc<D>) {
    let n = MIB;
    let data: Vec<i32> = (0..n as i32).map(|i| i.wrapping_mul(7)).collect();
    let mut a = MemArray::<i32, 1, D>::from_vec(d0, [n], data.clone()).unwrap();
    let (s0, s1) = (d0.create_stream().unwrap(), d1.create_stream().unwrap());
    common::hold_stream(d0, &s0, Duration::from_millis(200));
    a.add_index(&s0, None).unwrap(); // queued behind the busy-wait: pending
    a.move_to_device(d1, &s1, None).unwrap();
    assert_eq!(a.device().info().ordinal, 1);
    assert_eq!(a.dl_device(Location::Device).device_id, 1);
    let export = a.to_dlpack(Location::Device, false, None).unwrap();
    assert_eq!(export.dl_tensor().device.device_id, 1);
    assert_eq!(export.dl_tensor().device, a.dl_device(Location::Device));
    drop(export);
    a.move_to(Location::Host, &s1, Transfer::Sync, None).unwrap();
    let want: Vec<i32> = data.iter().enumerate().map(|(i, v)| v.wrapping_add(i as i32)).collect();
    assert!(a.to_vec(None).unwrap() == want, "the moved array lost the kernel's result");

    // Work on device 1 after the move; then back to device 0.
    a.add_index(&s1, None).unwrap();
    a.move_to_device(d0, &s0, None).unwrap();
    assert_eq!(a.dl_device(Location::Device).device_id, 0);
    a.move_to(Location::Host, &s0, Transfer::Sync, None).unwrap();
    let want: Vec<i32> = want.iter().enumerate().map(|(i, v)| v.wrapping_add(i as i32)).collect();
    assert!(a.to_vec(None).unwrap() == want);
}

/// A host-only array moves without a device copy; a locked one needs its id.
fn memarray_on_the_host_side_moves_without_a_copy<D: PeerDevice>(d0: &Arc<D>, d1: &Arc<D>) {
    let mut a = MemArray::<u8, 1, D>::from_vec(d0, [5], vec![1, 2, 3, 4, 5]).unwrap();
    a.enter(LockId(9)).unwrap();
    let s1 = d1.create_stream().unwrap();
    assert!(matches!(a.move_to_device(d1, &s1, None), Err(Error::Lock(_))));
    a.move_to_device(d1, &s1, Some(LockId(9))).unwrap();
    a.exit();
    assert_eq!(a.dl_device(Location::Device).device_id, 1);
    assert_eq!(a.to_vec(None).unwrap(), vec![1, 2, 3, 4, 5]);
    a.add_index(&s1, None).unwrap();
    a.move_to(Location::Host, &s1, Transfer::Sync, None).unwrap();
    assert_eq!(a.to_vec(None).unwrap(), vec![1, 3, 5, 7, 9]);
}

/// Ranges past either end, streams and buffers of the wrong device, and
/// capturing streams are refused with typed errors.
fn peer_errors_are_typed<D: PeerDevice>(d0: &Arc<D>, d1: &Arc<D>) {
    let (mut a0, b1, mut c1) = (d0.alloc(1024).unwrap(), d1.alloc(512).unwrap(), d1.alloc(512).unwrap());
    let oob = |r: gpuport::Result<()>, what: &str| match r {
        Err(Error::OutOfBounds { what: w, .. }) => assert_eq!(w, what),
        other => panic!("expected OutOfBounds for {what}, got {other:?}"),
    };
    oob(d0.copy_peer(&a0, 600, &mut c1, 0, 512), "source");
    oob(d0.copy_peer(&a0, 0, &mut c1, 1, 512), "destination");
    oob(d0.copy_peer(&a0, usize::MAX, &mut c1, 0, 2), "source");
    let mismatch = |r: gpuport::Result<()>| assert!(matches!(r, Err(Error::DeviceMismatch { .. })), "{r:?}");
    // Neither buffer is device 0's.
    mismatch(d0.copy_peer(&b1, 0, &mut c1, 0, 16));
    // A stream of device 1 for a copy enqueued by device 0.
    // SAFETY: refused before anything is enqueued.
    mismatch(unsafe { d0.copy_peer_async(&a0, 0, &c1, 0, 16, d1.default_stream()) });
    // The same-device copy still refuses another device's buffer.
    mismatch(d0.copy_device(&b1, 0, &mut a0, 0, 16));

    let mut arr = MemArray::<u32, 1, D>::from_vec(d0, [64], vec![3; 64]).unwrap();
    let s0 = d0.create_stream().unwrap();
    arr.move_to(Location::Device, &s0, Transfer::Sync, None).unwrap();
    assert!(matches!(arr.move_to_device(d1, &s0, None), Err(Error::DeviceMismatch { .. })));
    assert_eq!(arr.device().info().ordinal, 0, "a refused move leaves the array where it was");
    let s1 = d1.create_stream().unwrap();
    let capture = d1.begin_capture(&s1, CaptureMode::ThreadLocal).unwrap();
    match arr.move_to_device(d1, capture.stream(), None) {
        Err(Error::Graph { kind: GraphErrorKind::NotCapturable, .. }) => {}
        other => panic!("expected NotCapturable, got {other:?}"),
    }
    drop(capture.end());
    arr.move_to(Location::Host, &s0, Transfer::Sync, None).unwrap();
    assert_eq!(arr.to_vec(None).unwrap(), vec![3; 64]);
}

/// Each device's caching pool hands out only its own device's blocks: a
/// block freed by device 0's pool is never what device 1's pool returns,
/// and device 0's pool gets it back.
fn caching_pools_keep_their_devices_blocks<D: PeerDevice>(d0: &Arc<D>, d1: &Arc<D>) {
    let p0 = Allocator::<D::B>::new(CachingPool::new(d0.clone(), PoolConfig::default()));
    let p1 = Allocator::<D::B>::new(CachingPool::new(d1.clone(), PoolConfig::default()));
    let (s0, s1) = (d0.create_stream().unwrap(), d1.create_stream().unwrap());
    let mut freed0 = Vec::new();
    for size in [512, 4096, MIB, 3 * MIB] {
        let a = p0.alloc(size, &s0).unwrap();
        assert_eq!(a.ordinal(), 0);
        freed0.push(a.device_ptr());
    }
    d0.synchronize(&s0).unwrap();
    for size in [512, 4096, MIB, 3 * MIB] {
        let b = p1.alloc(size, &s1).unwrap();
        assert_eq!(b.ordinal(), 1);
        assert!(!freed0.contains(&b.device_ptr()), "device 1's pool returned device 0's block {:#x}", b.device_ptr());
    }
    let again = p0.alloc(MIB, &s0).unwrap();
    assert_eq!(again.ordinal(), 0);
    assert!(freed0.contains(&again.device_ptr()), "device 0's pool did not reuse its own free block");
    // The current resources, what MemArray allocates through, are per device too.
    let (c0, c1) = (
        gpuport::memory::current_resource::<D::B>(d0).unwrap(),
        gpuport::memory::current_resource::<D::B>(d1).unwrap(),
    );
    assert_eq!(c0.alloc(256, &s0).unwrap().ordinal(), 0);
    assert_eq!(c1.alloc(256, &s1).unwrap().ordinal(), 1);
}

mod two_devices {
    use super::*;
    two_device_tests!(
        peer_access_is_queried_enabled_and_used,
        peer_copy_of_64_mib_arrives_intact,
        peer_copy_follows_the_source_streams_work,
        memarray_moves_to_device_1,
        memarray_on_the_host_side_moves_without_a_copy,
        peer_errors_are_typed,
        caching_pools_keep_their_devices_blocks,
    );
}

// ---- one device (host, cuda:0, rocm:0) ------------------------------------------------

/// A device is its own peer: access is `true`, enabling is a no-op, and a
/// "peer" copy within it is stream-ordered, range-checked, and exact.
fn a_device_is_its_own_peer<D: PeerDevice>(d: &D) {
    let d = D::open(d.info().ordinal).unwrap();
    assert!(d.can_access_peer(&d).unwrap());
    d.enable_peer_access(&d).unwrap();
    d.enable_peer_access(&d).unwrap();
    let len = 4 * MIB;
    let data = common::pattern(len, 3);
    let mut src = d.alloc(len).unwrap();
    d.copy_to_device(&data, &mut src, 0).unwrap();
    let mut dst = d.alloc(len).unwrap();
    d.copy_peer(&src, 8, &mut dst, 0, len - 8).unwrap();
    assert!(read(d.as_ref(), &dst)[..len - 8] == data[8..]);

    let s = d.create_stream().unwrap();
    common::hold_stream(&d, &s, Duration::from_millis(100));
    // SAFETY: both buffers outlive the work: `s` is synchronized below.
    unsafe {
        d.memset_async(&src, 0, len, 0x5A, &s).unwrap();
        d.copy_peer_async(&src, 0, &dst, 0, len, &s).unwrap();
    }
    d.synchronize(&s).unwrap();
    assert!(read(d.as_ref(), &dst).iter().all(|&b| b == 0x5A), "the copy ran before the memset");

    assert!(matches!(d.copy_peer(&src, 1, &mut dst, 0, len), Err(Error::OutOfBounds { what: "source", .. })));
    assert!(matches!(d.copy_peer(&src, 0, &mut dst, 1, len), Err(Error::OutOfBounds { what: "destination", .. })));
    d.copy_peer(&src, len, &mut dst, len, 0).unwrap(); // empty, at the end: fine

    // Moving an array to its own device changes nothing.
    let mut a = MemArray::<u16, 1, D>::from_vec(&d, [3], vec![4, 5, 6]).unwrap();
    a.move_to(Location::Device, &s, Transfer::Sync, None).unwrap();
    a.move_to_device(&d, &s, None).unwrap();
    assert_eq!(a.dl_device(Location::Device).device_id, d.info().ordinal as i32);
    a.move_to(Location::Host, &s, Transfer::Sync, None).unwrap();
    assert_eq!(a.to_vec(None).unwrap(), vec![4, 5, 6]);
}

mod one_device {
    use super::*;
    backend_tests!(a_device_is_its_own_peer);
}

/// The host backend has one device: there is no second one to move to or
/// to pool for, which the two-device tests need.
#[test]
fn the_host_backend_has_exactly_one_device() {
    assert_eq!(HostDevice::count().unwrap(), 1);
    assert!(matches!(HostDevice::open(1), Err(Error::InvalidDeviceSpec { .. })));
}
