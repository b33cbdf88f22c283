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
    /// `kDLFloat8_e3m4` ([`Float8E3M4`](crate::array::element::Float8E3M4)).
    Float8E3M4,
    /// `kDLFloat8_e4m3` ([`Float8E4M3`](crate::array::element::Float8E4M3)).
    Float8E4M3,
    /// `kDLFloat8_e4m3b11fnuz` ([`Float8E4M3B11Fnuz`](crate::array::element::Float8E4M3B11Fnuz)).
    Float8E4M3B11Fnuz,
    /// `kDLFloat8_e4m3fn` (`float8::F8E4M3`).
    Float8E4M3Fn,
    /// `kDLFloat8_e4m3fnuz` ([`Float8E4M3Fnuz`](crate::array::element::Float8E4M3Fnuz)).
    Float8E4M3Fnuz,
    /// `kDLFloat8_e5m2` (`float8::F8E5M2`).
    Float8E5M2,
    /// `kDLFloat8_e5m2fnuz` ([`Float8E5M2Fnuz`](crate::array::element::Float8E5M2Fnuz)).
    Float8E5M2Fnuz,
    /// `kDLFloat8_e8m0fnu` ([`Float8E8M0Fnu`](crate::array::element::Float8E8M0Fnu)).
    Float8E8M0Fnu,
    /// `kDLFloat6_e2m3fn`, padded ([`Float6E2M3Fn`](crate::array::element::Float6E2M3Fn)).
    Float6E2M3Fn,
    /// `kDLFloat6_e3m2fn`, padded ([`Float6E3M2Fn`](crate::array::element::Float6E3M2Fn)).
    Float6E3M2Fn,
    /// `kDLFloat4_e2m1fn`, padded ([`Float4E2M1Fn`](crate::array::element::Float4E2M1Fn)).
    Float4E2M1Fn,
}

