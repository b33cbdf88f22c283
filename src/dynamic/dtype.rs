//! Element types chosen at run time: [`DType`], with names, array-interface
//! type strings and DLPack codes, and the `with_dtype!` / `with_rank!`
//! macros that turn a run-time dtype and rank into the Rust types
//! `MemArray<T, N, D>` needs.
//!
//! ```
//! use gpuport::dynamic::DType;
//! assert_eq!(DType::parse("torch.float32"), Some(DType::Float32));
//! assert_eq!(DType::Float32.itemsize(), 4);
//! assert_eq!(DType::from_typestr("<f8"), Some(DType::Float64));
//! ```

use half::{bf16, f16};
use num_complex::Complex;

use crate::array::element::dtype_name;
use crate::dlpack::DLDataType;
use crate::Element;

/// Most dimensions a Python `MemArray` has: the built-in kernels' `MAX_RANK`.
/// Ranks are dispatched to const generics by `with_rank!` over `0..=MAX_RANK`.
pub const MAX_RANK: usize = crate::kernels::MAX_RANK;

/// Every scalar element type of gpuport's [`Element`] implementations.
///
/// Vector-lane types (`[f32; 4]`, DLPack lanes > 1) are not listed: NumPy and
/// the other array libraries have no such dtype; a trailing axis of the lane
/// type describes the same memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// `bool`.
    Bool,
    /// `i8`.
    Int8,
    /// `i16`.
    Int16,
    /// `i32`.
    Int32,
    /// `i64`.
    Int64,
    /// `u8`.
    UInt8,
    /// `u16`.
    UInt16,
    /// `u32`.
    UInt32,
    /// `u64`.
    UInt64,
    /// `half::f16`.
    Float16,
    /// `half::bf16`.
    BFloat16,
    /// `f32`.
    Float32,
    /// `f64`.
    Float64,
    /// `Complex<f16>`.
    Complex32,
    /// `Complex<f32>`.
    Complex64,
    /// `Complex<f64>`.
    Complex128,
}

impl DType {
    /// Every dtype, in the order error messages list them.
    pub const ALL: [DType; 16] = [
        DType::Bool,
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::UInt8,
        DType::UInt16,
        DType::UInt32,
        DType::UInt64,
        DType::Float16,
        DType::BFloat16,
        DType::Float32,
        DType::Float64,
        DType::Complex32,
        DType::Complex64,
        DType::Complex128,
    ];

    /// The NumPy-style name (`"float32"`, `"bfloat16"`, `"complex32"`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::Int8 => "int8",
            DType::Int16 => "int16",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::UInt8 => "uint8",
            DType::UInt16 => "uint16",
            DType::UInt32 => "uint32",
            DType::UInt64 => "uint64",
            DType::Float16 => "float16",
            DType::BFloat16 => "bfloat16",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
            DType::Complex32 => "complex32",
            DType::Complex64 => "complex64",
            DType::Complex128 => "complex128",
        }
    }

    /// The DLPack data type (what `Element::DTYPE` says for the Rust type).
    pub fn dlpack(self) -> DLDataType {
        with_dtype!(self, T => <T as Element>::DTYPE)
    }

    /// Size of one element in bytes.
    pub fn itemsize(self) -> usize {
        with_dtype!(self, T => std::mem::size_of::<T>())
    }

    /// The dtype of a DLPack data type, if it is a scalar gpuport holds.
    pub fn from_dlpack(dt: DLDataType) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.dlpack() == dt)
    }

    /// The array-interface type string (`"<f4"`), where NumPy defines one;
    /// bfloat16 and complex32 have none.
    pub fn typestr(self) -> Option<&'static str> {
        Some(match self {
            DType::Bool => "|b1",
            DType::Int8 => "|i1",
            DType::Int16 => "<i2",
            DType::Int32 => "<i4",
            DType::Int64 => "<i8",
            DType::UInt8 => "|u1",
            DType::UInt16 => "<u2",
            DType::UInt32 => "<u4",
            DType::UInt64 => "<u8",
            DType::Float16 => "<f2",
            DType::Float32 => "<f4",
            DType::Float64 => "<f8",
            DType::Complex64 => "<c8",
            DType::Complex128 => "<c16",
            DType::BFloat16 | DType::Complex32 => return None,
        })
    }

    /// The dtype of an array-interface type string.
    pub fn from_typestr(s: &str) -> Option<DType> {
        let s = s.trim();
        let body = s.strip_prefix(['<', '|', '=']).unwrap_or(s);
        if s.starts_with('>') {
            return None; // big-endian data is not one of gpuport's layouts
        }
        DType::ALL.into_iter().find(|d| d.typestr().is_some_and(|t| t[1..] == *body))
    }

    /// Parses a dtype name as NumPy, PyTorch and JAX spell it.
    pub fn parse(name: &str) -> Option<DType> {
        let n = name.trim().trim_start_matches("torch.").trim_start_matches("numpy.").trim_start_matches("jnp.");
        let n = n.trim_start_matches("dtype('").trim_end_matches("')");
        Some(match n {
            "bool" | "bool_" | "?" | "b1" => DType::Bool,
            "int8" | "i1" | "b" => DType::Int8,
            "int16" | "i2" | "h" | "short" => DType::Int16,
            "int32" | "i4" | "i" => DType::Int32,
            "int64" | "i8" | "l" | "q" | "long" | "int" => DType::Int64,
            "uint8" | "u1" | "B" => DType::UInt8,
            "uint16" | "u2" | "H" => DType::UInt16,
            "uint32" | "u4" | "I" => DType::UInt32,
            "uint64" | "u8" | "L" | "Q" => DType::UInt64,
            "float16" | "f2" | "e" | "half" => DType::Float16,
            "bfloat16" => DType::BFloat16,
            "float32" | "f4" | "f" | "single" => DType::Float32,
            "float64" | "f8" | "d" | "double" | "float" => DType::Float64,
            "complex32" | "chalf" => DType::Complex32,
            "complex64" | "c8" | "F" | "cfloat" => DType::Complex64,
            "complex128" | "c16" | "D" | "cdouble" | "complex" => DType::Complex128,
            other => return DType::from_typestr(other),
        })
    }

    /// The supported names, for error messages.
    pub fn supported() -> String {
        DType::ALL.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
    }

    /// Whether the built-in kernels (add_index, ...) exist for this dtype.
    pub fn has_kernels(self) -> bool {
        !matches!(self, DType::Bool | DType::Complex32 | DType::Complex64 | DType::Complex128)
    }
}

