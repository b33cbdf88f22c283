//! MemArray: construction, checked access, locks, residency, moves, clones.
//! Every test body is generic over the device and runs for `host` and `cuda:0`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fill_u32, hold_stream, open_or_skip};
use gpuport::array::{LockError, Residency, ShapeError};
use gpuport::{on_backend, Device, Error, Location, LockId, MemArray, Transfer};
use rstest::rstest;

fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

fn moves_round_trip<D: Device>(dev: &Arc<D>, mode: Transfer) {
    let stream = dev.create_stream().unwrap();
    let mut a = MemArray::from_vec(dev, [3, 4, 5], iota(60)).unwrap();
    assert_eq!(a.residency(), Residency::Host);
    a.move_to(Location::Device, &stream, mode, None).unwrap();
    assert_eq!(a.residency(), Residency::Both);
    // The device copy becomes the only current one, as after a kernel write.
    a.device_ptr_mut(None).unwrap();
    assert_eq!(a.residency(), Residency::Device);
    assert!(matches!(a.get([0, 0, 0], None), Err(Error::Residency(_))));
    a.move_to(Location::Host, &stream, mode, None).unwrap();
    a.synchronize().unwrap();
    assert_eq!(a.to_vec(None).unwrap(), iota(60));
    assert_eq!(a.get([2, 3, 4], None).unwrap(), 59.0);
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn data_survives_a_sync_round_trip_through_the_device(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => moves_round_trip(d, Transfer::Sync));
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn data_survives_an_async_round_trip_through_the_device(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => moves_round_trip(d, Transfer::Async));
}

fn move_to_current_copy_returns_early<D: Device>(dev: &Arc<D>) {
    let stream = dev.create_stream().unwrap();
    let mut a = MemArray::from_vec(dev, [4], vec![1u32, 2, 3, 4]).unwrap();
    a.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
    // Hold the stream: a copy enqueued now would leave a pending event.
    hold_stream(dev, &stream, Duration::from_millis(200));
    a.move_to(Location::Device, &stream, Transfer::Async, None).unwrap();
    a.move_to(Location::Host, &stream, Transfer::Async, None).unwrap();
    assert!(a.pending_event().is_none(), "no copy when the copy is already current");
    dev.synchronize(&stream).unwrap();
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn move_to_a_current_copy_enqueues_nothing(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => move_to_current_copy_returns_early(d));
}

/// An async move returns while the stream is still busy, and the data is
/// only read after the stream has passed the copy.
fn async_moves_are_async<D: Device>(dev: &Arc<D>) {
    let stream = dev.create_stream().unwrap();
    let n = 1 << 12;
    let mut a = MemArray::<u32, 1, D>::zeros(dev, [n]).unwrap();
    a.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
    let ptr = a.device_ptr_mut(None).unwrap();
    // SAFETY: `ptr` addresses the array's n u32s, alive until we synchronize.
    unsafe { fill_u32(dev, &stream, ptr, n, 7) };
    hold_stream(dev, &stream, Duration::from_millis(300));
    let start = Instant::now();
    a.move_to(Location::Host, &stream, Transfer::Async, None).unwrap();
    assert!(start.elapsed() < Duration::from_millis(250), "move_to(Async) waited for the stream");
    assert!(a.is_transfer_pending().unwrap(), "the copy should still be queued behind the busy kernel");
    assert!(!dev.is_idle(&stream).unwrap());
    dev.synchronize(&stream).unwrap();
    assert!(!a.is_transfer_pending().unwrap());
    assert!(a.as_slice(None).unwrap().iter().all(|&v| v == 7));
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn async_move_returns_before_the_copy_runs(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => async_moves_are_async(d));
}

fn sync_moves_wait_for_the_work_before_them<D: Device>(dev: &Arc<D>) {
    let stream = dev.create_stream().unwrap();
    let mut a = MemArray::from_vec(dev, [64], iota(64)).unwrap();
    hold_stream(dev, &stream, Duration::from_millis(1)); // compiled before the timing
    dev.synchronize(&stream).unwrap();
    let start = Instant::now();
    hold_stream(dev, &stream, Duration::from_millis(300));
    a.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(300), "move_to(Sync) returned before the stream's earlier work");
    assert!(!a.is_transfer_pending().unwrap());
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn sync_move_returns_after_the_stream_s_earlier_work(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => sync_moves_wait_for_the_work_before_them(d));
}

