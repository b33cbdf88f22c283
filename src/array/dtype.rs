//! Element types chosen at run time: [`DType`], written once in the table
//! of `src/array/element.rs` (`dtype_table!`, beside the element types it
//! names) with each dtype's Rust type, name, DLPack code and bits, NumPy
//! type string (or ml_dtypes), kernels and other spellings. The `dtypes!`
//! macro below turns it into the enum and its lookups, the `with_dtype!`
//! macro that turns a run-time dtype into the Rust type `MemArray<T, N, D>`
//! needs, and the [`Stored`] impls (which dtypes the built-in arithmetic
//! kernels take); a new dtype is one line of the table (and, for a new Rust
//! type, its [`Element`] impl in the same file).
//!
//! ```
//! use gpuport::dynamic::DType;
//! assert_eq!(DType::parse("torch.float32"), Some(DType::Float32));
//! assert_eq!(DType::Float32.itemsize(), 4);
//! assert_eq!(DType::from_typestr("<f8"), Some(DType::Float64));
//! ```

use crate::array::element::{dtype_name, dtype_table, Element};
use crate::array::{LockId, MemArray};
use crate::backend::{Backend, Device, Stream as BackendStream};
use crate::dlpack::{DLDataType, DLDataTypeCode};
use crate::error::{BackendKind, Error, Result};

/// Most dimensions a Python `MemArray` has: the built-in kernels' `MAX_RANK`.
/// Ranks are dispatched to const generics by `with_rank!` over `0..=MAX_RANK`.
pub const MAX_RANK: usize = crate::kernels::MAX_RANK;

/// Writes every per-dtype item from the table's rows (`dtype_table!` in
/// `src/array/element.rs`, which describes a row). The leading `$` lets the
/// table define the `with_dtype!` macro.
macro_rules! dtypes {
    (@typestr numpy $typestr:literal) => { Some($typestr) };
    (@typestr $other:ident) => { None };
    (@ml_dtypes ml_dtypes) => { true };
    (@ml_dtypes $other:ident) => { false };
    (@kernels kernels) => { true };
    (@kernels bytes) => { false };
    (@stored kernels $t:ty) => {
        impl Stored for $t {
            fn add_index<const N: usize, D: Device>(
                a: &mut MemArray<Self, N, D>,
                s: &BackendStream<D::B>,
                lock: Option<LockId>,
            ) -> Result<()> {
                a.add_index(s, lock)
            }
            unsafe fn add_index_raw<const N: usize, D: Device>(
                d: &D,
                data: u64,
                shape: [i64; N],
                s: &BackendStream<D::B>,
            ) -> Result<()> {
                // SAFETY: forwarded contract.
                unsafe { crate::kernels::add_index_async::<D, $t, N>(d, data, shape, s) }
            }
        }
    };
    (@stored bytes $t:ty) => {
        impl Stored for $t {
            fn add_index<const N: usize, D: Device>(
                _: &mut MemArray<Self, N, D>,
                _: &BackendStream<D::B>,
                _: Option<LockId>,
            ) -> Result<()> {
                Err(no_kernel::<Self, D>())
            }
            unsafe fn add_index_raw<const N: usize, D: Device>(
                _: &D,
                _: u64,
                _: [i64; N],
                _: &BackendStream<D::B>,
            ) -> Result<()> {
                Err(no_kernel::<Self, D>())
            }
        }
    };
    ($d:tt $(
        $variant:ident => $t:ty, $name:literal, $code:ident $bits:literal,
        $numpy:ident $($typestr:literal)?, $kernels:ident, [$($alias:literal),*];
    )*) => {
        /// Every scalar element type of gpuport's [`Element`] implementations.
        ///
        /// Vector-lane types (`[f32; 4]`, DLPack lanes > 1) are not listed: NumPy and
        /// the other array libraries have no such dtype; a trailing axis of the lane
        /// type describes the same memory.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum DType {
            $(
                #[doc = concat!("`", $name, "`: `", stringify!($t), "`, DLPack `", stringify!($code), "` ", $bits, " bits.")]
                $variant,
            )*
        }

        impl DType {
            /// Every dtype, in the order error messages list them.
            pub const ALL: [DType; [$(DType::$variant),*].len()] = [$(DType::$variant),*];

            /// The NumPy-style name (`"float32"`, `"bfloat16"`, `"complex32"`).
            pub fn name(self) -> &'static str {
                match self { $(DType::$variant => $name,)* }
            }

            /// The DLPack data type (what `Element::DTYPE` says for the Rust type).
            pub const fn dlpack(self) -> DLDataType {
                match self { $(DType::$variant => DLDataType { code: DLDataTypeCode::$code, bits: $bits, lanes: 1 },)* }
            }

            /// The array-interface type string (`"<f4"`), where NumPy defines one;
            /// bfloat16, complex32 and the fp8/fp6/fp4 types have none.
            pub fn typestr(self) -> Option<&'static str> {
                match self { $(DType::$variant => dtypes!(@typestr $numpy $($typestr)?),)* }
            }

            /// Whether NumPy has this dtype only through ml_dtypes (bfloat16,
            /// the fp8/fp6/fp4 types), which names it as gpuport does.
            pub fn in_ml_dtypes(self) -> bool {
                match self { $(DType::$variant => dtypes!(@ml_dtypes $numpy),)* }
            }

            /// Whether the built-in arithmetic kernels (add_index, ...) exist for
            /// this dtype. The byte-moving ones (fill, copy_strided) take every dtype.
            pub fn has_kernels(self) -> bool {
                match self { $(DType::$variant => dtypes!(@kernels $kernels),)* }
            }

            /// The dtype of a name or another spelling NumPy, PyTorch or
            /// JAX use for it (`"single"`, `"f"`), without prefixes.
            fn by_name(n: &str) -> Option<DType> {
                match n {
                    $($name $(| $alias)* => Some(DType::$variant),)*
                    _ => None,
                }
            }
        }

        // The table's DLPack code and bits are those of the Rust type.
        const _: () = { $(
            let dt = <$t as Element>::DTYPE;
            assert!(dt.code.0 == DLDataTypeCode::$code.0 && dt.bits == $bits && dt.lanes == 1);
        )* };

        $(dtypes!(@stored $kernels $t);)*

        /// `with_dtype!(dt, T => body)`: evaluates `body` with `T` the Rust element
        /// type of the run-time [`DType`] `dt` (monomorphized once per dtype).
        macro_rules! with_dtype {
            ($d dt:expr, $d T:ident => $d body:expr) => {{
                use $d crate::array::dtype::DType as __D;
                match $d dt { $(
                    __D::$variant => {
                        #[allow(dead_code)]
                        type $d T = $t;
                        $d body
                    }
                )* }
            }};
        }
    };
}