impl DType {
    /// Every dtype, in the order error messages list them.
    pub const ALL: [DType; 27] = [
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
        DType::Float8E3M4,
        DType::Float8E4M3,
        DType::Float8E4M3B11Fnuz,
        DType::Float8E4M3Fn,
        DType::Float8E4M3Fnuz,
        DType::Float8E5M2,
        DType::Float8E5M2Fnuz,
        DType::Float8E8M0Fnu,
        DType::Float6E2M3Fn,
        DType::Float6E3M2Fn,
        DType::Float4E2M1Fn,
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
            DType::Float8E3M4 => "float8_e3m4",
            DType::Float8E4M3 => "float8_e4m3",
            DType::Float8E4M3B11Fnuz => "float8_e4m3b11fnuz",
            DType::Float8E4M3Fn => "float8_e4m3fn",
            DType::Float8E4M3Fnuz => "float8_e4m3fnuz",
            DType::Float8E5M2 => "float8_e5m2",
            DType::Float8E5M2Fnuz => "float8_e5m2fnuz",
            DType::Float8E8M0Fnu => "float8_e8m0fnu",
            DType::Float6E2M3Fn => "float6_e2m3fn",
            DType::Float6E3M2Fn => "float6_e3m2fn",
            DType::Float4E2M1Fn => "float4_e2m1fn",
        }
    }

    /// Whether this is a DLPack 1.1 low-precision float (fp8, fp6, fp4):
    /// NumPy has no dtype for these (ml_dtypes registers them), and the
    /// built-in arithmetic kernels do not take them.
    pub fn is_low_precision_float(self) -> bool {
        crate::array::element::minifloat_name(self.dlpack().code).is_some()
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
    /// bfloat16, complex32 and the fp8/fp6/fp4 types have none.
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
            DType::BFloat16
            | DType::Complex32
            | DType::Float8E3M4
            | DType::Float8E4M3
            | DType::Float8E4M3B11Fnuz
            | DType::Float8E4M3Fn
            | DType::Float8E4M3Fnuz
            | DType::Float8E5M2
            | DType::Float8E5M2Fnuz
            | DType::Float8E8M0Fnu
            | DType::Float6E2M3Fn
            | DType::Float6E3M2Fn
            | DType::Float4E2M1Fn => return None,
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
            // ml_dtypes' and PyTorch's names (`torch.float8_e4m3fn`).
            other => match DType::ALL.into_iter().find(|d| d.is_low_precision_float() && d.name() == other) {
                Some(d) => d,
                None => return DType::from_typestr(other),
            },
        })
    }

    /// The supported names, for error messages.
    pub fn supported() -> String {
        DType::ALL.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
    }

    /// Whether the built-in arithmetic kernels (add_index, ...) exist for
    /// this dtype. The byte-moving ones (fill, copy_strided) take every dtype.
    pub fn has_kernels(self) -> bool {
        !matches!(self, DType::Bool | DType::Complex32 | DType::Complex64 | DType::Complex128)
            && !self.is_low_precision_float()
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
        use $crate::array::dtype::DType as __D;
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
            __D::Float8E3M4 => {
                #[allow(dead_code)]
                type $T = $crate::array::element::Float8E3M4;
                $body
            }
            __D::Float8E4M3 => {
                #[allow(dead_code)]
                type $T = $crate::array::element::Float8E4M3;
                $body
            }
            __D::Float8E4M3B11Fnuz => {
                #[allow(dead_code)]
                type $T = $crate::array::element::Float8E4M3B11Fnuz;
                $body
            }
            __D::Float8E4M3Fn => {
                #[allow(dead_code)]
                type $T = $crate::array::element::F8E4M3;
                $body
            }
            __D::Float8E4M3Fnuz => {
                #[allow(dead_code)]
                type $T = $crate::array::element::Float8E4M3Fnuz;
                $body
            }
            __D::Float8E5M2 => {
                #[allow(dead_code)]
                type $T = $crate::array::element::F8E5M2;
                $body
            }
            __D::Float8E5M2Fnuz => {
                #[allow(dead_code)]
                type $T = $crate::array::element::Float8E5M2Fnuz;
                $body
            }
            __D::Float8E8M0Fnu => {
                #[allow(dead_code)]
                type $T = $crate::array::element::Float8E8M0Fnu;
                $body
            }
            __D::Float6E2M3Fn => {
                #[allow(dead_code)]
                type $T = $crate::array::element::Float6E2M3Fn;
                $body
            }
            __D::Float6E3M2Fn => {
                #[allow(dead_code)]
                type $T = $crate::array::element::Float6E3M2Fn;
                $body
            }
            __D::Float4E2M1Fn => {
                #[allow(dead_code)]
                type $T = $crate::array::element::Float4E2M1Fn;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_maps_to_its_dlpack_type_and_back() {
        for d in DType::ALL {
            assert_eq!(DType::from_dlpack(d.dlpack()), Some(d), "{}", d.name());
            assert_eq!(DType::parse(d.name()), Some(d), "{}", d.name());
        }
    }

    /// The DLPack 1.1 codes, written out from `dlpack.h` (not from the constants).
    #[test]
    fn low_precision_dtypes_have_the_dlpack_1_1_codes() {
        let table = [
            (DType::Float8E3M4, 7, 8),
            (DType::Float8E4M3, 8, 8),
            (DType::Float8E4M3B11Fnuz, 9, 8),
            (DType::Float8E4M3Fn, 10, 8),
            (DType::Float8E4M3Fnuz, 11, 8),
            (DType::Float8E5M2, 12, 8),
            (DType::Float8E5M2Fnuz, 13, 8),
            (DType::Float8E8M0Fnu, 14, 8),
            (DType::Float6E2M3Fn, 15, 6),
            (DType::Float6E3M2Fn, 16, 6),
            (DType::Float4E2M1Fn, 17, 4),
        ];
        for (d, code, bits) in table {
            let dt = d.dlpack();
            assert_eq!((dt.code.0, dt.bits, dt.lanes), (code, bits, 1), "{}", d.name());
            assert_eq!(d.itemsize(), 1, "{}: one byte per element", d.name());
            assert!(d.is_low_precision_float() && !d.has_kernels(), "{}", d.name());
            assert_eq!(d.typestr(), None, "{}: NumPy has no type string for it", d.name());
            assert_eq!(
                DType::from_dlpack(DLDataType { code: crate::dlpack::DLDataTypeCode(code), bits, lanes: 1 }),
                Some(d)
            );
        }
        assert_eq!(DType::ALL.iter().filter(|d| d.is_low_precision_float()).count(), table.len());
        assert_eq!(DType::parse("torch.float8_e4m3fn"), Some(DType::Float8E4M3Fn));
        assert_eq!(DType::parse("float8_e5m2"), Some(DType::Float8E5M2));
        assert_eq!(DType::parse("float8_e4m3fnz"), None);
        assert!(!DType::Float32.is_low_precision_float() && !DType::BFloat16.is_low_precision_float());
    }
}