fn uploads_land_whole_in_both_copies<D: Device>(dev: &Arc<D>) {
    let stream = dev.create_stream().unwrap();
    // One piece, four pieces with a remainder (1 MiB + 12 bytes), 8 MiB
    // pieces with a remainder (48 MiB + 4 bytes).
    for n in [0usize, 5, (1 << 18) + 3, (3 << 22) + 1] {
        let data = iota(n);
        let mut a = MemArray::<f32, 1, D>::zeros(dev, [n]).unwrap();
        a.upload_from_slice(&data, &stream, None).unwrap();
        assert_eq!(a.residency(), Residency::Both, "n = {n}");
        // The device copy alone: make it the only current copy, then copy it home.
        a.device_ptr_mut(None).unwrap();
        a.move_to(Location::Host, &stream, Transfer::Sync, None).unwrap();
        assert!(a.to_vec(None).unwrap() == data, "n = {n}: the device copy differs from the data uploaded");
    }
    let mut a = MemArray::<f32, 1, D>::zeros(dev, [4]).unwrap();
    let short = a.upload_from_slice(&[1.0; 3], &stream, None);
    assert!(matches!(short, Err(Error::Shape(ShapeError::LengthMismatch { expected: 4, got: 3, .. }))), "{short:?}");
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn upload_from_slice_fills_host_and_device_copies(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => uploads_land_whole_in_both_copies(d));
}

/// `read_from_slice` stages an upload as it copies when the data lives on a
/// GPU device (a new array, a current device copy, or a staged last read),
/// so the move to the device copies nothing; once the host copy is in use
/// it copies on the host alone. The host backend always copies on the host.
fn reads_go_where_the_data_lives<D: Device>(dev: &Arc<D>, on_gpu: bool) {
    let stream = dev.create_stream().unwrap();
    let n = (1 << 18) + 3; // four pieces with a remainder
    let data = iota(n);
    // Moves to the device, then checks the device copy alone holds `want`.
    let device_holds = |a: &mut MemArray<f32, 1, D>, want: &[f32], what: &str| {
        a.move_to(Location::Device, &stream, Transfer::Async, None).unwrap();
        assert!(!a.is_staged(), "{what}: the move must end the staging");
        a.device_ptr_mut(None).unwrap();
        a.move_to(Location::Host, &stream, Transfer::Sync, None).unwrap();
        assert!(a.to_vec(None).unwrap() == want, "{what}: the device copy differs from the data read");
    };
    let mut a = MemArray::<f32, 1, D>::zeros(dev, [n]).unwrap();
    a.read_from_slice(&data, &stream, None).unwrap();
    assert_eq!(a.residency(), Residency::Host, "a new array: the host copy is what the read reports");
    assert_eq!(a.is_staged(), on_gpu, "a new array");
    device_holds(&mut a, &data, "a new array");
    // A current device copy (Both after `device_holds`): staged again, and a
    // second staged read in a row stays staged.
    let twice: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
    a.read_from_slice(&data, &stream, None).unwrap();
    a.read_from_slice(&twice, &stream, None).unwrap();
    assert_eq!((a.residency(), a.is_staged()), (Residency::Host, on_gpu), "a current device copy");
    device_holds(&mut a, &twice, "a current device copy");
    // A host write after a staged read: the staged upload no longer matches,
    // so the move must copy the written host copy.
    a.read_from_slice(&data, &stream, None).unwrap();
    a.as_mut_slice(None).unwrap()[0] = -5.0;
    assert!(!a.is_staged(), "a host write must end the staging");
    let mut written = data.clone();
    written[0] = -5.0;
    device_holds(&mut a, &written, "a host write after a staged read");
    // A live export of the host copy may write it behind the array's back:
    // the read is not staged, so the move copies whatever the export wrote.
    a.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
    let (_, export) = a.host_parts(None).unwrap();
    a.read_from_slice(&data, &stream, None).unwrap();
    assert_eq!((a.residency(), a.is_staged()), (Residency::Host, false), "a live export");
    drop(export);
    // The host copy in use (written on the host, only it current): a plain host copy.
    a.as_mut_slice(None).unwrap()[0] = 1.0;
    a.read_from_slice(&data, &stream, None).unwrap();
    assert_eq!((a.residency(), a.is_staged()), (Residency::Host, false), "a host copy in use");
    assert!(a.to_vec(None).unwrap() == data);
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn read_from_slice_stages_an_upload_only_when_the_data_lives_on_the_device(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    let on_gpu = dev.backend() != gpuport::BackendKind::Host;
    on_backend!(&dev, d => reads_go_where_the_data_lives(d, on_gpu));
}

/// A move of a staged array to the device is ordered after the upload: on
/// another stream, a synchronous move returns only once the upload, queued
/// behind a long kernel, is done.
fn staged_moves_wait_for_the_upload<D: Device>(dev: &Arc<D>) {
    let (s1, s2) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
    let data = iota(1 << 18);
    let mut a = MemArray::<f32, 1, D>::zeros(dev, [data.len()]).unwrap();
    hold_stream(dev, &s1, Duration::from_millis(1)); // compiled before the timing
    dev.synchronize(&s1).unwrap();
    let start = Instant::now();
    hold_stream(dev, &s1, Duration::from_millis(300));
    a.read_from_slice(&data, &s1, None).unwrap();
    assert!(a.is_staged());
    a.move_to(Location::Device, &s2, Transfer::Sync, None).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(300), "the move returned before the staged upload");
    assert!(!a.is_transfer_pending().unwrap());
}

