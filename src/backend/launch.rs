//! What a kernel launch takes: its grid and block ([`LaunchConfig`]), its
//! arguments packed by value ([`KernelArgs`] of [`KernelArg`] values), and
//! the check of those arguments against a kernel's parameter sizes.

use std::fmt;

use super::graph::Owner;
use super::{DeviceLimits, DeviceMemory};
use crate::error::{Error, Result};

/// Grid, block and dynamic shared memory of a kernel launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks along x, y, z.
    pub grid: [u32; 3],
    /// Threads per block along x, y, z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// A 1-D launch of `grid` blocks of `block` threads.
    pub fn linear(grid: u32, block: u32) -> Self {
        LaunchConfig { grid: [grid, 1, 1], block: [block, 1, 1], shared_mem_bytes: 0 }
    }

    /// A 1-D launch covering `n` threads with blocks of `block` threads.
    ///
    /// ```
    /// let cfg = gpuport::LaunchConfig::for_elements(1000, 256).unwrap();
    /// assert_eq!(cfg.grid[0], 4);
    /// ```
    pub fn for_elements(n: usize, block: u32) -> Result<Self> {
        if block == 0 {
            return Err(Error::InvalidArgument { name: "block", reason: "must be at least 1".into() });
        }
        let blocks = n.div_ceil(block as usize).max(1);
        let grid = u32::try_from(blocks).map_err(|_| Error::InvalidArgument {
            name: "n",
            reason: format!("{n} elements need {blocks} blocks of {block}, more than a grid holds"),
        })?;
        Ok(Self::linear(grid, block))
    }

    /// Total threads launched.
    pub fn total_threads(&self) -> u64 {
        let g: u64 = self.grid.iter().map(|&x| u64::from(x)).product();
        let b: u64 = self.block.iter().map(|&x| u64::from(x)).product();
        g * b
    }

    /// Checks the configuration against a device's limits.
    pub fn validate(&self, limits: &DeviceLimits) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidArgument { name: "launch config", reason });
        if self.grid.contains(&0) || self.block.contains(&0) {
            return bad(format!(
                "grid {:?} and block {:?} must be at least 1 in every dimension",
                self.grid, self.block
            ));
        }
        let threads: u64 = self.block.iter().map(|&x| u64::from(x)).product();
        if threads > u64::from(limits.max_threads_per_block) {
            return bad(format!("{threads} threads per block; the device allows {}", limits.max_threads_per_block));
        }
        for d in 0..3 {
            if self.block[d] > limits.max_block_dim[d] || self.grid[d] > limits.max_grid_dim[d] {
                return bad(format!(
                    "grid {:?} / block {:?} exceed the device's maxima {:?} / {:?}",
                    self.grid, self.block, limits.max_grid_dim, limits.max_block_dim
                ));
            }
        }
        if self.shared_mem_bytes as usize > limits.max_shared_memory_per_block {
            return bad(format!(
                "{} bytes of dynamic shared memory; the device allows {} per block",
                self.shared_mem_bytes, limits.max_shared_memory_per_block
            ));
        }
        Ok(())
    }
}

/// A value that can be passed to a kernel by value.
///
/// # Safety
/// The type must be `#[repr(C)]` (or a primitive) with no padding whose
/// every bit pattern is a valid value, and have the same layout as the
/// kernel parameter it is passed for.
pub unsafe trait KernelArg: Copy + Send + 'static {}

macro_rules! impl_kernel_arg {
    ($($t:ty),*) => { $(
        // SAFETY: primitives are plain bytes with C layout.
        unsafe impl KernelArg for $t {}
    )* };
}
impl_kernel_arg!(u8, i8, u16, i16, u32, i32, u64, i64, usize, isize, f32, f64);

/// The arguments of one kernel launch, packed by value.
///
/// Each argument is copied into the list, so the list owns what the launch
/// reads; device buffers are passed as their device address.
///
/// ```
/// let mut args = gpuport::KernelArgs::new();
/// args.push(&42u32).push(&1.5f32);
/// assert_eq!(args.len(), 2);
/// assert_eq!(args.get::<u32>(0), Some(42));
/// ```
#[derive(Default)]
pub struct KernelArgs {
    /// Argument bytes; each argument starts at a 16-byte aligned offset so a
    /// pointer into it is aligned for any kernel parameter type.
    words: Vec<u128>,
    /// (byte offset into `words`, size in bytes) per argument.
    spans: Vec<(usize, usize)>,
    /// Owners of the buffers the arguments name (see [`push_buffer`](Self::push_buffer)).
    owners: Vec<Owner>,
}

impl Clone for KernelArgs {
    /// Every host launch clones its arguments into the queued task, and
    /// most lists have no owners (nothing pushed with `push_buffer`), some
    /// no arguments at all: an empty vector is made new, without
    /// `Vec::clone`'s size arithmetic.
    #[inline]
    fn clone(&self) -> Self {
        fn copy<T: Clone>(v: &[T]) -> Vec<T> {
            if v.is_empty() {
                Vec::new()
            } else {
                v.to_vec()
            }
        }
        KernelArgs { words: copy(&self.words), spans: copy(&self.spans), owners: copy(&self.owners) }
    }
}