dtype_table!($ dtypes);

impl DType {
    /// Whether this is a DLPack 1.1 low-precision float (fp8, fp6, fp4):
    /// NumPy has no dtype for these (ml_dtypes registers them), and the
    /// built-in arithmetic kernels do not take them.
    pub fn is_low_precision_float(self) -> bool {
        self.dlpack().code.since_minor() >= 1
    }

    /// Size of one element in bytes.
    pub fn itemsize(self) -> usize {
        with_dtype!(self, T => std::mem::size_of::<T>())
    }

    /// The dtype of a DLPack data type, if it is a scalar gpuport holds.
    pub fn from_dlpack(dt: DLDataType) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.dlpack() == dt)
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

    /// Parses a dtype name as NumPy, PyTorch, JAX and ml_dtypes spell it
    /// (`"float32"`, `"torch.float8_e4m3fn"`, `"single"`, `"<f4"`, `"f4"`).
    pub fn parse(name: &str) -> Option<DType> {
        // The names gpuport prints, as callers mostly pass them: one compare each.
        if let Some(d) = DType::ALL.into_iter().find(|d| d.name() == name) {
            return Some(d);
        }
        let n = name.trim().trim_start_matches("torch.").trim_start_matches("numpy.").trim_start_matches("jnp.");
        let n = n.trim_start_matches("dtype('").trim_end_matches("')");
        DType::by_name(n).or_else(|| DType::from_typestr(n))
    }

    /// The supported names, for error messages.
    pub fn supported() -> String {
        DType::ALL.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
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

// ---- elements of run-time arrays -------------------------------------------------

/// The element types of [`DType`] (the Python layer stores these), with
/// their kernels where the built-ins have one; the `dtypes!` table
/// implements it.
pub trait Stored: Element {
    /// `MemArray::add_index`, or `NoKernel` for types without the kernel.
    fn add_index<const N: usize, D: Device>(
        a: &mut MemArray<Self, N, D>,
        s: &BackendStream<D::B>,
        lock: Option<LockId>,
    ) -> Result<()>;

    /// `kernels::add_index_async` on raw memory.
    ///
    /// # Safety
    /// As for `crate::kernels::add_index_async`.
    unsafe fn add_index_raw<const N: usize, D: Device>(
        d: &D,
        data: u64,
        shape: [i64; N],
        s: &BackendStream<D::B>,
    ) -> Result<()>;
}

/// The error of an arithmetic kernel asked of an element type it has no
/// instantiation for: names the kernel and the type.
pub fn no_kernel_for(op: &'static str, dtype: &str, backend: BackendKind) -> Error {
    Error::NoKernel { op, dtype: dtype.into(), backend }
}

fn no_kernel<T: Element, D: Device>() -> Error {
    no_kernel_for("add_index", &dtype_name(T::DTYPE), <D::B as Backend>::KIND)
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

pub(crate) use {with_dtype, with_rank};

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

    /// Every spelling `parse` took before the table (written out here), to
    /// the same dtype.
    #[test]
    fn parse_takes_the_names_numpy_pytorch_and_jax_use() {
        let spellings: [(&[&str], DType); 16] = [
            (&["bool", "bool_", "?", "b1", "|b1"], DType::Bool),
            (&["int8", "i1", "b", "numpy.int8"], DType::Int8),
            (&["int16", "i2", "h", "short"], DType::Int16),
            (&["int32", "i4", "i", "<i4", "dtype('int32')"], DType::Int32),
            (&["int64", "i8", "l", "q", "long", "int"], DType::Int64),
            (&["uint8", "u1", "B"], DType::UInt8),
            (&["uint16", "u2", "H"], DType::UInt16),
            (&["uint32", "u4", "I"], DType::UInt32),
            (&["uint64", "u8", "L", "Q"], DType::UInt64),
            (&["float16", "f2", "e", "half"], DType::Float16),
            (&["bfloat16", "torch.bfloat16"], DType::BFloat16),
            (&["float32", "f4", "f", "single", "torch.float32", "jnp.float32", "=f4"], DType::Float32),
            (&["float64", "f8", "d", "double", "float"], DType::Float64),
            (&["complex32", "chalf"], DType::Complex32),
            (&["complex64", "c8", "F", "cfloat"], DType::Complex64),
            (&["complex128", "c16", "D", "cdouble", "complex"], DType::Complex128),
        ];
        for (names, d) in spellings {
            for n in names {
                assert_eq!(DType::parse(n), Some(d), "{n}");
            }
        }
        for n in [">f4", "float128", "f16", "", "torch.cfloat32"] {
            assert_eq!(DType::parse(n), None, "{n}");
        }
    }

    /// The `kernels` rows are the element types the built-in kernels are
    /// instantiated for (`src/backend/array_kernels.rs`): their `Stored`
    /// impls call the kernels (a compile error for a type without them),
    /// and there are as many as the backend has `scale` kernels.
    #[test]
    fn the_kernels_rows_are_the_backends_kernel_types() {
        let kernel_types = crate::backend::array_kernels::all_kernel_names()
            .iter()
            .filter(|n| n.starts_with("gpuport_scale_"))
            .count();
        assert_eq!(DType::ALL.iter().filter(|d| d.has_kernels()).count(), kernel_types);
    }

    /// `Error::NoKernel` (in the error layer, which cannot read this table)
    /// lists the `kernels` rows; runs of one family shown as `first..last`.
    #[test]
    fn the_no_kernel_message_lists_the_kernels_rows() {
        let names: Vec<&str> = DType::ALL.iter().filter(|d| d.has_kernels()).map(|d| d.name()).collect();
        let family = |n: &str| n.trim_end_matches(|c: char| c.is_ascii_digit()).to_string();
        let mut runs: Vec<Vec<&str>> = Vec::new();
        for n in names {
            match runs.last_mut() {
                Some(run) if family(run[0]) == family(n) => run.push(n),
                _ => runs.push(vec![n]),
            }
        }
        let listed: Vec<String> = runs
            .iter()
            .flat_map(|run| match run.len() {
                1 | 2 => run.iter().map(|n| n.to_string()).collect(),
                _ => vec![format!("{}..{}", run[0], run[run.len() - 1])],
            })
            .collect();
        let e = no_kernel_for("add_index", "bool", BackendKind::Host).to_string();
        assert!(e.contains(&format!("it runs on {} (", listed.join(", "))), "{e}");
    }

    #[test]
    fn numpy_has_each_dtype_by_typestr_or_ml_dtypes_or_not_at_all() {
        for d in DType::ALL {
            assert!(!(d.typestr().is_some() && d.in_ml_dtypes()), "{}", d.name());
            if let Some(t) = d.typestr() {
                assert_eq!(DType::from_typestr(t), Some(d));
                assert_eq!(t[2..].parse::<usize>().ok(), Some(d.itemsize()), "{}", d.name());
            }
        }
        let neither: Vec<DType> =
            DType::ALL.into_iter().filter(|d| d.typestr().is_none() && !d.in_ml_dtypes()).collect();
        assert_eq!(neither, [DType::Complex32]);
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