#[rstest]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_staged_move_waits_for_the_upload(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => staged_moves_wait_for_the_upload(d));
}

fn uploads_are_async_and_host_writes_wait<D: Device>(dev: &Arc<D>) {
    let stream = dev.create_stream().unwrap();
    let n = 1 << 20; // 4 MiB: four pieces
    let mut a = MemArray::<f32, 1, D>::zeros(dev, [n]).unwrap();
    a.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
    let data = iota(n);
    // Load the busy-wait kernel first (ROCm compiles it on first use), so
    // the timing below covers only the hold.
    hold_stream(dev, &stream, Duration::from_millis(1));
    dev.synchronize(&stream).unwrap();
    let start = Instant::now();
    hold_stream(dev, &stream, Duration::from_millis(300));
    a.upload_from_slice(&data, &stream, None).unwrap();
    assert!(start.elapsed() < Duration::from_millis(250), "upload_from_slice waited for the stream");
    assert!(a.is_transfer_pending().unwrap(), "the upload should still be queued behind the busy kernel");
    // The queued pieces read the host copy: a host write must wait for them.
    a.fill(-1.0, None).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(300), "fill wrote the host copy while the upload read it");
    assert!(a.as_slice(None).unwrap().iter().all(|&v| v == -1.0));
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn upload_from_slice_returns_before_the_copy_runs_and_host_writes_wait(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => uploads_are_async_and_host_writes_wait(d));
}

fn host_access_waits_for_a_pending_copy<D: Device>(dev: &Arc<D>) {
    let stream = dev.create_stream().unwrap();
    let mut a = MemArray::<u32, 1, D>::zeros(dev, [256]).unwrap();
    a.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
    let ptr = a.device_ptr_mut(None).unwrap();
    // SAFETY: as above.
    unsafe { fill_u32(dev, &stream, ptr, 256, 9) };
    hold_stream(dev, &stream, Duration::from_millis(100));
    a.move_to(Location::Host, &stream, Transfer::Async, None).unwrap();
    // No explicit synchronize: checked access waits for the pending copy.
    assert_eq!(a.get([255], None).unwrap(), 9);
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn checked_reads_wait_for_a_pending_async_copy(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => host_access_waits_for_a_pending_copy(d));
}

