//! The built-in array kernels and how to launch them on any backend.
//!
//! Sources: `kernels/common/array_ops.h` (the kernels, written once),
//! instantiated by `kernels/cuda/array_ops.cu` and `kernels/hip/array_ops.hip`;
//! the host backend runs the Rust versions in `src/backend/host/kernels.rs`. All of
//! them live in the device's [`ModuleSource::Builtin`](crate::ModuleSource::Builtin) module.
//! What the backends themselves know of them (names, element types, argument
//! layouts, the compile cache) is defined in the backend layer and
//! re-exported here.
//!
//! | kernel | what it does |
//! | --- | --- |
//! | [`add_index_async`] | adds the sum of each element's indices to it (docs/design.md#the-test-kernel) |
//! | [`fill_async`] | writes one value to every element |
//! | [`scale_async`] | `x *= alpha` |
//! | [`axpy_async`] | `y += alpha * x` |
//! | [`copy_strided_async`] | copies between two strided views of one shape (gather / scatter) |
//!
//! Integer arithmetic wraps on overflow, on every backend. Half-precision
//! types compute in `f32` and round to nearest even.

use bytemuck::Pod;

use crate::backend::{Device, DeviceMemory, Kernel, KernelArgs, LaunchConfig, Stream};
use crate::error::{Error, Result};

pub use crate::backend::array_kernels::{
    all_kernel_names, kernel_name, single_kernel_program, IndexerArg, Scalar, StridedArg, MAX_RANK,
};

/// The on-disk cache of compiled kernel images that the GPU backends compile
/// through; see `src/backend/kernel_cache.rs`.
pub mod cache {
    pub use crate::backend::kernel_cache::{cache_dir, get_or_build, key, Origin, CACHE_DIR_ENV};
}

fn find_kernel<D: Device>(d: &D, name: &str) -> Result<Kernel<D::B>> {
    d.builtin_kernel(name)
}

/// Elements of `T` in `mem`, if its size is a whole number of them.
fn element_count<T, M: DeviceMemory + ?Sized>(mem: &M, what: &'static str) -> Result<usize> {
    let size = std::mem::size_of::<T>();
    if size == 0 || !mem.len().is_multiple_of(size) {
        return Err(Error::InvalidArgument {
            name: what,
            reason: format!("{} bytes is not a whole number of {}-byte elements", mem.len(), size),
        });
    }
    Ok(mem.len() / size)
}

fn check_rank(n: usize) -> Result<()> {
    if (1..=MAX_RANK).contains(&n) {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            name: "rank",
            reason: format!("the built-in kernels take 1 to {MAX_RANK} dimensions, not {n}"),
        })
    }
}

/// A checked, non-negative element count as a `usize`, or the error for a
/// shape of more elements than this machine addresses.
fn elements(size: i64) -> Result<usize> {
    usize::try_from(size).map_err(|_| Error::InvalidArgument {
        name: "shape",
        reason: format!("{size} elements are more than this machine addresses"),
    })
}

/// A grid-stride launch over `work` items: never more blocks than fit on the device at once.
fn launch_config<D: Device>(d: &D, kernel: &Kernel<D::B>, work: usize) -> Result<LaunchConfig> {
    d.resident_launch_config(kernel, work.max(1))
}

/// Adds to every element the sum of its indices (row-major), in place.
///
/// # Safety
/// `data` must address `shape.product()` live elements of `T` on `d`, kept
/// alive and not accessed by the host until `stream` passes this launch.
pub unsafe fn add_index_async<D: Device, T: Scalar, const N: usize>(
    d: &D,
    data: u64,
    shape: [i64; N],
    stream: &Stream<D::B>,
) -> Result<()> {
    if N == 0 {
        // A 0-d array is one element whose index sum is 0: nothing changes.
        return Ok(());
    }
    check_rank(N)?;
    if let Some(&e) = shape.iter().find(|&&e| e < 0) {
        return Err(Error::InvalidArgument { name: "shape", reason: format!("negative extent {e}") });
    }
    let size = shape.iter().try_fold(1i64, |acc, &e| acc.checked_mul(e)).ok_or_else(|| Error::InvalidArgument {
        name: "shape",
        reason: format!("{shape:?} has more elements than fit in i64"),
    })?;
    if size == 0 {
        return Ok(());
    }
    let kernel = find_kernel(d, &kernel_name("add_index", T::NAME, Some(N)))?;
    // One step of UNROLL (4) 16-byte vectors per thread over a full grid of
    // 256-thread blocks: measured on the H100 at 99% of a device-to-device
    // copy, against 93-95% for a resident-sized grid-stride launch (block
    // scheduling balances the tail better; the sweep, 2026-11-22, is in the
    // git history of BENCHMARKS.md: `git log -p BENCHMARKS.md`).
    let lanes = (16 / std::mem::size_of::<T>()).max(1);
    let cfg = LaunchConfig::for_elements(elements(size)?.div_ceil(lanes * 4), 256)?;
    let mut args = KernelArgs::new();
    args.push(&IndexerArg { data, shape });
    // SAFETY: the argument matches the kernel's `ArrayIndexer<T, N>`; the
    // caller guarantees the memory (see `# Safety`).
    unsafe { d.launch(&kernel, cfg, &args, stream) }
}

