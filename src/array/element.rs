//! Element types and their DLPack data types.
//!
//! Only types that implement [`Element`] can be stored in a
//! [`MemArray`](super::MemArray) or described by a view; any other type is a
//! compile error (`the trait bound `String: Element` is not satisfied`).
//!
//! Besides the integer, IEEE, bfloat16, complex and bool types, the DLPack
//! 1.1 low-precision floats are elements: the eight 8-bit formats
//! (`kDLFloat8_*`, codes 7 to 14), and the 6- and 4-bit formats
//! (`kDLFloat6_*`, `kDLFloat4_e2m1fn`, codes 15 to 17), which gpuport holds
//! *padded*: one element per byte, in its low bits (see
//! [`DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`](crate::dlpack::ffi::DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)).
//! gpuport moves these elements as bytes (copies, fills, DLPack); the
//! arithmetic kernels do not take them.

use std::fmt;

use half::{bf16, f16};
use num_complex::Complex;

use crate::dlpack::ffi::{DLDataType, DLDataTypeCode};

/// A type that can be an array element and has a DLPack data type.
///
/// # Safety
/// Implementors promise, because arrays copy elements as bytes between host
/// and device and hand them to C consumers:
/// - the type has no padding and `size_of::<Self>() * 8 == DTYPE.bits * DTYPE.lanes`,
///   except for a padded sub-byte type (`DTYPE.bits < 8`, `DTYPE.lanes == 1`),
///   which is one byte holding the value in its low `DTYPE.bits` bits, and
///   whose [`Element::valid_bytes`] accepts only bytes whose other bits are zero;
/// - the all-zero bit pattern is a valid value (arrays start zero-filled);
/// - every bit pattern that [`Element::valid_bytes`] accepts is a valid value;
/// - the memory layout is the one DLPack describes for `DTYPE` (lanes
///   stored consecutively, complex numbers as (re, im)).
pub unsafe trait Element: Copy + Send + Sync + 'static {
    /// The DLPack data type of this element.
    const DTYPE: DLDataType;

    /// Whether `bytes` (a whole number of elements) holds only valid values.
    /// Used on import, where the bytes come from a foreign producer; every
    /// bit pattern is valid for numbers, so only `bool` overrides this.
    fn valid_bytes(bytes: &[u8]) -> bool {
        let _ = bytes;
        true
    }
}

/// A single-lane element that can also be the lane type of a vector
/// element `[T; L]`.
///
/// # Safety
/// As for [`Element`], and `DTYPE.lanes == 1`.
pub unsafe trait Scalar: Element {}

const fn dt(code: DLDataTypeCode, bits: u8) -> DLDataType {
    DLDataType { code, bits, lanes: 1 }
}

macro_rules! scalar {
    ($($t:ty => $code:ident, $bits:expr;)*) => { $(
        // SAFETY: a primitive (or `#[repr(C)]`/`#[repr(transparent)]` number type)
        // of exactly `$bits` bits without padding, valid when zero, every bit
        // pattern valid, laid out as DLPack's `$code` type.
        unsafe impl Element for $t {
            const DTYPE: DLDataType = dt(DLDataTypeCode::$code, $bits);
        }
        // SAFETY: as above; one lane.
        unsafe impl Scalar for $t {}
    )* };
}

scalar! {
    i8 => INT, 8;
    i16 => INT, 16;
    i32 => INT, 32;
    i64 => INT, 64;
    u8 => UINT, 8;
    u16 => UINT, 16;
    u32 => UINT, 32;
    u64 => UINT, 64;
    f16 => FLOAT, 16;
    bf16 => BFLOAT, 16;
    f32 => FLOAT, 32;
    f64 => FLOAT, 64;
    Complex<f16> => COMPLEX, 32;
    Complex<f32> => COMPLEX, 64;
    Complex<f64> => COMPLEX, 128;
    // `#[repr(transparent)]` over a `u8` in the `float8` crate: every bit
    // pattern is a value.
    F8E4M3 => FLOAT8_E4M3FN, 8;
    F8E5M2 => FLOAT8_E5M2, 8;
}

// ---- DLPack 1.1 low-precision floats ------------------------------------------

