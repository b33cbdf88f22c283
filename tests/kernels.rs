//! The built-in array kernels against plain Rust references, on every
//! backend, for every dtype, on odd shapes, with poisoned guard elements so
//! writes outside the array are caught.

mod common;

use std::sync::Arc;

use bytemuck::Pod;
use gpuport::array::{Location, MemArray, Residency, Transfer};
use gpuport::kernels::{self, Scalar, StridedArg};
use gpuport::{Device, DeviceMemory};
use half::{bf16, f16};

/// Deterministic pseudo-random numbers (SplitMix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    /// Small integers in every type (exact in f16/bf16), some negative.
    fn value<T: Scalar>(&mut self) -> T {
        T::zeroed().add_index((self.next() % 64) as i64 - 16)
    }
}

const GUARD: usize = 16; // guard elements after the array, poisoned with 0xEE bytes
const SHAPES: &[&[i64]] =
    &[&[1], &[7], &[1021], &[3, 5], &[1, 255], &[2, 3, 5, 7], &[4, 1, 33], &[1, 1, 1, 1, 1, 1, 1, 3]];

fn upload<D: Device, T: Pod>(d: &D, values: &[T]) -> gpuport::Buffer<D::B> {
    let bytes = std::mem::size_of_val(values) + GUARD * std::mem::size_of::<T>();
    let mut buf = d.alloc(bytes).unwrap();
    d.memset(&mut buf, 0, bytes, 0xEE).unwrap();
    d.copy_to_device(bytemuck::cast_slice(values), &mut buf, 0).unwrap();
    buf
}

/// Downloads `n` elements and asserts the guard is untouched.
fn download<D: Device, T: Pod>(d: &D, buf: &gpuport::Buffer<D::B>, n: usize) -> Vec<T> {
    let mut bytes = vec![0u8; buf.len()];
    d.copy_to_host(buf, 0, &mut bytes).unwrap();
    let split = n * std::mem::size_of::<T>();
    assert!(bytes[split..].iter().all(|&b| b == 0xEE), "a kernel wrote past the end of the array");
    bytemuck::pod_collect_to_vec(&bytes[..split])
}

fn add_index_ref<T: Scalar>(shape: &[i64], data: &[T]) -> Vec<T> {
    data.iter()
        .enumerate()
        .map(|(i, &x)| {
            let (mut lin, mut sum) = (i as i64, 0i64);
            for &e in shape.iter().rev() {
                sum += lin % e;
                lin /= e;
            }
            x.add_index(sum)
        })
        .collect()
}

fn add_index_on<D: Device, T: Scalar, const N: usize>(d: &D, shape: [i64; N], rng: &mut Rng) {
    let n = shape.iter().product::<i64>() as usize;
    let data: Vec<T> = (0..n).map(|_| rng.value()).collect();
    let buf = upload(d, &data);
    // SAFETY: `buf` holds n elements of T and outlives the synchronize.
    unsafe { kernels::add_index_async::<D, T, N>(d, buf.device_ptr(), shape, d.default_stream()).unwrap() };
    d.synchronize(d.default_stream()).unwrap();
    let got: Vec<T> = download(d, &buf, n);
    assert_eq!(got, add_index_ref(&shape, &data), "{} shape {shape:?}", T::NAME);
}

fn elementwise_kernels_for<D: Device, T: Scalar>(d: &D, alpha: T::Compute) {
    let mut rng = Rng(T::NAME.len() as u64 * 7919);
    for shape in SHAPES {
        match *shape {
            [a] => add_index_on::<D, T, 1>(d, [*a], &mut rng),
            [a, b] => add_index_on::<D, T, 2>(d, [*a, *b], &mut rng),
            [a, b, c] => add_index_on::<D, T, 3>(d, [*a, *b, *c], &mut rng),
            [a, b, c, e] => add_index_on::<D, T, 4>(d, [*a, *b, *c, *e], &mut rng),
            s => add_index_on::<D, T, 8>(d, s.try_into().unwrap(), &mut rng),
        }
    }
    for n in [1usize, 13, 4099] {
        let x: Vec<T> = (0..n).map(|_| rng.value()).collect();
        let y: Vec<T> = (0..n).map(|_| rng.value()).collect();
        let (bx, by) = (upload(d, &x), upload(d, &y));
        let (mut xs, mut ys) =
            (d.alloc(n * std::mem::size_of::<T>()).unwrap(), d.alloc(n * std::mem::size_of::<T>()).unwrap());
        d.copy_device(&bx, 0, &mut xs, 0, n * std::mem::size_of::<T>()).unwrap();
        d.copy_device(&by, 0, &mut ys, 0, n * std::mem::size_of::<T>()).unwrap();
        // SAFETY: every buffer outlives the synchronize below.
        unsafe {
            kernels::scale_async::<D, T, _>(d, &xs, alpha, d.default_stream()).unwrap();
            kernels::axpy_async::<D, T, _, _>(d, &ys, &xs, alpha, d.default_stream()).unwrap();
        }
        d.synchronize(d.default_stream()).unwrap();
        let scaled: Vec<T> = x.iter().map(|v| v.scale(alpha)).collect();
        let mut got = vec![0u8; xs.len()];
        d.copy_to_host(&xs, 0, &mut got).unwrap();
        assert_eq!(bytemuck::pod_collect_to_vec::<u8, T>(&got), scaled, "scale {} n={n}", T::NAME);
        let expected: Vec<T> = y.iter().zip(&scaled).map(|(yv, xv)| yv.axpy(*xv, alpha)).collect();
        d.copy_to_host(&ys, 0, &mut got).unwrap();
        assert_eq!(bytemuck::pod_collect_to_vec::<u8, T>(&got), expected, "axpy {} n={n}", T::NAME);
    }
}

