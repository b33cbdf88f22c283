//! The built-in array kernels and how to launch them on any backend.
//!
//! Sources: `kernels/common/array_ops.h` (the kernels, written once),
//! instantiated by `kernels/cuda/array_ops.cu` and `kernels/hip/array_ops.hip`;
//! the host backend runs the Rust versions in `src/kernels/host.rs`. All of
//! them live in the device's [`ModuleSource::Builtin`](crate::ModuleSource::Builtin) module.
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
//!
//! Integer conversions are checked, lossless or allowed with a reason on the
//! smallest item, as in the backends; these lints keep them so.
#![warn(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless,
    clippy::cast_precision_loss,
    clippy::ptr_as_ptr
)]

pub mod cache;
pub(crate) mod host;

use std::fmt::Debug;

use bytemuck::Pod;
use half::{bf16, f16};

use crate::backend::{builtin, Device, DeviceMemory, Kernel, KernelArg, KernelArgs, LaunchConfig, Stream};
use crate::error::{Error, Result};

/// Most dimensions the built-in kernels are instantiated for.
pub const MAX_RANK: usize = 8;

/// Elements the arithmetic kernels (add_index, scale, axpy) are built for.
pub trait Scalar: Pod + PartialEq + Debug + Send + Sync + 'static {
    /// The name used in kernel names (`f32`, `bf16`, ...).
    const NAME: &'static str;
    /// The type arithmetic runs in and `alpha` is passed as: `f32` for the
    /// half types, the type itself otherwise.
    type Compute: KernelArg + Copy + Debug + Sync;
    /// `self + sum`, as `add_index` computes it.
    fn add_index(self, sum: i64) -> Self;
    /// `self * alpha`.
    fn scale(self, alpha: Self::Compute) -> Self;
    /// `alpha * x + self` (fused multiply-add for floating point, as GPUs compile it).
    fn axpy(self, x: Self, alpha: Self::Compute) -> Self;
}

macro_rules! scalar_int {
    ($($t:ty => $name:literal),*) => { $(
        impl Scalar for $t {
            const NAME: &'static str = $name;
            type Compute = $t;
            // Modular, as the C kernels' `(T)sum` is: the wrap is the point.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)]
            fn add_index(self, sum: i64) -> Self { self.wrapping_add(sum as $t) }
            fn scale(self, alpha: $t) -> Self { self.wrapping_mul(alpha) }
            fn axpy(self, x: Self, alpha: $t) -> Self { alpha.wrapping_mul(x).wrapping_add(self) }
        }
    )* };
}
scalar_int!(i8 => "i8", i16 => "i16", i32 => "i32", i64 => "i64", u8 => "u8", u16 => "u16", u32 => "u32", u64 => "u64");

macro_rules! scalar_float {
    ($($t:ty => $name:literal),*) => { $(
        impl Scalar for $t {
            const NAME: &'static str = $name;
            type Compute = $t;
            // Rounded, as the C kernels' `(T)sum` is.
            #[allow(clippy::cast_precision_loss)]
            fn add_index(self, sum: i64) -> Self { self + sum as $t }
            fn scale(self, alpha: $t) -> Self { self * alpha }
            fn axpy(self, x: Self, alpha: $t) -> Self { alpha.mul_add(x, self) }
        }
    )* };
}
scalar_float!(f32 => "f32", f64 => "f64");

macro_rules! scalar_half {
    ($($t:ty => $name:literal),*) => { $(
        impl Scalar for $t {
            const NAME: &'static str = $name;
            type Compute = f32;
            // Rounded, as the C kernels' `(float)sum` is.
            #[allow(clippy::cast_precision_loss)]
            fn add_index(self, sum: i64) -> Self { <$t>::from_f32(self.to_f32() + sum as f32) }
            fn scale(self, alpha: f32) -> Self { <$t>::from_f32(self.to_f32() * alpha) }
            fn axpy(self, x: Self, alpha: f32) -> Self { <$t>::from_f32(alpha.mul_add(x.to_f32(), self.to_f32())) }
        }
    )* };
}
scalar_half!(f16 => "f16", bf16 => "bf16");

/// The kernel argument `add_index` takes: the layout of
/// `ArrayIndexer<T, N>` (`T* data; int64_t shape[N];`) without the type.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexerArg<const N: usize> {
    /// Base address on the device.
    pub data: u64,
    /// Extents, row-major.
    pub shape: [i64; N],
}
// SAFETY: `#[repr(C)]` u64 + i64 array: no padding, every bit pattern valid,
// the same layout as the C `ArrayIndexer<T, N>`.
unsafe impl<const N: usize> KernelArg for IndexerArg<N> {}