/// `kDLFloat8_e4m3fn` from the `float8` crate: the OCP / NVIDIA e4m3 (bias 7,
/// no infinities, NaN = `S.1111.111`, largest finite 448). Its conversions
/// (`from_f32`, `to_f32`) are a port of CUDA's `cuda_fp8.hpp`; note that the
/// crate's `F8E4M3::INFINITY` and `MAX` constants do not follow e4m3fn (the
/// format has no infinity): gpuport uses only the bits and the conversions.
pub use float8::F8E4M3;
/// `kDLFloat8_e5m2` from the `float8` crate: IEEE-style e5m2 (bias 15, with
/// infinities and NaNs), the upper byte of an `f16`.
pub use float8::F8E5M2;

/// DLPack's name for [`F8E4M3`]: `kDLFloat8_e4m3fn`.
pub type Float8E4M3Fn = F8E4M3;
/// DLPack's name for [`F8E5M2`]: `kDLFloat8_e5m2`.
pub type Float8E5M2 = F8E5M2;

// The formats below are hand-written bit containers: no maintained crate
// provides them (the `float8` crate has only e4m3fn and e5m2), and gpuport
// only stores, copies and exchanges them, so a `#[repr(transparent)]` byte
// with its DLPack code is all it needs. Converting values is the business of
// the libraries that compute with them (ml_dtypes, PyTorch, the vendors'
// headers).