fn every_arithmetic_kernel_matches_the_reference_for_every_dtype<D: Device>(d: &D) {
    elementwise_kernels_for::<D, i8>(d, -3);
    elementwise_kernels_for::<D, i16>(d, 5);
    elementwise_kernels_for::<D, i32>(d, -7);
    elementwise_kernels_for::<D, i64>(d, 1 << 40);
    elementwise_kernels_for::<D, u8>(d, 3);
    elementwise_kernels_for::<D, u16>(d, 300);
    elementwise_kernels_for::<D, u32>(d, 70000);
    elementwise_kernels_for::<D, u64>(d, u64::MAX - 2);
    elementwise_kernels_for::<D, f16>(d, 0.5);
    elementwise_kernels_for::<D, bf16>(d, -1.5);
    elementwise_kernels_for::<D, f32>(d, 1.25);
    elementwise_kernels_for::<D, f64>(d, -0.75);
}

fn fill_on<D: Device, T: Pod + PartialEq + std::fmt::Debug>(d: &D, value: T) {
    for n in [1usize, 3, 1000, 65_537] {
        let mut buf = upload(d, &vec![T::zeroed(); n]);
        let len = n * std::mem::size_of::<T>();
        let view = d.alloc(len).unwrap();
        // SAFETY: `view` outlives the synchronize below.
        unsafe { kernels::fill_async(d, &view, value, d.default_stream()).unwrap() };
        d.copy_device(&view, 0, &mut buf, 0, len).unwrap();
        assert!(download::<D, T>(d, &buf, n).iter().all(|v| *v == value), "fill n={n}");
    }
}

fn fill_writes_every_element_of_every_size<D: Device>(d: &D) {
    fill_on(d, 0xA5u8);
    fill_on(d, f16::from_f32(-2.5));
    fill_on(d, 123_456_789i32);
    fill_on(d, std::f64::consts::PI);
    fill_on(d, [1.0f32, -2.0, 3.5, 1e-3]); // a 16-byte element (float4)
    let odd = d.alloc(10).unwrap();
    // SAFETY: rejected before launch (asserted).
    let r = unsafe { kernels::fill_async(d, &odd, 0u32, d.default_stream()) };
    assert!(matches!(r, Err(gpuport::Error::InvalidArgument { .. })), "{r:?}");
}

fn strided_copies_gather_and_scatter<D: Device>(d: &D) {
    let (rows, cols) = (37i64, 53i64);
    let n = (rows * cols) as usize;
    let src: Vec<u32> = (0..n as u32).collect();
    let a = upload(d, &src);
    let b = d.alloc(n * 4).unwrap();
    // Transpose: read `a` column-major (a gather), write `b` compact.
    let read_t = StridedArg { data: a.device_ptr(), shape: [cols, rows], strides: [1, cols] };
    let write = StridedArg::row_major(b.device_ptr(), [cols, rows]);
    // SAFETY: both views lie inside their buffers, which outlive the sync; no overlap.
    unsafe { kernels::copy_strided_async(d, 4, write, read_t, d.default_stream()).unwrap() };
    d.synchronize(d.default_stream()).unwrap();
    let mut got = vec![0u8; n * 4];
    d.copy_to_host(&b, 0, &mut got).unwrap();
    let got: Vec<u32> = bytemuck::pod_collect_to_vec(&got);
    for c in 0..cols {
        for r in 0..rows {
            assert_eq!(got[(c * rows + r) as usize], src[(r * cols + c) as usize]);
        }
    }
    // Scatter every row of `b` reversed (negative stride) into every other element of `c`.
    let c_buf = upload(d, &vec![0u64; n * 2]);
    let src8: Vec<u64> = (0..n as u64).map(|x| x * 3).collect();
    let s8 = upload(d, &src8);
    let read = StridedArg { data: s8.device_ptr() + ((cols - 1) * 8) as u64, shape: [rows, cols], strides: [cols, -1] };
    let scatter = StridedArg { data: c_buf.device_ptr(), shape: [rows, cols], strides: [2 * cols, 2] };
    assert!(read.byte_extent(8).is_some());
    // SAFETY: as above.
    unsafe { kernels::copy_strided_async(d, 8, scatter, read, d.default_stream()).unwrap() };
    d.synchronize(d.default_stream()).unwrap();
    let out: Vec<u64> = download(d, &c_buf, n * 2);
    for r in 0..rows {
        for c in 0..cols {
            let i = (r * cols + c) as usize;
            assert_eq!(out[2 * i], src8[(r * cols + (cols - 1 - c)) as usize]);
            assert_eq!(out[2 * i + 1], 0, "scatter touched a gap");
        }
    }
}

