//! The settings of a [`CachingPool`](super::CachingPool), and the
//! environment variables that give their defaults.

/// Settings of a [`CachingPool`](super::CachingPool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Most bytes the pool may hold from its storage; `None`: no limit.
    pub size_limit: Option<usize>,
    /// Cached bytes above which frees return free segments to the storage.
    /// `usize::MAX` (the default) keeps everything cached.
    pub release_threshold: usize,
    /// Bytes kept for idle pinned buffers by the pool's pinned host pool.
    pub pinned_cache: usize,
    /// Check the pool's whole bookkeeping on every allocation and free
    /// (slow; for debugging and tests). Default: whether the environment
    /// variable `GPUPORT_POOL_VALIDATE` is set (read once).
    pub validate: bool,
    /// Grow expandable segments (`expandable.rs`): one reserved range of
    /// addresses per size class, mapped at its end as the pool grows and
    /// unmapped as it trims, instead of many fixed segments. Where the
    /// device cannot, plain segments, and the report says why
    /// ([`PoolReport::expandable`](crate::memory::PoolReport::expandable)).
    /// Default: whether the environment variable `GPUPORT_POOL` is
    /// `expandable` (read once).
    pub expandable: bool,
    /// Bytes of addresses each expandable range reserves; `None`: half the
    /// device's memory (rounded up to the mapping granularity).
    pub expandable_reserve: Option<usize>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            size_limit: None,
            release_threshold: usize::MAX,
            pinned_cache: 1 << 30,
            validate: validate_env(),
            expandable: expandable_env(),
            expandable_reserve: None,
        }
    }
}

/// Whether `GPUPORT_POOL` is `expandable`. Read once.
fn expandable_env() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GPUPORT_POOL").is_ok_and(|v| v.trim().eq_ignore_ascii_case("expandable")))
}

/// Whether `GPUPORT_POOL_VALIDATE` is set. Read once.
fn validate_env() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("GPUPORT_POOL_VALIDATE").is_some())
}