/// A strided view as the copy kernel takes it: base address, extents and
/// strides in elements (the C `gpuport::Strided<N>`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StridedArg<const N: usize> {
    /// Base address on the device.
    pub data: u64,
    /// Extents.
    pub shape: [i64; N],
    /// Strides in elements (may be negative or zero).
    pub strides: [i64; N],
}
// SAFETY: `#[repr(C)]` of u64 and i64 arrays: no padding, any bit pattern valid.
unsafe impl<const N: usize> KernelArg for StridedArg<N> {}

impl<const N: usize> StridedArg<N> {
    /// A compact row-major view of `shape` at `data`.
    pub fn row_major(data: u64, shape: [i64; N]) -> Self {
        let mut strides = [0i64; N];
        let mut s = 1i64;
        for a in (0..N).rev() {
            strides[a] = s;
            s = s.saturating_mul(shape[a].max(1));
        }
        StridedArg { data, shape, strides }
    }

    /// Number of elements.
    pub fn size(&self) -> i64 {
        self.shape.iter().product()
    }

    /// The lowest and one-past-highest byte offsets the view touches, for
    /// elements of `elem` bytes; `None` for an empty view or on overflow.
    pub fn byte_extent(&self, elem: usize) -> Option<(i64, i64)> {
        let (mut lo, mut hi) = (0i64, 0i64);
        for a in 0..N {
            if self.shape[a] <= 0 {
                return None;
            }
            let reach = (self.shape[a] - 1).checked_mul(self.strides[a])?;
            if reach < 0 {
                lo = lo.checked_add(reach)?;
            } else {
                hi = hi.checked_add(reach)?;
            }
        }
        let e = i64::try_from(elem).ok()?;
        Some((lo.checked_mul(e)?, hi.checked_add(1)?.checked_mul(e)?))
    }
}

/// The kernel name of an operation for a dtype and rank.
pub fn kernel_name(op: &str, dtype: &str, rank: Option<usize>) -> String {
    match rank {
        Some(n) => format!("gpuport_{op}_{dtype}_{n}"),
        None => format!("gpuport_{op}_{dtype}"),
    }
}

fn find_kernel<D: Device>(d: &D, name: &str) -> Result<Kernel<D::B>> {
    d.builtin_kernel(name)
}

/// A built-in kernel for a GPU backend: from the runtime module (`runtime`
/// looks it up there) when `name` is one of the runtime's kernels
/// ([`builtin::ALL`](crate::backend::builtin::ALL)) or the module holds every
/// kernel (`runtime_has_all`: an ahead-of-time image loaded), else from
/// `cache`, else compiled alone from `dialect_source` by `build` (given the
/// one-kernel program) and cached. Shared by the CUDA and HIP backends.
///
/// The runtime module is asked only for kernels it can hold: a lookup that
/// fails is a driver error (`CUDA_ERROR_NOT_FOUND`), which compute-sanitizer
/// reports on every array kernel's first use.
#[cfg_attr(not(any(feature = "cuda", feature = "rocm")), allow(dead_code))]
pub(crate) fn builtin_kernel_from<K: Clone>(
    runtime: impl FnOnce() -> Result<K>,
    runtime_has_all: bool,
    cache: &std::sync::Mutex<std::collections::HashMap<String, K>>,
    dialect_source: &str,
    name: &str,
    build: impl FnOnce(&str) -> Result<K>,
) -> Result<K> {
    if runtime_has_all || crate::backend::builtin::ALL.contains(&name) {
        match runtime() {
            Err(Error::KernelNotFound { .. }) => {}
            found => return found,
        }
    }
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(kernel) = cache.get(name) {
        return Ok(kernel.clone());
    }
    let program = single_kernel_program(dialect_source, name)
        .ok_or_else(|| Error::KernelNotFound { name: name.to_string(), available: all_kernel_names().join(", ") })?;
    let kernel = build(&program)?;
    cache.insert(name.to_string(), kernel.clone());
    Ok(kernel)
}

/// The C type of each dtype name, as the kernel sources spell it.
const C_TYPES: [(&str, &str); 12] = [
    ("i8", "signed char"),
    ("i16", "short"),
    ("i32", "int"),
    ("i64", "long long"),
    ("u8", "unsigned char"),
    ("u16", "unsigned short"),
    ("u32", "unsigned int"),
    ("u64", "unsigned long long"),
    ("f16", "gpuport::f16"),
    ("bf16", "gpuport::bf16"),
    ("f32", "float"),
    ("f64", "double"),
];