fn kernels_on_two_streams_run_in_array_order<D: Device>(dev: &Arc<D>) {
    let (home, b, c) = (dev.create_stream().unwrap(), dev.create_stream().unwrap(), dev.create_stream().unwrap());
    let mut a = MemArray::from_vec(dev, [4, 8], vec![1.0f32; 32]).unwrap();
    // The device copy belongs to `home`; compile both kernels (GPU backends
    // do on first use) before timing matters.
    a.scale(1.0, &home, None).unwrap();
    a.add_index(&home, None).unwrap();
    a.fill(1.0, None).unwrap();
    a.move_to(Location::Device, &home, Transfer::Sync, None).unwrap();
    // `scale` waits on `b` behind 200 ms; `add_index` on `c` must run after it.
    hold_stream(dev, &b, Duration::from_millis(200));
    a.scale(2.0, &b, None).unwrap();
    a.add_index(&c, None).unwrap();
    a.move_to(Location::Host, &c, Transfer::Sync, None).unwrap();
    assert_eq!(a.get([3, 7], None).unwrap(), 2.0 + 3.0 + 7.0, "add_index ran before scale");
    assert_eq!(a.get([0, 0], None).unwrap(), 2.0);
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn kernels_on_different_streams_see_each_others_results(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => kernels_on_two_streams_run_in_array_order(d));
}

fn clone_is_deep<D: Device>(dev: &Arc<D>) {
    let stream = dev.create_stream().unwrap();
    let mut a = MemArray::from_vec(dev, [2, 3], iota(6)).unwrap();
    let mut b = a.clone();
    b.set([0, 0], 100.0, None).unwrap();
    assert_eq!(a.get([0, 0], None).unwrap(), 0.0);

    // A device-current array is cloned on the device.
    a.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
    a.device_ptr_mut(None).unwrap();
    let mut c = a.try_clone(None).unwrap();
    assert_eq!(c.residency(), Residency::Device);
    assert_ne!(c.device_ptr(None).unwrap(), a.device_ptr(None).unwrap());
    c.move_to(Location::Host, &stream, Transfer::Sync, None).unwrap();
    assert_eq!(c.to_vec(None).unwrap(), iota(6));
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn clones_are_deep_copies_made_where_the_data_is(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => clone_is_deep(d));
}

fn zero_size_arrays_work<D: Device>(dev: &Arc<D>) {
    let stream = dev.create_stream().unwrap();
    let mut a = MemArray::<f64, 3, D>::zeros(dev, [4, 0, 2]).unwrap();
    assert!(a.is_empty());
    a.move_to(Location::Device, &stream, Transfer::Async, None).unwrap();
    a.move_to(Location::Host, &stream, Transfer::Sync, None).unwrap();
    assert_eq!(a.device_ptr(None).unwrap(), 0);
    assert_eq!(a.to_vec(None).unwrap(), Vec::<f64>::new());
    assert!(matches!(a.get([0, 0, 0], None), Err(Error::Shape(ShapeError::IndexOutOfBounds { .. }))));
    let t = a.to_dlpack(Location::Device, false, None).unwrap();
    assert!(t.dl_tensor().data.is_null());
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn zero_size_arrays_move_and_export_without_memory(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => zero_size_arrays_work(d));
}

/// A zero-filled array's zeros are written on first use, not at creation
/// (host), or set on the device instead of copied (first move): either way
/// it reads zero where a freed array's memory held data.
fn new_zeros_read_zero_in_reused_memory<D: Device>(dev: &Arc<D>) {
    let stream = dev.create_stream().unwrap();
    for round in 0..3 {
        let mut used = MemArray::from_vec(dev, [64, 64], vec![7.0f32; 4096]).unwrap();
        used.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
        drop(used);
        let a = MemArray::<f32, 2, D>::zeros(dev, [64, 64]).unwrap();
        assert!(a.to_vec(None).unwrap().iter().all(|&x| x == 0.0), "round {round}: host copy not zero");
        drop(a);

        let mut used = MemArray::from_vec(dev, [64, 64], vec![7.0f32; 4096]).unwrap();
        used.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
        drop(used);
        let mut b = MemArray::<f32, 2, D>::zeros(dev, [64, 64]).unwrap();
        b.move_to(Location::Device, &stream, Transfer::Async, None).unwrap();
        assert_eq!(b.residency(), Residency::Both);
        b.device_ptr_mut(None).unwrap(); // only the device copy is current now
        b.move_to(Location::Host, &stream, Transfer::Sync, None).unwrap();
        assert!(b.to_vec(None).unwrap().iter().all(|&x| x == 0.0), "round {round}: device copy not zero");

        // Filled before its zeros were written: the fill wins everywhere.
        let mut c = MemArray::<f32, 2, D>::zeros(dev, [64, 64]).unwrap();
        c.fill(2.0, None).unwrap();
        c.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
        c.device_ptr_mut(None).unwrap();
        c.move_to(Location::Host, &stream, Transfer::Sync, None).unwrap();
        assert!(c.to_vec(None).unwrap().iter().all(|&x| x == 2.0), "round {round}: fill lost");
    }
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn new_zero_arrays_read_zero_where_freed_arrays_held_data(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => new_zeros_read_zero_in_reused_memory(d));
}