/// The DLPack 1.1 low-precision floats are moved by byte width: fill and
/// strided copies take them as 1-byte elements (bit patterns, NaNs included).
fn low_precision_floats_fill_and_copy_by_byte_width<D: Device>(d: &D) {
    use gpuport::array::element::{Float4E2M1Fn, Float8E4M3Fnuz, Float8E8M0Fnu, F8E4M3, F8E5M2};
    fill_on(d, F8E4M3::from_f32(-1.5));
    fill_on(d, F8E5M2::from_f32(57344.0));
    fill_on(d, Float8E4M3Fnuz::from_bits(0x80)); // NaN of e4m3fnuz: compared as bits
    fill_on(d, Float8E8M0Fnu::from_bits(0x7f));
    fill_on(d, Float4E2M1Fn::from_bits(0x0b).unwrap());
    fill_on(d, [F8E5M2::from_f32(1.0), F8E5M2::from_f32(-2.0)]); // a 2-byte vector element

    // Transpose a 13 x 29 matrix of fp8 bit patterns (a gather of 1-byte elements).
    let (rows, cols) = (13i64, 29i64);
    let n = (rows * cols) as usize;
    let src: Vec<Float8E4M3Fnuz> = (0..n).map(|i| Float8E4M3Fnuz::from_bits((i * 7 % 256) as u8)).collect();
    let a = upload(d, &src);
    let b = upload(d, &vec![Float8E4M3Fnuz::from_bits(0); n]);
    let read_t = StridedArg { data: a.device_ptr(), shape: [cols, rows], strides: [1, cols] };
    let write = StridedArg::row_major(b.device_ptr(), [cols, rows]);
    let elem = std::mem::size_of::<Float8E4M3Fnuz>();
    assert_eq!(elem, 1);
    // SAFETY: both views lie inside their buffers, which outlive the sync; no overlap.
    unsafe { kernels::copy_strided_async(d, elem, write, read_t, d.default_stream()).unwrap() };
    d.synchronize(d.default_stream()).unwrap();
    let got: Vec<Float8E4M3Fnuz> = download(d, &b, n);
    for c in 0..cols {
        for r in 0..rows {
            assert_eq!(got[(c * rows + r) as usize], src[(r * cols + c) as usize]);
        }
    }
}

fn bad_kernel_requests_are_typed_errors<D: Device>(d: &D) {
    let buf = d.alloc(64).unwrap();
    let s = d.default_stream();
    let v = StridedArg::row_major(buf.device_ptr(), [4, 4]);
    let w = StridedArg::row_major(buf.device_ptr(), [4, 2]);
    // SAFETY: each call is rejected before launch (asserted).
    unsafe {
        assert!(kernels::copy_strided_async(d, 4, v, w, s).is_err(), "shape mismatch");
        assert!(kernels::copy_strided_async(d, 3, v, v, s).is_err(), "3-byte elements");
        assert!(kernels::add_index_async::<D, f32, 2>(d, buf.device_ptr(), [-1, 4], s).is_err(), "negative extent");
        assert!(kernels::add_index_async::<D, f32, 2>(d, buf.device_ptr(), [i64::MAX, 4], s).is_err(), "overflow");
        let x = d.alloc(32).unwrap();
        assert!(kernels::axpy_async::<D, f32, _, _>(d, &buf, &x, 1.0, s).is_err(), "length mismatch");
        kernels::add_index_async::<D, f32, 2>(d, buf.device_ptr(), [0, 4], s).unwrap();
        // empty: a no-op
    }
}

