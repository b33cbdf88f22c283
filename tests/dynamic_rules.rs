//! Rules of the run-time layer that a binding's calls follow, on every
//! backend: a `get_dlpack` block's life (`dynamic::lock_context`) and the
//! default device of a CUDA Array Interface import (`dynamic::cai`).

mod common;

use gpuport::array::{Location, LockError};
use gpuport::dlpack::{DLDeviceType, DLPackError};
use gpuport::dynamic::exchange::{self, Export, ExportRequest};
use gpuport::dynamic::lock_context::LockContext;
use gpuport::dynamic::{new_owned, AnyArray, DType};
use gpuport::Error;

/// A versioned export request with no consumer stream.
fn versioned() -> ExportRequest {
    ExportRequest { max_version: Some((1, 0)), ..Default::default() }
}

/// `block`'s export of `a`, with no consumer stream.
fn export_in(block: &LockContext, a: &mut AnyArray, req: ExportRequest) -> gpuport::Result<Export> {
    assert!(req.stream.is_none());
    // SAFETY: no stream handle is passed.
    unsafe { block.export(a, req) }
}

fn array_on(spec: &str) -> Option<AnyArray> {
    let dev = common::open_or_skip(spec)?;
    Some(AnyArray::Owned(new_owned(&dev, DType::Float32, &[4]).unwrap()))
}

// ---- dynamic::lock_context ------------------------------------------------------------

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_lock_context_is_entered_once_and_exports_with_its_lock_only_while_entered(#[case] spec: &str) {
    let Some(mut a) = array_on(spec) else { return };
    let block = LockContext::new(false, None);
    export_in(&block, &mut a, versioned()).expect("a fresh block exports as a plain export");
    assert_eq!(a.lock_id(), None, "a fresh block holds no lock");
    block.enter(&mut a, None).unwrap();
    assert_eq!(a.lock_id(), Some(block.lock_id()));
    // SAFETY: no stream handle is passed.
    let e = unsafe { exchange::export(&mut a, versioned()) }.err().expect("a plain export of a locked array");
    assert!(matches!(e, Error::Lock(LockError::Locked { .. })), "{e}");
    export_in(&block, &mut a, versioned()).expect("the entered block exports with its lock");
    let e = block.enter(&mut a, None).unwrap_err();
    assert!(matches!(e, Error::Lock(LockError::BlockEntered { .. })), "{e}");
    assert_eq!(a.lock_id(), Some(block.lock_id()), "a refused second entry keeps the lock");

    assert!(block.exit(&mut a), "an entered block closes");
    assert_eq!(a.lock_id(), None);
    let e = export_in(&block, &mut a, versioned()).err().expect("an export after the block");
    assert!(matches!(e, Error::DLPack(DLPackError::BlockEnded { .. })), "{e}");
    assert!(e.python_message(Some("__dlpack__")).starts_with("__dlpack__: this get_dlpack block has ended"), "{e}");
    assert_eq!(e.python_class().name(), "DLPackError");
    let e = block.enter(&mut a, None).unwrap_err();
    assert!(matches!(e, Error::Lock(LockError::BlockEnded { op: "__enter__", .. })), "{e}");
    assert_eq!(e.python_class().name(), "LockError");
    assert!(!block.exit(&mut a), "a closed block closes once");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn exiting_a_block_releases_only_its_own_lock(#[case] spec: &str) {
    let Some(mut a) = array_on(spec) else { return };
    let fresh = LockContext::new(false, None);
    assert!(!fresh.exit(&mut a), "a fresh block releases nothing");
    let first = LockContext::new(false, None);
    first.enter(&mut a, None).unwrap();
    a.exit();
    let second = LockContext::new(false, None);
    assert_ne!(first.lock_id(), second.lock_id(), "two blocks share a lock id");
    second.enter(&mut a, None).unwrap();
    assert!(first.exit(&mut a));
    assert_eq!(a.lock_id(), Some(second.lock_id()), "the first block released the second's lock");
    let e = fresh.enter(&mut a, None).unwrap_err();
    assert!(matches!(e, Error::Lock(LockError::AlreadyLocked { .. })), "{e}");
    assert!(!fresh.exit(&mut a), "a block whose entry failed stays fresh");
    assert!(second.exit(&mut a));
    fresh.enter(&mut a, None).expect("entered once the array is free");
}

#[rstest::rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
#[case::rocm("rocm:0")]
fn a_block_exports_the_copy_it_prefers_with_the_flags_it_was_made_with(#[case] spec: &str) {
    let Some(mut a) = array_on(spec) else { return };
    let block = LockContext::new(true, Some(Location::Host));
    assert_eq!(block.dl_device(&a).device_type, DLDeviceType::CPU);
    block.enter(&mut a, None).unwrap();
    let e = export_in(&block, &mut a, ExportRequest::default()).err().expect("a read-only legacy export");
    assert!(matches!(e, Error::DLPack(DLPackError::Refused { .. })), "{e}");
    let t = export_in(&block, &mut a, versioned()).unwrap().into_versioned();
    assert_eq!(t.dl_tensor().device.device_type, DLDeviceType::CPU);
    assert!(block.exit(&mut a));
}

// ---- dynamic::cai ---------------------------------------------------------------------

#[test]
fn a_cuda_array_interface_without_a_device_is_imported_on_cuda_0() {
    use gpuport::dynamic::cai::{CudaArrayInterface, DEFAULT_DEVICE};
    let empty = CudaArrayInterface {
        version: Some(3),
        shape: Some(vec![0]),
        typestr: Some("<f4".into()),
        ..Default::default()
    };
    // SAFETY: an empty array: no memory is read or written.
    let imported = unsafe { empty.import(None, std::sync::Arc::new(())) };
    match gpuport::open(DEFAULT_DEVICE) {
        Ok(dev) => {
            let a = AnyArray::Imported(imported.unwrap());
            assert!(gpuport::dynamic::same_device(&a.device(), &dev), "imported on {}", a.device().info().spec());
        }
        Err(open) => {
            let e = imported.err().expect("no CUDA device here, yet imported");
            assert_eq!(e.to_string(), open.to_string(), "the error is not the default device's");
        }
    }
    assert_eq!(DEFAULT_DEVICE, "cuda:0");
}
