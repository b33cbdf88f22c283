//! Strided views: layouts, slicing against a plain reference (proptest),
//! DLPack descriptions without heap allocation, and i64 overflow errors.

mod common;

use std::sync::Arc;

use common::open_or_skip;
use gpuport::array::{DeviceSpace, ManagedSpace, ShapeError, View};
use gpuport::dlpack::{dl_device, DLDeviceType, DLPackError};
use gpuport::{on_backend, BackendKind, Device, DeviceMemory, Error, Location, MemArray, MemoryKind, Transfer};
use proptest::prelude::*;
use rstest::rstest;

/// Reference: element (i, j, k) of a row-major [a, b, c] array is its linear index.
fn reference(shape: [usize; 3], idx: [usize; 3]) -> u32 {
    ((idx[0] * shape[1] + idx[1]) * shape[2] + idx[2]) as u32
}

fn data(shape: [usize; 3]) -> Vec<u32> {
    (0..shape.iter().product::<usize>() as u32).collect()
}

fn range_in(extent: usize) -> impl Strategy<Value = std::ops::Range<usize>> {
    (0..=extent).prop_flat_map(move |s| (Just(s), s..=extent)).prop_map(|(s, e)| s..e)
}

proptest! {
    #[test]
    fn slices_and_steps_read_what_the_reference_says(
        (shape, ranges) in prop::array::uniform3(1usize..6).prop_flat_map(|sh| {
            (Just(sh), [range_in(sh[0]), range_in(sh[1]), range_in(sh[2])])
        }),
        axis in 0usize..3,
        step in 1usize..4,
    ) {
        let d = data(shape);
        let v = View::from_slice(&d, shape).unwrap();
        let s = v.slice(ranges.clone()).unwrap().step(axis, step).unwrap();
        let mut expect = Vec::new();
        for i in ranges[0].clone() {
            for j in ranges[1].clone() {
                for k in ranges[2].clone() {
                    let idx = [i, j, k];
                    if (idx[axis] - ranges[axis].start) % step == 0 {
                        expect.push(reference(shape, idx));
                    }
                }
            }
        }
        prop_assert_eq!(s.to_vec(), expect);
        prop_assert_eq!(s.len(), s.to_vec().len());
    }

    #[test]
    fn permuted_and_flipped_views_read_what_the_reference_says(
        shape in prop::array::uniform3(1usize..5),
        perm in Just([0usize, 1, 2]).prop_shuffle(),
        flip in 0usize..3,
    ) {
        let d = data(shape);
        let v = View::from_slice(&d, shape).unwrap();
        let p = v.permute(perm).unwrap().flip(flip).unwrap();
        let e = p.extents();
        for i in 0..e[0] {
            for j in 0..e[1] {
                for k in 0..e[2] {
                    let mut out = [i, j, k];
                    out[flip] = e[flip] - 1 - out[flip];
                    let mut orig = [0usize; 3];
                    for (pos, &ax) in perm.iter().enumerate() {
                        orig[ax] = out[pos];
                    }
                    prop_assert_eq!(p.get([i, j, k]), Some(reference(shape, orig)));
                }
            }
        }
    }
}