/// A one-byte container of an 8-bit float format gpuport holds as bits.
macro_rules! float8_container {
    ($($(#[$doc:meta])* $name:ident => $code:ident;)*) => { $(
        $(#[$doc])*
        ///
        /// A bit container: gpuport stores, copies and exchanges it, and does
        /// not compute with it. Every bit pattern is a value.
        #[repr(transparent)]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default, bytemuck::Zeroable, bytemuck::Pod)]
        pub struct $name(u8);

        impl $name {
            /// The element with these bits.
            pub const fn from_bits(bits: u8) -> Self {
                Self(bits)
            }
            /// The element's bits.
            pub const fn to_bits(self) -> u8 {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#04x})"), self.0)
            }
        }

        // SAFETY: `#[repr(transparent)]` over a `u8`: one byte, no padding,
        // valid when zero and for every bit pattern, laid out as DLPack's
        // `$code` (8 bits, one lane).
        unsafe impl Element for $name {
            const DTYPE: DLDataType = dt(DLDataTypeCode::$code, 8);
        }
        // SAFETY: as above; one lane.
        unsafe impl Scalar for $name {}
    )* };
}

float8_container! {
    /// `kDLFloat8_e3m4`: 3 exponent and 4 mantissa bits, IEEE-style infinities and NaNs.
    Float8E3M4 => FLOAT8_E3M4;
    /// `kDLFloat8_e4m3`: 4 exponent and 3 mantissa bits, IEEE-style infinities
    /// and NaNs (not the finite e4m3fn of [`F8E4M3`]).
    Float8E4M3 => FLOAT8_E4M3;
    /// `kDLFloat8_e4m3b11fnuz`: e4m3 with exponent bias 11, finite, unsigned zero.
    Float8E4M3B11Fnuz => FLOAT8_E4M3B11FNUZ;
    /// `kDLFloat8_e4m3fnuz`: e4m3 (bias 8), finite, unsigned zero; `0x80` is NaN.
    Float8E4M3Fnuz => FLOAT8_E4M3FNUZ;
    /// `kDLFloat8_e5m2fnuz`: e5m2 (bias 16), finite, unsigned zero; `0x80` is NaN.
    Float8E5M2Fnuz => FLOAT8_E5M2FNUZ;
    /// `kDLFloat8_e8m0fnu`: an unsigned power of two, 2^(bits - 127), `0xff` NaN (the MX scale type).
    /// Its all-zero pattern is 2^-127, not zero: a zero-filled array holds that.
    Float8E8M0Fnu => FLOAT8_E8M0FNU;
}

/// A padded sub-byte float: one byte, the value in its low `BITS` bits.
macro_rules! subbyte_container {
    ($($(#[$doc:meta])* $name:ident => $code:ident, $bits:literal;)*) => { $(
        $(#[$doc])*
        ///
        /// A padded bit container: one element per byte, the value in the low
        /// bits and the high bits zero, as DLPack describes a tensor flagged
        /// `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`. gpuport stores,
        /// copies and exchanges it, and does not compute with it.
        #[repr(transparent)]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default, bytemuck::Zeroable, bytemuck::Pod)]
        pub struct $name(u8);

        impl $name {
            /// Bits of the value, the low bits of the byte.
            pub const BITS: u32 = $bits;
            /// The bits of the byte the value may use.
            pub const MASK: u8 = (1u8 << $bits) - 1;

            /// The element with these bits, or `None` when a bit above
            /// [`BITS`](Self::BITS) is set.
            pub const fn from_bits(bits: u8) -> Option<Self> {
                if bits & !Self::MASK == 0 {
                    Some(Self(bits))
                } else {
                    None
                }
            }
            /// The element's bits (the high bits are zero).
            pub const fn to_bits(self) -> u8 {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#04x})"), self.0)
            }
        }

        // SAFETY: `#[repr(transparent)]` over a `u8`: one byte, no padding,
        // valid when zero; every byte is a valid `u8`, and `valid_bytes`
        // admits only bytes whose bits above `$bits` are zero, the padded
        // layout DLPack describes for `$code` (`$bits` bits, one lane).
        // Not `Scalar`: a vector of padded sub-byte lanes has no DLPack layout.
        unsafe impl Element for $name {
            const DTYPE: DLDataType = dt(DLDataTypeCode::$code, $bits);

            fn valid_bytes(bytes: &[u8]) -> bool {
                bytes.iter().all(|&b| b & !Self::MASK == 0)
            }
        }
    )* };
}

subbyte_container! {
    /// `kDLFloat6_e2m3fn`: 6 bits, 2 exponent and 3 mantissa bits, finite.
    Float6E2M3Fn => FLOAT6_E2M3FN, 6;
    /// `kDLFloat6_e3m2fn`: 6 bits, 3 exponent and 2 mantissa bits, finite.
    Float6E3M2Fn => FLOAT6_E3M2FN, 6;
    /// `kDLFloat4_e2m1fn`: 4 bits, 2 exponent and 1 mantissa bit, finite.
    Float4E2M1Fn => FLOAT4_E2M1FN, 4;
}

// SAFETY: `bool` is one byte, false is 0, and `valid_bytes` admits only 0
// and 1, the two valid bit patterns; DLPack's bool is 8 bits per element.
unsafe impl Element for bool {
    const DTYPE: DLDataType = dt(DLDataTypeCode::BOOL, 8);

    fn valid_bytes(bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| b <= 1)
    }
}
// SAFETY: as above; one lane.
unsafe impl Scalar for bool {}

/// Vector elements: `[f32; 4]` is DLPack's float4 (FLOAT, 32 bits, 4 lanes).
///
/// `L` must be between 1 and 65535 (DLPack's `lanes` is a `u16`); other
/// lengths fail to compile when the data type is used.
// SAFETY: an array of `L` scalars has no padding between elements, is valid
// when zero and for every pattern valid for each lane, and stores its lanes
// consecutively as DLPack's vector types do.
unsafe impl<T: Scalar, const L: usize> Element for [T; L] {
    #[allow(clippy::cast_possible_truncation)] // L <= u16::MAX: asserted first
    const DTYPE: DLDataType = {
        assert!(L >= 1 && L <= u16::MAX as usize, "vector elements need 1..=65535 lanes");
        DLDataType { code: T::DTYPE.code, bits: T::DTYPE.bits, lanes: L as u16 }
    };

    fn valid_bytes(bytes: &[u8]) -> bool {
        T::valid_bytes(bytes)
    }
}

// ---- the table of run-time dtypes -------------------------------------------------

/// The one table of run-time dtypes (`DType`, `src/array/dtype.rs`), beside
/// the element types it names: `dtype_table!($ then)` calls `then!` with a
/// `$` and every row. A row is
/// `Variant => RustType, "name", DLPACK_CODE bits, numpy, kernels, [other names];`
/// where `numpy` is `numpy "<typestr>"`, `ml_dtypes` (NumPy has the dtype
/// only through ml_dtypes) or `none`, and `kernels` is `kernels` (the
/// built-in arithmetic kernels take it) or `bytes` (stored, copied, filled
/// and exchanged as bytes only). `dtypes!` in `src/array/dtype.rs` writes
/// `DType`, `with_dtype!` and the `Stored` impls from it; this file reads
/// the names, codes and bits ([`DTYPE_ROWS`]).
///
/// The built-in kernels are instantiated for the `kernels` rows
/// (`src/backend/array_kernels.rs`); a test in `src/array/dtype.rs` checks
/// that they agree. Paths are absolute: `with_dtype!` names the types where
/// it is used.
macro_rules! dtype_table {
    ($d:tt $then:ident) => {
        $then! { $d
            // variant           Rust type                                    name                  DLPack                 NumPy          kernels  other names
            Bool              => bool,                                        "bool",               BOOL 8,                numpy "|b1",   bytes,   ["bool_", "?"];
            Int8              => i8,                                          "int8",               INT 8,                 numpy "|i1",   kernels, ["b"];
            Int16             => i16,                                         "int16",              INT 16,                numpy "<i2",   kernels, ["h", "short"];
            Int32             => i32,                                         "int32",              INT 32,                numpy "<i4",   kernels, ["i"];
            Int64             => i64,                                         "int64",              INT 64,                numpy "<i8",   kernels, ["l", "q", "long", "int"];
            UInt8             => u8,                                          "uint8",              UINT 8,                numpy "|u1",   kernels, ["B"];
            UInt16            => u16,                                         "uint16",             UINT 16,               numpy "<u2",   kernels, ["H"];
            UInt32            => u32,                                         "uint32",             UINT 32,               numpy "<u4",   kernels, ["I"];
            UInt64            => u64,                                         "uint64",             UINT 64,               numpy "<u8",   kernels, ["L", "Q"];
            Float16           => half::f16,                                   "float16",            FLOAT 16,              numpy "<f2",   kernels, ["e", "half"];
            BFloat16          => half::bf16,                                  "bfloat16",           BFLOAT 16,             ml_dtypes,     kernels, [];
            Float32           => f32,                                         "float32",            FLOAT 32,              numpy "<f4",   kernels, ["f", "single"];
            Float64           => f64,                                         "float64",            FLOAT 64,              numpy "<f8",   kernels, ["d", "double", "float"];
            Complex32         => num_complex::Complex<half::f16>,             "complex32",          COMPLEX 32,            none,          bytes,   ["chalf"];
            Complex64         => num_complex::Complex<f32>,                   "complex64",          COMPLEX 64,            numpy "<c8",   bytes,   ["F", "cfloat"];
            Complex128        => num_complex::Complex<f64>,                   "complex128",         COMPLEX 128,           numpy "<c16",  bytes,   ["D", "cdouble", "complex"];
            Float8E3M4        => crate::array::element::Float8E3M4,           "float8_e3m4",        FLOAT8_E3M4 8,         ml_dtypes,     bytes,   [];
            Float8E4M3        => crate::array::element::Float8E4M3,           "float8_e4m3",        FLOAT8_E4M3 8,         ml_dtypes,     bytes,   [];
            Float8E4M3B11Fnuz => crate::array::element::Float8E4M3B11Fnuz,    "float8_e4m3b11fnuz", FLOAT8_E4M3B11FNUZ 8,  ml_dtypes,     bytes,   [];
            Float8E4M3Fn      => crate::array::element::F8E4M3,               "float8_e4m3fn",      FLOAT8_E4M3FN 8,       ml_dtypes,     bytes,   [];
            Float8E4M3Fnuz    => crate::array::element::Float8E4M3Fnuz,       "float8_e4m3fnuz",    FLOAT8_E4M3FNUZ 8,     ml_dtypes,     bytes,   [];
            Float8E5M2        => crate::array::element::F8E5M2,               "float8_e5m2",        FLOAT8_E5M2 8,         ml_dtypes,     bytes,   [];
            Float8E5M2Fnuz    => crate::array::element::Float8E5M2Fnuz,       "float8_e5m2fnuz",    FLOAT8_E5M2FNUZ 8,     ml_dtypes,     bytes,   [];
            Float8E8M0Fnu     => crate::array::element::Float8E8M0Fnu,        "float8_e8m0fnu",     FLOAT8_E8M0FNU 8,      ml_dtypes,     bytes,   [];
            Float6E2M3Fn      => crate::array::element::Float6E2M3Fn,         "float6_e2m3fn",      FLOAT6_E2M3FN 6,       ml_dtypes,     bytes,   [];
            Float6E3M2Fn      => crate::array::element::Float6E3M2Fn,         "float6_e3m2fn",      FLOAT6_E3M2FN 6,       ml_dtypes,     bytes,   [];
            Float4E2M1Fn      => crate::array::element::Float4E2M1Fn,         "float4_e2m1fn",      FLOAT4_E2M1FN 4,       ml_dtypes,     bytes,   [];
        }
    };
}

pub(crate) use dtype_table;

/// Writes [`DTYPE_ROWS`] from the table.
macro_rules! dlpack_rows {
    ($d:tt $(
        $variant:ident => $t:ty, $name:literal, $code:ident $bits:literal,
        $numpy:ident $($typestr:literal)?, $kernels:ident, [$($alias:literal),*];
    )*) => {
        /// The DLPack code, bits and name of every run-time dtype, in the
        /// table's order.
        const DTYPE_ROWS: [(DLDataTypeCode, u8, &str); [$($name),*].len()] = [$((DLDataTypeCode::$code, $bits, $name)),*];
    };
}

dtype_table!($ dlpack_rows);

/// The name of a DLPack 1.1 low-precision float code and the bits it has
/// (`float8_e4m3fn`, 8), as ml_dtypes and PyTorch spell it: the dtype
/// table's (`dtype_table!`).
pub fn minifloat_name(code: DLDataTypeCode) -> Option<(&'static str, u8)> {
    DTYPE_ROWS.into_iter().find(|&(c, _, _)| c.since_minor() >= 1 && c == code).map(|(_, bits, name)| (name, bits))
}

/// Whether `dtype` is a sub-byte type (fewer than 8 bits per lane: fp6, fp4).
pub fn dtype_is_subbyte(dtype: DLDataType) -> bool {
    dtype.bits < 8
}

/// A short human-readable name for a DLPack data type, e.g. `float32x4`,
/// `float8_e4m3fn`.
pub fn dtype_name(dtype: DLDataType) -> String {
    if let Some((name, bits)) = minifloat_name(dtype.code) {
        let mut s = if dtype.bits == bits { name.to_string() } else { format!("{name}:bits{}", dtype.bits) };
        if dtype.lanes != 1 {
            s.push_str(&format!("x{}", dtype.lanes));
        }
        return s;
    }
    let base = match dtype.code {
        DLDataTypeCode::INT => "int",
        DLDataTypeCode::UINT => "uint",
        DLDataTypeCode::FLOAT => "float",
        DLDataTypeCode::BFLOAT => "bfloat",
        DLDataTypeCode::COMPLEX => "complex",
        DLDataTypeCode::BOOL => "bool",
        DLDataTypeCode::OPAQUE_HANDLE => "handle",
        DLDataTypeCode(c) => return format!("code{c}:{}x{}", dtype.bits, dtype.lanes),
    };
    let mut s = if dtype.code == DLDataTypeCode::BOOL { base.to_string() } else { format!("{base}{}", dtype.bits) };
    if dtype.lanes != 1 {
        s.push_str(&format!("x{}", dtype.lanes));
    }
    s
}

/// Whether gpuport can hold elements of this data type: the code and bits
/// of a run-time dtype (a row of `dtype_table!`), with at least one
/// lane, and exactly one for a padded sub-byte type (fp6, fp4). DLPack 1.1
/// fixes the bits of each low-precision code, so other bits are refused.
pub fn dtype_is_supported(dtype: DLDataType) -> bool {
    let in_table = DTYPE_ROWS.into_iter().any(|(code, bits, _)| code == dtype.code && bits == dtype.bits);
    in_table && dtype.lanes >= 1 && (dtype.lanes == 1 || !dtype_is_subbyte(dtype))
}

/// Size in bytes of one element of `dtype` (`bits * lanes / 8`, rounded up).
pub fn dtype_size(dtype: DLDataType) -> usize {
    (dtype.bits as usize * dtype.lanes as usize).div_ceil(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<T: Element>() {
        assert_eq!(std::mem::size_of::<T>(), dtype_size(T::DTYPE), "{}", dtype_name(T::DTYPE));
        assert!(dtype_is_supported(T::DTYPE));
    }

    #[test]
    fn every_element_size_matches_its_dlpack_bits() {
        check::<bool>();
        check::<i8>();
        check::<i16>();
        check::<i32>();
        check::<i64>();
        check::<u8>();
        check::<u16>();
        check::<u32>();
        check::<u64>();
        check::<f16>();
        check::<bf16>();
        check::<f32>();
        check::<f64>();
        check::<Complex<f16>>();
        check::<Complex<f32>>();
        check::<Complex<f64>>();
        check::<[f32; 4]>();
        check::<[f16; 2]>();
        check::<[i8; 16]>();
        check::<[Complex<f64>; 2]>();
        check::<F8E4M3>();
        check::<F8E5M2>();
        check::<Float8E3M4>();
        check::<Float8E4M3>();
        check::<Float8E4M3B11Fnuz>();
        check::<Float8E4M3Fnuz>();
        check::<Float8E5M2Fnuz>();
        check::<Float8E8M0Fnu>();
        check::<Float6E2M3Fn>();
        check::<Float6E3M2Fn>();
        check::<Float4E2M1Fn>();
        check::<[F8E4M3; 4]>();
    }

    /// The codes and bits as `dlpack.h` (DLPack 1.1) numbers them, written
    /// out here rather than taken from the constants, so a wrong constant fails.
    #[test]
    fn low_precision_floats_carry_the_dlpack_1_1_codes_and_bits() {
        let expected: [(DLDataType, u8, u8, &str); 11] = [
            (Float8E3M4::DTYPE, 7, 8, "float8_e3m4"),
            (Float8E4M3::DTYPE, 8, 8, "float8_e4m3"),
            (Float8E4M3B11Fnuz::DTYPE, 9, 8, "float8_e4m3b11fnuz"),
            (F8E4M3::DTYPE, 10, 8, "float8_e4m3fn"),
            (Float8E4M3Fnuz::DTYPE, 11, 8, "float8_e4m3fnuz"),
            (F8E5M2::DTYPE, 12, 8, "float8_e5m2"),
            (Float8E5M2Fnuz::DTYPE, 13, 8, "float8_e5m2fnuz"),
            (Float8E8M0Fnu::DTYPE, 14, 8, "float8_e8m0fnu"),
            (Float6E2M3Fn::DTYPE, 15, 6, "float6_e2m3fn"),
            (Float6E3M2Fn::DTYPE, 16, 6, "float6_e3m2fn"),
            (Float4E2M1Fn::DTYPE, 17, 4, "float4_e2m1fn"),
        ];
        for (dt, code, bits, name) in expected {
            assert_eq!((dt.code.0, dt.bits, dt.lanes), (code, bits, 1), "{name}");
            assert_eq!(dtype_name(dt), name);
            assert_eq!(dt.code.since_minor(), 1, "{name} is a DLPack 1.1 code");
            assert!(dtype_is_supported(dt), "{name}");
            assert_eq!(dtype_size(dt), 1, "{name}: one byte per element (padded below 8 bits)");
            assert_eq!(dtype_is_subbyte(dt), bits < 8, "{name}");
        }
        assert_eq!(DLDataTypeCode::FLOAT8_E4M3FN.name(), Some("kDLFloat8_e4m3fn"));
        assert_eq!(DLDataTypeCode(18).name(), None);
    }

    #[test]
    fn low_precision_codes_with_other_bits_or_lanes_are_not_supported() {
        let d = |code: u8, bits: u8, lanes: u16| DLDataType { code: DLDataTypeCode(code), bits, lanes };
        assert!(!dtype_is_supported(d(10, 16, 1)), "fp8 is 8 bits");
        assert!(!dtype_is_supported(d(12, 4, 1)), "fp8 is 8 bits");
        assert!(!dtype_is_supported(d(15, 8, 1)), "fp6 is 6 bits");
        assert!(!dtype_is_supported(d(17, 8, 1)), "fp4 is 4 bits");
        assert!(!dtype_is_supported(d(17, 4, 2)), "a padded sub-byte type has one lane");
        assert!(!dtype_is_supported(d(18, 8, 1)), "code 18 is not defined");
        assert!(!dtype_is_supported(d(2, 8, 1)), "kDLFloat with 8 bits is not fp8");
        assert!(dtype_is_supported(d(10, 8, 4)), "fp8 vectors are elements");
        assert_eq!(dtype_name(d(10, 16, 1)), "float8_e4m3fn:bits16");
    }

    /// The `float8` crate's types are the DLPack formats they are mapped to:
    /// F8E4M3 is e4m3fn (448 largest, S.1111.111 NaN), F8E5M2 is IEEE e5m2.
    #[test]
    fn the_float8_crate_types_have_the_mapped_formats() {
        assert_eq!(F8E4M3::from_bits(0x7e).to_f32(), 448.0);
        assert_eq!(F8E4M3::from_bits(0x78).to_f32(), 256.0, "exponent 1111 is a normal number in e4m3fn");
        assert!(F8E4M3::from_bits(0x7f).to_f32().is_nan());
        assert_eq!(F8E4M3::from_f32(1.0).to_bits(), 0x38);
        assert_eq!(F8E4M3::from_bits(0x01).to_f32(), 2f32.powi(-9));
        assert_eq!(F8E5M2::from_bits(0x7c).to_f32(), f32::INFINITY);
        assert_eq!(F8E5M2::from_bits(0x7b).to_f32(), 57344.0);
        assert!(F8E5M2::from_bits(0x7d).to_f32().is_nan());
        assert_eq!(F8E5M2::from_f32(1.0).to_bits(), 0x3c);
        assert_eq!(F8E5M2::from_f32(-2.0).to_bits(), (half::f16::from_f32(-2.0).to_bits() >> 8) as u8);
    }

    #[test]
    fn sub_byte_elements_refuse_bits_above_their_width() {
        assert!(Float4E2M1Fn::valid_bytes(&[0x00, 0x0f, 0x07]));
        assert!(!Float4E2M1Fn::valid_bytes(&[0x01, 0x10]));
        assert!(Float6E2M3Fn::valid_bytes(&[0x3f]));
        assert!(!Float6E3M2Fn::valid_bytes(&[0x40]));
        assert!(Float8E8M0Fnu::valid_bytes(&[0xff]), "every byte is an 8-bit value");
        assert_eq!(format!("{:?}", Float4E2M1Fn::from_bits(2).unwrap()), "Float4E2M1Fn(0x02)");
    }

    proptest::proptest! {
        #[test]
        fn bits_round_trip_through_every_8_bit_type(b in proptest::prelude::any::<u8>()) {
            proptest::prop_assert_eq!(F8E4M3::from_bits(b).to_bits(), b);
            proptest::prop_assert_eq!(F8E5M2::from_bits(b).to_bits(), b);
            proptest::prop_assert_eq!(Float8E3M4::from_bits(b).to_bits(), b);
            proptest::prop_assert_eq!(Float8E4M3::from_bits(b).to_bits(), b);
            proptest::prop_assert_eq!(Float8E4M3B11Fnuz::from_bits(b).to_bits(), b);
            proptest::prop_assert_eq!(Float8E4M3Fnuz::from_bits(b).to_bits(), b);
            proptest::prop_assert_eq!(Float8E5M2Fnuz::from_bits(b).to_bits(), b);
            proptest::prop_assert_eq!(Float8E8M0Fnu::from_bits(b).to_bits(), b);
            // The bytes an array stores are the bits.
            let (x, y) = (Float8E4M3Fnuz::from_bits(b), F8E5M2::from_bits(b));
            proptest::prop_assert_eq!(bytemuck::bytes_of(&x), &[b]);
            proptest::prop_assert_eq!(bytemuck::bytes_of(&y), &[b]);
        }

        #[test]
        fn sub_byte_bits_round_trip_and_wider_bits_are_refused(b in proptest::prelude::any::<u8>()) {
            for (bits, back) in [
                (6, Float6E2M3Fn::from_bits(b).map(Float6E2M3Fn::to_bits)),
                (6, Float6E3M2Fn::from_bits(b).map(Float6E3M2Fn::to_bits)),
                (4, Float4E2M1Fn::from_bits(b).map(Float4E2M1Fn::to_bits)),
            ] {
                let fits = u32::from(b) < (1u32 << bits);
                proptest::prop_assert_eq!(back, if fits { Some(b) } else { None });
            }
            proptest::prop_assert_eq!(Float4E2M1Fn::valid_bytes(&[b]), b < 16);
            proptest::prop_assert_eq!(Float6E2M3Fn::valid_bytes(&[b]), b < 64);
        }
    }

    #[test]
    fn vector_types_carry_their_lanes() {
        assert_eq!(<[f32; 4]>::DTYPE, DLDataType { code: DLDataTypeCode::FLOAT, bits: 32, lanes: 4 });
        assert_eq!(dtype_name(<[f32; 4]>::DTYPE), "float32x4");
        assert_eq!(dtype_name(bool::DTYPE), "bool");
    }

    #[test]
    fn bool_rejects_bytes_other_than_zero_and_one() {
        assert!(bool::valid_bytes(&[0, 1, 1]));
        assert!(!bool::valid_bytes(&[0, 2]));
        assert!(!<[bool; 2]>::valid_bytes(&[1, 7]));
    }
}
