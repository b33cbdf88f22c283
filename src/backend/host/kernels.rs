//! The host backend's versions of the built-in array kernels, in Rust.
//!
//! Each takes the same arguments as its CUDA/HIP twin (decoded from
//! [`KernelArgs`]) and produces the same result; the work is split over
//! the machine's cores with scoped threads.

use std::ops::Range;

use super::HostKernelDef;
use crate::backend::array_kernels::{IndexerArg, Scalar, StridedArg, MAX_RANK};
use crate::backend::{address_to_usize, KernelArg, KernelArgs, LaunchConfig};

type KResult = std::result::Result<(), String>;

/// Below this many elements per thread, splitting costs more than it saves.
const MIN_CHUNK: usize = 1 << 16;

fn arg<T: KernelArg>(args: &KernelArgs, index: usize) -> std::result::Result<T, String> {
    args.get::<T>(index).ok_or_else(|| format!("argument {index} must be a {}", std::any::type_name::<T>()))
}

/// Argument `index`, a host address (a host buffer's `device_ptr`).
fn address(args: &KernelArgs, index: usize) -> std::result::Result<usize, String> {
    arg::<u64>(args, index).map(address_to_usize)
}

/// Argument `index`, an element count, as a `usize`.
fn count(args: &KernelArgs, index: usize) -> std::result::Result<usize, String> {
    let n = arg::<u64>(args, index)?;
    usize::try_from(n).map_err(|_| format!("argument {index} is {n} elements, more than this host addresses"))
}

/// Linear index `i` as an `i64`: `i` is below a size that
/// `size_of_shape` computed as an `i64`.
#[allow(clippy::cast_possible_wrap)] // i < size <= i64::MAX
fn linear(i: usize) -> i64 {
    i as i64
}

/// Element `at` of `base`, `at` being an element offset of a view whose
/// elements all lie in one allocation, so it fits an `isize`.
#[allow(clippy::cast_possible_truncation)] // a view's offsets stay inside one allocation (< isize::MAX bytes)
#[inline]
fn element<const BYTES: usize>(base: usize, at: i64) -> *mut [u8; BYTES] {
    (base as *mut [u8; BYTES]).wrapping_offset(at as isize)
}

/// Runs `f` over `0..n` split into one contiguous range per core.
fn parallel_for(n: usize, f: impl Fn(Range<usize>) + Sync) {
    let cores = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1);
    let threads = cores.min(n / MIN_CHUNK).max(1);
    if threads == 1 {
        return f(0..n);
    }
    let chunk = n.div_ceil(threads);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (f, range) = (&f, t * chunk..((t + 1) * chunk).min(n));
            scope.spawn(move || f(range));
        }
    });
}

/// Index tuple of row-major linear index `lin`.
fn unravel<const N: usize>(shape: &[i64; N], mut lin: i64) -> [i64; N] {
    let mut idx = [0i64; N];
    for a in (0..N).rev() {
        idx[a] = lin % shape[a];
        lin /= shape[a];
    }
    idx
}

/// Advances `idx` to the next row-major index of `shape` (an odometer).
fn advance<const N: usize>(shape: &[i64; N], idx: &mut [i64; N]) {
    for a in (0..N).rev() {
        idx[a] += 1;
        if idx[a] < shape[a] {
            return;
        }
        idx[a] = 0;
    }
}

fn size_of_shape<const N: usize>(shape: &[i64; N]) -> std::result::Result<usize, String> {
    shape
        .iter()
        .try_fold(1i64, |acc, &e| if e < 0 { None } else { acc.checked_mul(e) })
        .and_then(|s| usize::try_from(s).ok())
        .ok_or_else(|| format!("invalid shape {shape:?}"))
}

fn add_index<T: Scalar, const N: usize>(args: &KernelArgs, _: LaunchConfig) -> KResult {
    let ix: IndexerArg<N> = arg(args, 0)?;
    let size = size_of_shape(&ix.shape)?;
    let base = address_to_usize(ix.data);
    parallel_for(size, |range| {
        let mut idx = unravel(&ix.shape, linear(range.start));
        for i in range {
            let sum: i64 = idx.iter().sum();
            let p = (base as *mut T).wrapping_add(i);
            // SAFETY: the launch contract: `data` addresses `size` live elements
            // of T; each index is written by exactly one thread.
            unsafe { p.write_unaligned(p.read_unaligned().add_index(sum)) };
            advance(&ix.shape, &mut idx);
        }
    });
    Ok(())
}

fn scale<T: Scalar>(args: &KernelArgs, _: LaunchConfig) -> KResult {
    let (base, n, alpha) = (address(args, 0)?, count(args, 1)?, arg::<T::Compute>(args, 2)?);
    parallel_for(n, |range| {
        for i in range {
            let p = (base as *mut T).wrapping_add(i);
            // SAFETY: the launch contract: `x` holds `n` live elements; disjoint ranges per thread.
            unsafe { p.write_unaligned(p.read_unaligned().scale(alpha)) };
        }
    });
    Ok(())
}