/// Describes a DLPack data type gpuport cannot hold.
pub fn unsupported_dlpack_dtype(dt: DLDataType) -> String {
    format!(
        "DLPack dtype {} (code {}, bits {}, lanes {}) is not supported; supported dtypes: {}",
        dtype_name(dt),
        dt.code.0,
        dt.bits,
        dt.lanes,
        DType::supported()
    )
}

/// `with_dtype!(dt, T => body)`: evaluates `body` with `T` the Rust element
/// type of the run-time [`DType`] `dt` (monomorphized once per dtype).
macro_rules! with_dtype {
    ($dt:expr, $T:ident => $body:expr) => {{
        use $crate::dynamic::DType as __D;
        match $dt {
            __D::Bool => {
                #[allow(dead_code)]
                type $T = bool;
                $body
            }
            __D::Int8 => {
                #[allow(dead_code)]
                type $T = i8;
                $body
            }
            __D::Int16 => {
                #[allow(dead_code)]
                type $T = i16;
                $body
            }
            __D::Int32 => {
                #[allow(dead_code)]
                type $T = i32;
                $body
            }
            __D::Int64 => {
                #[allow(dead_code)]
                type $T = i64;
                $body
            }
            __D::UInt8 => {
                #[allow(dead_code)]
                type $T = u8;
                $body
            }
            __D::UInt16 => {
                #[allow(dead_code)]
                type $T = u16;
                $body
            }
            __D::UInt32 => {
                #[allow(dead_code)]
                type $T = u32;
                $body
            }
            __D::UInt64 => {
                #[allow(dead_code)]
                type $T = u64;
                $body
            }
            __D::Float16 => {
                #[allow(dead_code)]
                type $T = ::half::f16;
                $body
            }
            __D::BFloat16 => {
                #[allow(dead_code)]
                type $T = ::half::bf16;
                $body
            }
            __D::Float32 => {
                #[allow(dead_code)]
                type $T = f32;
                $body
            }
            __D::Float64 => {
                #[allow(dead_code)]
                type $T = f64;
                $body
            }
            __D::Complex32 => {
                #[allow(dead_code)]
                type $T = ::num_complex::Complex<::half::f16>;
                $body
            }
            __D::Complex64 => {
                #[allow(dead_code)]
                type $T = ::num_complex::Complex<f32>;
                $body
            }
            __D::Complex128 => {
                #[allow(dead_code)]
                type $T = ::num_complex::Complex<f64>;
                $body
            }
        }
    }};
}

/// `with_rank!(n, N => body, else => fallback)`: evaluates `body` with the
/// const `N == n` for `n` in `0..=MAX_RANK` (8), else `fallback`.
macro_rules! with_rank {
    ($n:expr, $N:ident => $body:expr, else => $other:expr) => {{
        match $n {
            0 => {
                const $N: usize = 0;
                $body
            }
            1 => {
                const $N: usize = 1;
                $body
            }
            2 => {
                const $N: usize = 2;
                $body
            }
            3 => {
                const $N: usize = 3;
                $body
            }
            4 => {
                const $N: usize = 4;
                $body
            }
            5 => {
                const $N: usize = 5;
                $body
            }
            6 => {
                const $N: usize = 6;
                $body
            }
            7 => {
                const $N: usize = 7;
                $body
            }
            8 => {
                const $N: usize = 8;
                $body
            }
            _ => $other,
        }
    }};
}

// The element types the macros name must be gpuport elements.
const _: fn() = || {
    fn is_element<T: Element>() {}
    is_element::<f16>();
    is_element::<bf16>();
    is_element::<Complex<f16>>();
};

pub(crate) use {with_dtype, with_rank};

// The element types the macros name must be gpuport elements.
const _: fn() = || {
    fn is_element<T: Element>() {}
    is_element::<f16>();
    is_element::<bf16>();
    is_element::<Complex<f16>>();
};
