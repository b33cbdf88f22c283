//! Element types and their DLPack data types.
//!
//! Only types that implement [`Element`] can be stored in a
//! [`MemArray`](super::MemArray) or described by a view; any other type is a
//! compile error (`the trait bound `String: Element` is not satisfied`).

use half::{bf16, f16};
use num_complex::Complex;

use crate::dlpack::ffi::{DLDataType, DLDataTypeCode};

/// A type that can be an array element and has a DLPack data type.
///
/// # Safety
/// Implementors promise, because arrays copy elements as bytes between host
/// and device and hand them to C consumers:
/// - the type has no padding and `size_of::<Self>() * 8 == DTYPE.bits * DTYPE.lanes`;
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

/// A short human-readable name for a DLPack data type, e.g. `float32x4`.
pub fn dtype_name(dtype: DLDataType) -> String {
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

/// Whether gpuport can hold elements of this data type: the codes and bit
/// widths of the [`Element`] implementations, with at least one lane.
pub fn dtype_is_supported(dtype: DLDataType) -> bool {
    let bits_ok = match dtype.code {
        DLDataTypeCode::INT | DLDataTypeCode::UINT => matches!(dtype.bits, 8 | 16 | 32 | 64),
        DLDataTypeCode::FLOAT => matches!(dtype.bits, 16 | 32 | 64),
        DLDataTypeCode::BFLOAT => dtype.bits == 16,
        DLDataTypeCode::COMPLEX => matches!(dtype.bits, 32 | 64 | 128),
        DLDataTypeCode::BOOL => dtype.bits == 8,
        _ => false,
    };
    bits_ok && dtype.lanes >= 1
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