/// The test of docs/design.md#the-test-kernel: write 2 everywhere through checked access, run
/// `add_index` (which moves the data to the device), check 2 + sum of indices.
fn add_index_flow<D: Device, T: Scalar + gpuport::array::Element, const N: usize>(dev: &Arc<D>, shape: [usize; N]) {
    let mut a = MemArray::<T, N, D>::zeros(dev, shape).unwrap();
    let two = T::zeroed().add_index(2);
    let n: usize = shape.iter().product();
    for lin in 0..n {
        a.set(unravel(shape, lin), two, None).unwrap();
    }
    a.add_index(dev.default_stream(), None).unwrap();
    assert_eq!(a.residency(), Residency::Device, "add_index leaves the device copy current");
    assert!(a.get([0; N], None).is_err(), "the host copy is stale until moved back");
    a.move_to(Location::Host, dev.default_stream(), Transfer::Sync, None).unwrap();
    for lin in 0..n {
        let idx = unravel(shape, lin);
        let sum: usize = idx.iter().sum();
        assert_eq!(a.get(idx, None).unwrap(), two.add_index(sum as i64), "{} at {idx:?}", T::NAME);
    }
}

fn unravel<const N: usize>(shape: [usize; N], mut lin: usize) -> [usize; N] {
    let mut idx = [0; N];
    for a in (0..N).rev() {
        idx[a] = lin % shape[a];
        lin /= shape[a];
    }
    idx
}

fn memarray_add_index_gives_two_plus_the_index_sum<D: Device>(d: &D) {
    let dev = D::open(d.info().ordinal).unwrap();
    add_index_flow::<D, f32, 3>(&dev, [2, 4, 7]);
    add_index_flow::<D, f64, 2>(&dev, [13, 17]);
    add_index_flow::<D, i32, 1>(&dev, [1001]);
    add_index_flow::<D, i64, 4>(&dev, [2, 3, 4, 5]);
    add_index_flow::<D, f16, 3>(&dev, [3, 5, 9]);
}

fn memarray_scale_and_axpy_run_on_the_device<D: Device>(d: &D) {
    let dev = D::open(d.info().ordinal).unwrap();
    let s = dev.default_stream();
    let mut y = MemArray::<f32, 2, D>::from_vec(&dev, [3, 4], (0..12).map(|v| v as f32).collect()).unwrap();
    let mut x = MemArray::<f32, 2, D>::from_vec(&dev, [3, 4], vec![1.0; 12]).unwrap();
    y.scale(2.0, s, None).unwrap();
    y.axpy(0.5, &mut x, s, None).unwrap();
    y.move_to(Location::Host, s, Transfer::Sync, None).unwrap();
    let expected: Vec<f32> = (0..12).map(|v| 2.0 * v as f32 + 0.5).collect();
    assert_eq!(y.to_vec(None).unwrap(), expected);
    let mut wrong = MemArray::<f32, 2, D>::zeros(&dev, [4, 3]).unwrap();
    assert!(y.axpy(1.0, &mut wrong, s, None).is_err(), "shape mismatch");
}

mod per_backend {
    use super::*;
    backend_tests!(
        every_arithmetic_kernel_matches_the_reference_for_every_dtype,
        fill_writes_every_element_of_every_size,
        strided_copies_gather_and_scatter,
        low_precision_floats_fill_and_copy_by_byte_width,
        bad_kernel_requests_are_typed_errors,
        memarray_add_index_gives_two_plus_the_index_sum,
        memarray_scale_and_axpy_run_on_the_device,
    );
}

/// The nvcc path of build.rs, checked on the GPU machine: `ci/gpu-run.d/nvcc-fatbin.sh`
/// builds the fatbin with the same script build.rs runs and points this test at it.
#[test]
fn a_fatbin_built_by_nvcc_loads_and_runs() {
    use std::io::Write;
    let Some(path) = std::env::var_os("GPUPORT_TEST_FATBIN") else {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: GPUPORT_TEST_FATBIN is not set (ci/gpu-run.d/nvcc-fatbin.sh sets it)"
        );
        return;
    };
    let Some(dev) = common::open_or_skip("cuda:0") else { return };
    let image = std::fs::read(path).unwrap();
    gpuport::on_backend!(&dev, d => {
        let module = d.load_module(gpuport::ModuleSource::Binary(&image)).unwrap();
        let kernel = d.kernel(&module, "gpuport_add_index_f32_2").unwrap();
        let mut buf = d.alloc(6 * 4).unwrap();
        d.copy_to_device(bytemuck::cast_slice(&[2.0f32; 6]), &mut buf, 0).unwrap();
        let mut args = gpuport::KernelArgs::new();
        args.push(&kernels::IndexerArg { data: buf.device_ptr(), shape: [2, 3] });
        // SAFETY: the argument matches the kernel; `buf` holds 6 f32 and outlives the copy back.
        unsafe { d.launch(&kernel, gpuport::LaunchConfig::linear(1, 32), &args, d.default_stream()).unwrap() };
        let mut out = [0u8; 24];
        d.copy_to_host(&buf, 0, &mut out).unwrap();
        assert_eq!(bytemuck::cast_slice::<u8, f32>(&out), &[2.0, 3.0, 4.0, 3.0, 4.0, 5.0]);
    });
}