fn axpy<T: Scalar>(args: &KernelArgs, _: LaunchConfig) -> KResult {
    let (y, x) = (address(args, 0)?, address(args, 1)?);
    let (n, alpha) = (count(args, 2)?, arg::<T::Compute>(args, 3)?);
    parallel_for(n, |range| {
        for i in range {
            let (py, px) = ((y as *mut T).wrapping_add(i), (x as *const T).wrapping_add(i));
            // SAFETY: the launch contract: both hold `n` live elements; disjoint ranges per thread.
            unsafe { py.write_unaligned(py.read_unaligned().axpy(px.read_unaligned(), alpha)) };
        }
    });
    Ok(())
}

fn fill<const BYTES: usize>(args: &KernelArgs, _: LaunchConfig) -> KResult {
    let (base, n) = (address(args, 0)?, count(args, 1)?);
    let value: [u8; BYTES] =
        args.bytes(2).and_then(|b| b.try_into().ok()).ok_or_else(|| format!("argument 2 must be {BYTES} bytes"))?;
    parallel_for(n, |range| {
        for i in range {
            // SAFETY: the launch contract: `x` holds `n` live elements of BYTES bytes.
            unsafe { ((base as *mut [u8; BYTES]).wrapping_add(i)).write_unaligned(value) };
        }
    });
    Ok(())
}

fn copy_strided<const BYTES: usize, const N: usize>(args: &KernelArgs, _: LaunchConfig) -> KResult {
    let (dst, src): (StridedArg<N>, StridedArg<N>) = (arg(args, 0)?, arg(args, 1)?);
    let size = size_of_shape(&dst.shape)?;
    let (dst_base, src_base) = (address_to_usize(dst.data), address_to_usize(src.data));
    parallel_for(size, |range| {
        let mut idx = unravel(&dst.shape, linear(range.start));
        for _ in range {
            let offset = |strides: &[i64; N]| idx.iter().zip(strides).map(|(i, s)| i * s).sum::<i64>();
            let (d, s) = (offset(&dst.strides), offset(&src.strides));
            let (to, from) = (element::<BYTES>(dst_base, d), element::<BYTES>(src_base, s).cast_const());
            // SAFETY: the launch contract: both views address live memory for
            // every index, and `dst` maps distinct indices to distinct elements.
            unsafe { to.write_unaligned(from.read_unaligned()) };
            advance(&dst.shape, &mut idx);
        }
    });
    Ok(())
}

/// One kernel-table entry.
macro_rules! entry {
    ($name:expr, $func:expr, [$($param:expr),*]) => {{
        const PARAMS: &[usize] = &[$($param),*];
        ($name, HostKernelDef { name: $name, func: $func, params: PARAMS })
    }};
}

macro_rules! per_rank {
    ($table:ident, $prefix:expr, $func:ident::<$g:tt>, |$n:ident| [$($param:expr),*]) => {
        per_rank!(@ $table, $prefix, $func, $g, [$($param),*], $n, 1 2 3 4 5 6 7 8);
    };
    (@ $table:ident, $prefix:expr, $func:ident, $g:tt, $params:tt, $n:ident, $($rank:literal)*) => { $(
        $table.push({
            const $n: usize = $rank;
            entry!(concat!($prefix, "_", $rank), $func::<$g, $rank>, $params)
        });
    )* };
}

macro_rules! elementwise {
    ($table:ident, $($t:ty => $name:literal),*) => { $(
        per_rank!($table, concat!("gpuport_add_index_", $name), add_index::<$t>, |N| [8 + 8 * N]);
        $table.push(entry!(concat!("gpuport_scale_", $name), scale::<$t>,
            [8, 8, std::mem::size_of::<<$t as Scalar>::Compute>()]));
        $table.push(entry!(concat!("gpuport_axpy_", $name), axpy::<$t>,
            [8, 8, 8, std::mem::size_of::<<$t as Scalar>::Compute>()]));
    )* };
}

macro_rules! bytewise {
    ($table:ident, $($bytes:literal),*) => { $(
        $table.push(entry!(concat!("gpuport_fill_", $bytes), fill::<$bytes>, [8, 8, $bytes]));
        per_rank!($table, concat!("gpuport_copy_strided_", $bytes), copy_strided::<$bytes>, |N| [8 + 16 * N, 8 + 16 * N]);
    )* };
}

/// Every built-in array kernel of the host backend.
pub(crate) fn array_kernels() -> Vec<(&'static str, HostKernelDef)> {
    use half::{bf16, f16};
    let mut table = Vec::with_capacity(12 * (MAX_RANK + 2) + 5 * (MAX_RANK + 1));
    elementwise!(table, i8 => "i8", i16 => "i16", i32 => "i32", i64 => "i64", u8 => "u8", u16 => "u16",
        u32 => "u32", u64 => "u64", f16 => "f16", bf16 => "bf16", f32 => "f32", f64 => "f64");
    bytewise!(table, 1, 2, 4, 8, 16);
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::array_kernels::all_kernel_names;
    use crate::backend::builtin;

    #[test]
    fn the_host_backend_defines_exactly_the_kernels_the_launchers_name() {
        let mut host: Vec<String> = array_kernels().into_iter().map(|(n, _)| n.to_string()).collect();
        host.extend(builtin::ALL.iter().map(|s| s.to_string()));
        let (mut host, mut named) = (host, all_kernel_names());
        host.sort();
        named.sort();
        assert_eq!(host, named);
    }
}