/// The source of a program that defines only the built-in array kernel
/// `name`, from a dialect file (`kernels/cuda/array_ops.cu` or
/// `kernels/hip/array_ops.hip`); `None` if `name` is not one.
///
/// Runtime compilers take minutes over every instantiation at once and well
/// under a second for one, so GPU backends compile built-in array kernels
/// one at a time, on first use, and cache each.
#[doc(hidden)]
pub fn single_kernel_program(dialect_source: &str, name: &str) -> Option<String> {
    let rest = name.strip_prefix("gpuport_")?;
    let ctype = |t: &str| C_TYPES.iter().find(|(n, _)| *n == t).map(|(_, c)| *c);
    let rank = |n: &str| n.parse::<usize>().ok().filter(|n| (1..=MAX_RANK).contains(n));
    let bytes = |b: &str| b.parse::<usize>().ok().filter(|b| [1, 2, 4, 8, 16].contains(b));
    let instantiation = if let Some(r) = rest.strip_prefix("add_index_") {
        let (t, n) = r.rsplit_once('_')?;
        format!("GPUPORT_ADD_INDEX({}, {t}, {})", ctype(t)?, rank(n)?)
    } else if let Some(t) = rest.strip_prefix("scale_") {
        format!("GPUPORT_SCALE({}, {t})", ctype(t)?)
    } else if let Some(t) = rest.strip_prefix("axpy_") {
        format!("GPUPORT_AXPY({}, {t})", ctype(t)?)
    } else if let Some(b) = rest.strip_prefix("fill_") {
        format!("GPUPORT_FILL({})", bytes(b)?)
    } else if let Some(r) = rest.strip_prefix("copy_strided_") {
        let (b, n) = r.split_once('_')?;
        format!("GPUPORT_COPY({}, {})", bytes(b)?, rank(n)?)
    } else {
        return None;
    };
    Some(format!("#define GPUPORT_SELECTED_KERNELS\n{dialect_source}\n{instantiation}\n"))
}

/// Elements of `T` in `mem`, if its size is a whole number of them.
fn element_count<T, M: DeviceMemory + ?Sized>(mem: &M, what: &'static str) -> Result<usize> {
    let size = std::mem::size_of::<T>();
    if size == 0 || mem.len() % size != 0 {
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
    // scheduling balances the tail better; docs/gpu-runs/*variants.log).
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

/// Names of every built-in array kernel, as the host and GPU modules define them.
pub fn all_kernel_names() -> Vec<String> {
    let dtypes = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64"];
    let mut names = Vec::new();
    for t in dtypes {
        names.extend((1..=MAX_RANK).map(|n| kernel_name("add_index", t, Some(n))));
        names.push(kernel_name("scale", t, None));
        names.push(kernel_name("axpy", t, None));
    }
    for b in ["1", "2", "4", "8", "16"] {
        names.push(kernel_name("fill", b, None));
        names.extend((1..=MAX_RANK).map(|n| kernel_name("copy_strided", b, Some(n))));
    }
    names.extend(builtin::ALL.iter().map(|s| s.to_string()));
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_backend_defines_exactly_the_kernels_the_launchers_name() {
        let mut host: Vec<String> = host::array_kernels().into_iter().map(|(n, _)| n.to_string()).collect();
        host.extend(builtin::ALL.iter().map(|s| s.to_string()));
        let (mut host, mut named) = (host, all_kernel_names());
        host.sort();
        named.sort();
        assert_eq!(host, named);
    }

    #[test]
    fn every_array_kernel_name_maps_to_one_instantiation() {
        for name in all_kernel_names().iter().filter(|n| !builtin::ALL.contains(&n.as_str())) {
            let program = single_kernel_program("", name).unwrap_or_else(|| panic!("{name} has no program"));
            assert!(program.starts_with("#define GPUPORT_SELECTED_KERNELS"), "{program}");
        }
        assert_eq!(
            single_kernel_program("", "gpuport_add_index_f32_3").unwrap().lines().last(),
            Some("GPUPORT_ADD_INDEX(float, f32, 3)")
        );
        for bad in ["gpuport_add_index_f32_9", "gpuport_add_index_c64_1", "gpuport_fill_3", "gpuport_empty", "other"] {
            assert!(single_kernel_program("", bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn strided_extents_cover_negative_strides_and_refuse_empty_views() {
        let v = StridedArg { data: 0, shape: [3, 4], strides: [4, -1] };
        assert_eq!(v.byte_extent(8), Some((-24, 72)));
        assert_eq!(StridedArg::row_major(0, [2, 0]).byte_extent(4), None);
        assert_eq!(StridedArg::row_major(0, [2, 3]).strides, [3, 1]);
        // An element size past i64 is no extent, not a wrapped (negative) one.
        assert_eq!(StridedArg::row_major(0, [1]).byte_extent(usize::MAX), None);
    }
}