fn host() -> Arc<gpuport::HostDevice> {
    gpuport::HostDevice::open(0).unwrap()
}

#[test]
fn shapes_too_large_for_memory_are_typed_errors() {
    let dev = host();
    let e = MemArray::<f32, 2>::zeros(&dev, [usize::MAX, 2]).unwrap_err();
    assert!(matches!(e, Error::Shape(ShapeError::TooLarge { .. })), "{e}");
    let e = MemArray::<u64, 1>::zeros(&dev, [isize::MAX as usize / 4]).unwrap_err();
    assert!(matches!(e, Error::Shape(ShapeError::TooLarge { .. })), "{e}");
    assert!(e.to_string().contains("isize::MAX"));
}

#[test]
fn from_vec_rejects_a_wrong_length_with_both_counts() {
    let e = MemArray::from_vec(&host(), [2, 2], vec![1i32; 5]).unwrap_err();
    assert_eq!(e.to_string(), "from_vec: shape [2, 2] has 4 elements, but 5 were given");
}

#[test]
fn get_and_set_check_bounds_per_axis() {
    let mut a = MemArray::<i16, 2>::zeros(&host(), [2, 3]).unwrap();
    a.set([1, 2], 5, None).unwrap();
    assert_eq!(a.get([1, 2], None).unwrap(), 5);
    assert!(matches!(a.get([2, 0], None), Err(Error::Shape(ShapeError::IndexOutOfBounds { .. }))));
    assert!(matches!(a.set([0, 3], 1, None), Err(Error::Shape(ShapeError::IndexOutOfBounds { .. }))));
    // [0, 3] would be linear index 3, in range, but axis 1 has extent 3.
    assert_eq!(a.to_vec(None).unwrap(), vec![0, 0, 0, 0, 0, 5]);
}

#[test]
fn a_locked_array_refuses_access_without_its_id() {
    let dev = host();
    let stream = dev.create_stream().unwrap();
    let mut a = MemArray::<f32, 1>::zeros(&dev, [4]).unwrap();
    a.enter(LockId(7)).unwrap();
    assert_eq!(a.lock_id(), Some(LockId(7)));
    assert!(matches!(a.get([0], None), Err(Error::Lock(LockError::Locked { held: 7, .. }))));
    assert!(matches!(a.set([0], 1.0, Some(LockId(8))), Err(Error::Lock(LockError::WrongId { held: 7, given: 8, .. }))));
    assert!(matches!(a.move_to(Location::Device, &stream, Transfer::Sync, None), Err(Error::Lock(_))));
    assert!(matches!(a.to_dlpack(Location::Host, false, None), Err(Error::Lock(_))));
    assert!(matches!(a.host_view(None), Err(Error::Lock(_))));
    assert!(matches!(a.host_ptr(None), Err(Error::Lock(_))));
    assert!(matches!(a.try_clone(None), Err(Error::Lock(_))));
    assert!(matches!(a.fill(1.0, None), Err(Error::Lock(_))));
    assert!(matches!(a.enter(LockId(9)), Err(Error::Lock(LockError::AlreadyLocked { held: 7, requested: 9 }))));
    // With the id everything works.
    a.set([0], 1.0, Some(LockId(7))).unwrap();
    assert_eq!(a.get([0], Some(LockId(7))).unwrap(), 1.0);
    a.move_to(Location::Device, &stream, Transfer::Sync, Some(LockId(7))).unwrap();
    a.exit();
    assert_eq!(a.get([0], None).unwrap(), 1.0);
    let msg = {
        a.enter(LockId(3)).unwrap();
        a.get([0], None).unwrap_err().to_string()
    };
    assert!(msg.contains("locked by id 3") && msg.contains("exit()"), "{msg}");
}