/// Writes `value` to every element of `mem`.
///
/// # Safety
/// `mem` must stay alive and untouched by the host until `stream` passes this launch.
pub unsafe fn fill_async<D: Device, T: Pod, M: DeviceMemory<B = D::B> + ?Sized>(
    d: &D,
    mem: &M,
    value: T,
    stream: &Stream<D::B>,
) -> Result<()> {
    let n = element_count::<T, M>(mem, "mem")?;
    let bytes = std::mem::size_of::<T>();
    if ![1, 2, 4, 8, 16].contains(&bytes) {
        return Err(Error::InvalidArgument {
            name: "value",
            reason: format!("fill takes elements of 1, 2, 4, 8 or 16 bytes, not {bytes}"),
        });
    }
    let kernel = find_kernel(d, &kernel_name("fill", &bytes.to_string(), None))?;
    let cfg = launch_config(d, &kernel, n)?;
    let mut args = KernelArgs::new();
    args.push_buffer(mem).push(&(n as u64)).push_bytes(bytemuck::bytes_of(&value));
    // SAFETY: (ptr, n, value bytes) matches `gpuport_fill_<bytes>`; `mem`
    // holds n elements; the caller keeps it alive.
    unsafe { d.launch(&kernel, cfg, &args, stream) }
}

/// `x *= alpha` for every element of `x`.
///
/// # Safety
/// `x` must stay alive and untouched by the host until `stream` passes this launch.
pub unsafe fn scale_async<D: Device, T: Scalar, M: DeviceMemory<B = D::B> + ?Sized>(
    d: &D,
    x: &M,
    alpha: T::Compute,
    stream: &Stream<D::B>,
) -> Result<()> {
    let n = element_count::<T, M>(x, "x")?;
    let kernel = find_kernel(d, &kernel_name("scale", T::NAME, None))?;
    let cfg = launch_config(d, &kernel, n)?;
    let mut args = KernelArgs::new();
    args.push_buffer(x).push(&(n as u64)).push(&alpha);
    // SAFETY: (ptr, n, alpha) matches `gpuport_scale_<T>`; the caller keeps `x` alive.
    unsafe { d.launch(&kernel, cfg, &args, stream) }
}

/// `y += alpha * x`, element by element; `x` and `y` hold the same number of `T`.
///
/// # Safety
/// `x` and `y` must stay alive, and `y` untouched by the host, until
/// `stream` passes this launch.
pub unsafe fn axpy_async<D, T, X, Y>(d: &D, y: &Y, x: &X, alpha: T::Compute, stream: &Stream<D::B>) -> Result<()>
where
    D: Device,
    T: Scalar,
    X: DeviceMemory<B = D::B> + ?Sized,
    Y: DeviceMemory<B = D::B> + ?Sized,
{
    let n = element_count::<T, Y>(y, "y")?;
    if x.len() != y.len() {
        return Err(Error::InvalidArgument {
            name: "x",
            reason: format!("x has {} bytes, y has {}: they must hold the same number of elements", x.len(), y.len()),
        });
    }
    let kernel = find_kernel(d, &kernel_name("axpy", T::NAME, None))?;
    let cfg = launch_config(d, &kernel, n)?;
    let mut args = KernelArgs::new();
    args.push_buffer(y).push_buffer(x).push(&(n as u64)).push(&alpha);
    // SAFETY: (y, x, n, alpha) matches `gpuport_axpy_<T>`; the caller keeps both alive.
    unsafe { d.launch(&kernel, cfg, &args, stream) }
}

/// Copies every element of `src` to the same index of `dst` (views of one
/// shape, elements of `elem_bytes`): a gather when `dst` is compact, a
/// scatter when `src` is.
///
/// # Safety
/// Both views must address live device memory of `d` for every index of the
/// shape, kept alive until `stream` passes this launch, and `dst` must not
/// overlap `src` or map two indices to one element.
pub unsafe fn copy_strided_async<D: Device, const N: usize>(
    d: &D,
    elem_bytes: usize,
    dst: StridedArg<N>,
    src: StridedArg<N>,
    stream: &Stream<D::B>,
) -> Result<()> {
    check_rank(N)?;
    if dst.shape != src.shape {
        return Err(Error::InvalidArgument {
            name: "src",
            reason: format!("shape {:?} differs from the destination's {:?}", src.shape, dst.shape),
        });
    }
    if ![1, 2, 4, 8, 16].contains(&elem_bytes) {
        return Err(Error::InvalidArgument {
            name: "elem_bytes",
            reason: format!("strided copies take elements of 1, 2, 4, 8 or 16 bytes, not {elem_bytes}"),
        });
    }
    if dst.shape.iter().any(|&e| e < 0) || dst.shape.iter().try_fold(1i64, |a, &e| a.checked_mul(e)).is_none() {
        return Err(Error::InvalidArgument { name: "shape", reason: format!("invalid shape {:?}", dst.shape) });
    }
    let size = dst.size();
    if size == 0 {
        return Ok(());
    }
    let kernel = find_kernel(d, &kernel_name("copy_strided", &elem_bytes.to_string(), Some(N)))?;
    let cfg = launch_config(d, &kernel, elements(size)?)?;
    let mut args = KernelArgs::new();
    args.push(&dst).push(&src);
    // SAFETY: the arguments match `gpuport_copy_strided_<bytes>_<N>`; the
    // caller guarantees both views (see `# Safety`).
    unsafe { d.launch(&kernel, cfg, &args, stream) }
}
