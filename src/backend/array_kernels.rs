//! The built-in array kernels as every backend knows them: their names, the
//! element types and rank they are instantiated for ([`Scalar`],
//! [`MAX_RANK`]), the layouts of their arguments ([`IndexerArg`],
//! [`StridedArg`]), and the one-kernel programs GPU backends compile.
//!
//! The host backend runs them in Rust (`host/kernels.rs`); CUDA and HIP
//! compile them from `kernels/common/array_ops.h` one at a time. Their public
//! path is `gpuport::kernels`, whose launchers call them on any backend.

use std::fmt::Debug;

use bytemuck::Pod;
use half::{bf16, f16};

use crate::backend::{builtin, KernelArg};

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

/// Names of every built-in array kernel, as the host and GPU modules define them.
pub fn all_kernel_names() -> Vec<String> {
    let mut names = Vec::new();
    for (t, _) in C_TYPES {
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
