//! [`ArrayIndexer`]: a data pointer plus a shape, passed by value to kernels.
//!
//! The C twin is `kernels/common/array_indexer.h` (`GPUPORT_ARRAY_INDEXER`
//! in C, `gpuport::ArrayIndexer<T, N>` in C++/CUDA/HIP); `tests/indexer_c_layout.rs`
//! compiles it with the system C compiler and checks that sizes and field
//! offsets match this type.

use std::fmt;

/// A row-major indexer over `N`-dimensional data: base pointer and extents.
///
/// Layout (`#[repr(C)]`, the same as the C header): `T* data; int64_t shape[N];`.
/// The size is not stored (docs/design.md#arrayindexer: one register less per kernel
/// thread); [`size`](Self::size) multiplies the extents.
///
/// The indexer never dereferences its pointer: it computes offsets and
/// addresses. Reading or writing through them is the caller's (`unsafe`)
/// business, usually a kernel's. An indexer from
/// [`MemArray::indexer`](super::MemArray::indexer) holds a host or device
/// address valid while the array is neither dropped nor moved elsewhere.
///
/// Invariants: every extent is `>= 0` and the product of the extents fits in
/// `i64` (checked by [`new`](Self::new)).
#[repr(C)]
pub struct ArrayIndexer<T, const N: usize> {
    data: *mut T,
    shape: [i64; N],
}

// Manual impls: `derive` would require `T: Copy`/`T: Clone`, but copying an
// indexer copies a pointer, never a `T`.
impl<T, const N: usize> Clone for ArrayIndexer<T, N> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, const N: usize> Copy for ArrayIndexer<T, N> {}

impl<T, const N: usize> fmt::Debug for ArrayIndexer<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArrayIndexer").field("data", &self.data).field("shape", &self.shape).finish()
    }
}

impl<T, const N: usize> PartialEq for ArrayIndexer<T, N> {
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data && self.shape == other.shape
    }
}
impl<T, const N: usize> Eq for ArrayIndexer<T, N> {}

// SAFETY: the indexer is an address and a shape; it gives no access to `T`
// by itself (every dereference is the caller's unsafe code), so moving it to
// another thread is as safe as moving a `usize`.
unsafe impl<T: Send, const N: usize> Send for ArrayIndexer<T, N> {}
// SAFETY: as above; `&ArrayIndexer` only reads the address and the shape.
unsafe impl<T: Sync, const N: usize> Sync for ArrayIndexer<T, N> {}

impl<T, const N: usize> ArrayIndexer<T, N> {
    /// `[size_of, offset_of(data), offset_of(shape)]`, for checking the C
    /// twin's layout (the fields themselves are private).
    #[doc(hidden)]
    pub const LAYOUT: [usize; 3] =
        [std::mem::size_of::<Self>(), std::mem::offset_of!(Self, data), std::mem::offset_of!(Self, shape)];

    /// An indexer over `shape` starting at `data`.
    ///
    /// Returns `None` if an extent is negative or the size overflows `i64`.
    /// Creating an indexer is safe; using its addresses is not.
    pub fn new(data: *mut T, shape: [i64; N]) -> Option<Self> {
        let mut size: i64 = 1;
        for &e in &shape {
            if e < 0 {
                return None;
            }
            size = size.checked_mul(e)?;
        }
        Some(ArrayIndexer { data, shape })
    }

    /// The base address.
    pub fn data(&self) -> *mut T {
        self.data
    }

    /// The extents.
    pub fn shape(&self) -> [i64; N] {
        self.shape
    }

    /// The number of elements (the product of the extents; 1 when `N == 0`).
    pub fn size(&self) -> i64 {
        self.shape.iter().product()
    }

    /// The row-major linear index of `indices`, or `None` if any index is
    /// outside its extent.
    pub fn linear(&self, indices: [i64; N]) -> Option<i64> {
        let mut index = 0i64;
        for (axis, &i) in indices.iter().enumerate() {
            let extent = self.shape[axis];
            if i < 0 || i >= extent {
                return None;
            }
            // Cannot overflow: index < product of the extents seen so far,
            // which fits in i64 by the invariant.
            index = index * extent + i;
        }
        Some(index)
    }

    /// The index tuple of row-major linear index `linear`, or `None` if it is
    /// outside `0..size()`.
    pub fn indices(&self, linear: i64) -> Option<[i64; N]> {
        if linear < 0 || linear >= self.size() {
            return None;
        }
        let mut rest = linear;
        let mut out = [0i64; N];
        for axis in (0..N).rev() {
            let extent = self.shape[axis];
            out[axis] = rest % extent;
            rest /= extent;
        }
        Some(out)
    }

    /// The address of the element at `indices`, or `None` if out of bounds.
    /// Computed with wrapping arithmetic; it is only meaningful in the
    /// address space the data lives in (host or device).
    pub fn address_of(&self, indices: [i64; N]) -> Option<*mut T> {
        let linear = self.linear(indices)?;
        Some(self.data.wrapping_add(usize::try_from(linear).ok()?))
    }
}