impl KernelArgs {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty list with room for `args` arguments of up to 16 bytes each
    /// without reallocating (a launch from Python knows its count up front).
    pub fn with_capacity(args: usize) -> Self {
        KernelArgs { words: Vec::with_capacity(args), spans: Vec::with_capacity(args), owners: Vec::new() }
    }

    /// Appends a by-value argument.
    pub fn push<T: KernelArg>(&mut self, value: &T) -> &mut Self {
        let size = std::mem::size_of::<T>();
        let offset = self.words.len() * 16;
        let add = size.div_ceil(16).max(1);
        self.words.resize(self.words.len() + add, 0);
        // SAFETY: `words` has at least `size` bytes from `offset` (just
        // resized), `T: KernelArg` is plain bytes, and the regions cannot
        // overlap because `value` is a shared borrow of a different object.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::from_ref(value).cast::<u8>(),
                self.words.as_mut_ptr().cast::<u8>().add(offset),
                size,
            );
        }
        self.spans.push((offset, size));
        self
    }

    /// Appends an argument given as raw bytes (e.g. a fill value of any
    /// plain-data type); the kernel must take a parameter of that size.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> &mut Self {
        let offset = self.words.len() * 16;
        self.words.resize(self.words.len() + bytes.len().div_ceil(16).max(1), 0);
        bytemuck::cast_slice_mut::<u128, u8>(&mut self.words)[offset..offset + bytes.len()].copy_from_slice(bytes);
        self.spans.push((offset, bytes.len()));
        self
    }

    /// The bytes of argument `index`.
    pub fn bytes(&self, index: usize) -> Option<&[u8]> {
        let &(offset, size) = self.spans.get(index)?;
        Some(&bytemuck::cast_slice::<u128, u8>(&self.words)[offset..offset + size])
    }

    /// Appends a buffer's device address, and keeps the buffer's
    /// [`owner`](DeviceMemory::owner), where it has one, with the arguments:
    /// the host backend holds it until the launch has run, and a graph that
    /// captures the launch holds it as long as the graph (see [`graph`](super::graph)).
    pub fn push_buffer<M: DeviceMemory + ?Sized>(&mut self, buffer: &M) -> &mut Self {
        if let Some(owner) = buffer.owner() {
            self.owners.push(owner);
        }
        self.push(&buffer.device_ptr())
    }

    /// Keeps `owner` with the arguments, for memory whose address was
    /// pushed as a plain integer: a graph capturing the launch keeps it
    /// alive as long as the graph.
    pub fn keep_alive(&mut self, owner: Owner) -> &mut Self {
        self.owners.push(owner);
        self
    }

    /// The owners kept with the arguments.
    #[cfg_attr(not(any(feature = "cuda", feature = "rocm")), allow(dead_code))]
    pub(crate) fn owners(&self) -> &[Owner] {
        &self.owners
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Size in bytes of each argument, in order.
    pub fn sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.spans.iter().map(|&(_, s)| s)
    }

    /// Reads argument `index` back as a `T`, if it has exactly `T`'s size.
    pub fn get<T: KernelArg>(&self, index: usize) -> Option<T> {
        let &(offset, size) = self.spans.get(index)?;
        if size != std::mem::size_of::<T>() {
            return None;
        }
        // SAFETY: the span lies inside `words` (built by `push`) and holds
        // exactly `size_of::<T>()` initialized bytes; `KernelArg` types accept
        // every bit pattern, and `read_unaligned` needs no alignment.
        Some(unsafe { std::ptr::read_unaligned(self.words.as_ptr().cast::<u8>().add(offset).cast::<T>()) })
    }

    /// Writes a pointer to each argument into `out` (of length `self.len()`),
    /// as `cuLaunchKernel`/`hipModuleLaunchKernel` want them. The pointers are
    /// valid while `self` is neither moved nor modified.
    #[cfg_attr(not(any(feature = "cuda", feature = "rocm")), allow(dead_code))]
    pub(crate) fn fill_param_pointers(&self, out: &mut [*mut std::ffi::c_void]) {
        debug_assert_eq!(out.len(), self.spans.len());
        let base = self.words.as_ptr() as *mut u8;
        for (slot, &(offset, _)) in out.iter_mut().zip(&self.spans) {
            // SAFETY: offset < words.len() * 16 by construction.
            *slot = unsafe { base.add(offset) }.cast::<std::ffi::c_void>();
        }
    }
}

impl fmt::Debug for KernelArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelArgs")
            .field("sizes", &self.sizes().collect::<Vec<_>>())
            .field("owners", &self.owners.len())
            .finish()
    }
}

/// Checks launch arguments against the parameter sizes a kernel declares.
pub(crate) fn check_kernel_args(kernel: &str, params: &[usize], args: &KernelArgs) -> Result<()> {
    if params.len() != args.len() {
        return Err(Error::KernelArguments {
            kernel: kernel.to_string(),
            reason: format!("takes {} arguments, {} were given", params.len(), args.len()),
        });
    }
    for (i, (want, got)) in params.iter().zip(args.sizes()).enumerate() {
        if *want != got {
            return Err(Error::KernelArguments {
                kernel: kernel.to_string(),
                reason: format!("argument {i} is {want} bytes in the kernel, {got} bytes were given"),
            });
        }
    }
    Ok(())
}