#[test]
fn row_major_and_column_major_views_address_elements_differently() {
    let d: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let r = View::from_slice(&d, [2, 3]).unwrap();
    let c = View::column_major(&d, [2, 3]).unwrap();
    assert_eq!(r.strides(), [3, 1]);
    assert_eq!(c.strides(), [1, 2]);
    assert!(r.is_row_major() && !r.is_column_major());
    assert!(c.is_column_major() && !c.is_row_major());
    assert_eq!(r.get([1, 0]), Some(3.0));
    assert_eq!(c.get([1, 0]), Some(1.0));
    assert_eq!(r.transpose().to_vec(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    assert!(r.transpose().is_column_major());
}

#[test]
fn strided_views_must_stay_inside_their_slice() {
    let d: Vec<u8> = (0..10).collect();
    let whole = View::from_slice_strided(&d, [2, 5], [5, 1]).unwrap();
    assert_eq!(whole.to_vec(), d, "a [2, 5] view with strides [5, 1] is the whole slice, in order");
    assert_eq!(whole.get([1, 4]), Some(9));
    let e = View::from_slice_strided(&d, [2, 5], [6, 1]).unwrap_err();
    assert!(matches!(e, Error::Shape(ShapeError::OutOfRange { .. })), "{e}");
    assert!(View::from_slice_strided(&d, [3, 4], [-1, 1]).is_err());
    assert!(View::from_slice(&d, [11]).is_err());
    // Zero-size views reach nothing, whatever the strides.
    let empty = View::from_slice_strided(&d, [0, 5], [1000, 1]).unwrap();
    assert_eq!((empty.len(), empty.to_vec(), empty.get([0, 0])), (0, vec![], None));
}

#[test]
fn bad_slices_steps_and_permutations_are_typed_errors() {
    let d = [0u16; 12];
    let v = View::from_slice(&d, [3, 4]).unwrap();
    assert!(matches!(v.slice([0..4, 0..4]), Err(Error::Shape(ShapeError::InvalidSlice { axis: 0, .. }))));
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = v.slice([2..1, 0..4]);
    assert!(matches!(backwards, Err(Error::Shape(ShapeError::InvalidSlice { .. }))));
    assert!(matches!(v.step(1, 0), Err(Error::Shape(ShapeError::InvalidSlice { .. }))));
    assert!(matches!(v.step(2, 1), Err(Error::Shape(ShapeError::InvalidSlice { .. }))));
    assert!(matches!(v.permute([0, 0]), Err(Error::Shape(ShapeError::InvalidSlice { .. }))));
    assert!(v.slice([3..3, 0..4]).unwrap().is_empty());
}

#[test]
fn to_dlpack_describes_the_view_with_inline_shape_and_strides() {
    let d: Vec<i32> = (0..24).collect();
    let v = View::from_slice(&d, [2, 3, 4]).unwrap();
    let s = v.slice([1..2, 0..3, 1..3]).unwrap();
    let dl = s.to_dlpack().unwrap();
    let t = dl.tensor();
    assert_eq!(t.ndim(), 3);
    assert_eq!(t.shape(), &[1, 3, 2]);
    assert_eq!(t.strides(), &[12, 4, 1]);
    assert_eq!(t.byte_offset(), 0);
    assert_eq!(t.device().device_type, DLDeviceType::CPU);
    assert_eq!(t.data() as *const i32, &d[13] as *const i32);
    // The shape pointer points into the wrapper itself: no heap.
    let w = &dl as *const _ as usize;
    let sp = t.shape().as_ptr() as usize;
    assert!(sp >= w && sp < w + std::mem::size_of_val(&dl));
    // SAFETY: reading the C struct while `t` is alive.
    let raw = unsafe { &*t.as_raw() };
    assert_eq!(raw.ndim, 3);
    assert!(s.clone().flip(2).unwrap().to_dlpack().unwrap().tensor().strides()[2] < 0);
}

#[test]
fn empty_views_export_a_null_data_pointer() {
    let d = [1.0f64; 4];
    let v = View::from_slice(&d, [0, 4]).unwrap();
    assert!(v.to_dlpack().unwrap().tensor().data().is_null());
}

#[test]
fn extents_beyond_i64_are_a_typed_error() {
    let d = [0u8; 1];
    // A zero-size view may have an extent no i64 can hold.
    // SAFETY: the view reaches no element.
    let v = unsafe {
        View::<u8, 2>::from_raw_parts(
            d.as_ptr(),
            [0, usize::MAX],
            [1, 1],
            dl_device(BackendKind::Host, MemoryKind::Host, 0),
        )
    }
    .unwrap();
    assert_eq!(v.len(), 0);
    let e = v.to_dlpack().unwrap_err();
    assert!(matches!(e, Error::Shape(ShapeError::NotI64 { what: "extent", axis: 1, .. })), "{e}");
    assert!(e.to_string().contains("does not fit in i64"));
}

#[test]
fn views_of_borrowed_slices_cannot_become_managed_tensors() {
    let d = [0u8; 4];
    let v = View::from_slice(&d, [4]).unwrap();
    assert!(matches!(v.to_managed(), Err(Error::DLPack(DLPackError::NoOwner))));
}

fn device_views<D: Device>(dev: &Arc<D>) {
    let s = dev.create_stream().unwrap();
    let mut a = MemArray::from_vec(dev, [4, 4], (0..16u32).collect()).unwrap();
    assert!(a.device_view(None).is_err(), "device copy not current yet");
    a.move_to(Location::Device, &s, Transfer::Sync, None).unwrap();
    let v = a.device_view(None).unwrap();
    let expect = match <D::B as gpuport::Backend>::KIND {
        BackendKind::Host => DLDeviceType::CPU,
        BackendKind::Cuda => DLDeviceType::CUDA,
        BackendKind::Rocm => DLDeviceType::ROCM,
    };
    assert_eq!(v.dl_device().device_type, expect);
    let sub = v.slice([1..3, 2..4]).unwrap();
    let dl = sub.to_dlpack().unwrap();
    let t = dl.tensor();
    assert_eq!(t.data() as u64, a.device_ptr(None).unwrap() + (4 + 2) * 4);
    assert_eq!(t.shape(), &[2, 2]);
    assert_eq!(t.strides(), &[4, 1]);
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn device_views_describe_device_memory_where_it_is(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => device_views(d));
}

fn managed_views<D: Device>(dev: &Arc<D>) {
    let buf = match dev.alloc_managed(64) {
        Ok(b) => b,
        Err(e) => {
            println!("skipped: {}: managed memory: {e}", dev.info().spec());
            return;
        }
    };
    let backend = dev.info().backend;
    let v = View::<f32, 2, ManagedSpace>::from_buffer(&buf, backend, [4, 4], [4, 1]).unwrap();
    let want = if backend == BackendKind::Cuda { DLDeviceType::CUDA_MANAGED } else { DLDeviceType::CPU };
    assert_eq!(v.to_dlpack().unwrap().tensor().device().device_type, want);
    assert!(View::<f32, 2, ManagedSpace>::from_buffer(&buf, backend, [5, 4], [4, 1]).is_err(), "past the end");
    assert!(View::<f32, 2, DeviceSpace>::from_buffer(&buf, backend, [4, 4], [4, 1]).is_err(), "not device memory");
    assert_eq!(buf.kind(), MemoryKind::Managed);
}

#[rstest]
#[case::host("host")]
#[case::cuda("cuda:0")]
fn managed_views_are_emitted_as_managed_memory(#[case] spec: &str) {
    let Some(dev) = open_or_skip(spec) else { return };
    on_backend!(&dev, d => managed_views(d));
}