#[test]
fn host_writes_make_the_device_copy_stale() {
    let dev = host();
    let s = dev.default_stream();
    let mut a = MemArray::from_vec(&dev, [3], vec![1u8, 2, 3]).unwrap();
    a.move_to(Location::Device, s, Transfer::Sync, None).unwrap();
    assert_eq!(a.residency(), Residency::Both);
    a.set([0], 9, None).unwrap();
    assert_eq!(a.residency(), Residency::Host);
    assert!(matches!(a.device_ptr(None), Err(Error::Residency(_))));
    a.fill(4, None).unwrap();
    a.copy_from_slice(&[5, 6, 7], None).unwrap();
    let mut out = [0u8; 3];
    a.copy_to_slice(&mut out, None).unwrap();
    assert_eq!(out, [5, 6, 7]);
    assert!(matches!(a.copy_from_slice(&[1], None), Err(Error::Shape(ShapeError::LengthMismatch { .. }))));
}

#[test]
fn swap_exchanges_arrays_without_copying() {
    let dev = host();
    let mut a = MemArray::from_vec(&dev, [2], vec![1i64, 2]).unwrap();
    let mut b = MemArray::from_vec(&dev, [2], vec![3i64, 4]).unwrap();
    let (pa, pb) = (a.host_ptr(None).unwrap(), b.host_ptr(None).unwrap());
    a.swap(&mut b);
    assert_eq!(a.host_ptr(None).unwrap(), pb);
    assert_eq!(b.host_ptr(None).unwrap(), pa);
    assert_eq!(a.to_vec(None).unwrap(), vec![3, 4]);
    let moved = a;
    assert_eq!(moved.host_ptr(None).unwrap(), pb);
}

#[test]
fn the_indexer_addresses_the_same_elements_as_get() {
    let dev = host();
    let mut a = MemArray::from_vec(&dev, [2, 3, 4], iota(24)).unwrap();
    let ix = a.indexer(Location::Host, None).unwrap();
    assert_eq!(ix.shape(), [2, 3, 4]);
    assert_eq!(ix.size(), 24);
    let p = ix.address_of([1, 2, 3]).unwrap();
    // SAFETY: the indexer's address is inside the live host copy.
    assert_eq!(unsafe { *p }, a.get([1, 2, 3], None).unwrap());
    // SAFETY: index in bounds and no copy pending.
    assert_eq!(unsafe { a.get_unchecked([1, 0, 2]) }, 14.0);
}

fn rank_zero_is_one_element<D: Device>(dev: &Arc<D>) {
    let stream = dev.create_stream().unwrap();
    let mut a = MemArray::<f32, 0, D>::from_vec(dev, [], vec![5.0]).unwrap();
    a.move_to(Location::Device, &stream, Transfer::Sync, None).unwrap();
    // One element with no indices: the sum of its indices is 0.
    a.add_index(&stream, None).unwrap();
    a.move_to(Location::Host, &stream, Transfer::Sync, None).unwrap();
    assert_eq!(a.to_vec(None).unwrap(), vec![5.0]);
    let mut b = MemArray::<i32, 1, D>::from_vec(dev, [1], vec![5]).unwrap();
    b.add_index(&stream, None).unwrap();
    b.move_to(Location::Host, &stream, Transfer::Sync, None).unwrap();
    assert_eq!(b.to_vec(None).unwrap(), vec![5], "rank 0 must match a shape-[1] array");
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn add_index_treats_rank_zero_as_one_element(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => rank_zero_is_one_element(d));
}

#[test]
fn extents_beyond_i64_are_refused_even_in_an_empty_shape() {
    let dev = gpuport::HostDevice::open(0).unwrap();
    for shape in [[0, usize::MAX], [0, i64::MAX as usize + 1]] {
        match MemArray::<u8, 2, _>::zeros(&dev, shape) {
            Err(Error::Shape(ShapeError::TooLarge { .. })) => {}
            other => panic!("{shape:?}: expected ShapeError::TooLarge, got {other:?}"),
        }
    }
    // The largest extent DLPack can carry is still accepted in an empty shape.
    let a = MemArray::<u8, 2, _>::zeros(&dev, [0, i64::MAX as usize]).unwrap();
    let t = a.to_dlpack(Location::Host, false, None).unwrap();
    // SAFETY: the exported tensor has ndim 2, so `shape` holds two extents.
    let extent = unsafe { *t.dl_tensor().shape.add(1) };
    assert_eq!(extent, i64::MAX);
}
