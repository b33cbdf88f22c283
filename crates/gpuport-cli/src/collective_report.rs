//! The report types of `gpuport bench --collective`: what the sweep was
//! asked to do and what it measured. Data only, so that the common report
//! (`bench.rs`) and the sweep (`collective.rs`) both stand on this file
//! and not on each other.

use serde::{Deserialize, Serialize};

/// Sizes and repetitions of one collective bench run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveConfig {
    /// Bytes per rank of each all-reduce, ascending (multiples of 4: float32).
    pub sizes: Vec<usize>,
    /// Timed repetitions per size (after one warm-up repetition).
    pub reps: u32,
    /// All-reduces (groups of every rank's call) per repetition.
    pub iters: u32,
    /// Bytes of the peer copy and of the copy within device 0.
    pub copy_bytes: usize,
    /// Copies per repetition.
    pub copy_batch: u32,
}

/// One size of the all-reduce sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectivePoint {
    /// Bytes per rank.
    pub bytes: u64,
    /// float32 elements per rank.
    pub count: u64,
    /// Timed repetitions.
    pub reps: u32,
    /// All-reduces per repetition.
    pub iters_per_rep: u32,
    /// Median time of one all-reduce, µs.
    pub time_us: f64,
    /// Best repetition's time per all-reduce, µs.
    pub time_us_best: f64,
    /// Worst repetition's time per all-reduce, µs.
    pub time_us_worst: f64,
    /// Algorithm bandwidth from the median time: bytes / time, GB/s (1e9 B/s).
    pub algbw_gb_per_s: f64,
    /// Bus bandwidth from the median time: algbw × 2(n−1)/n, GB/s.
    pub busbw_gb_per_s: f64,
    /// Bus bandwidth of the best repetition, GB/s.
    pub busbw_gb_per_s_best: f64,
}

/// The peer copy against the copy within the source device, in bytes
/// copied per second (half the read + written figures of the report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerCopy {
    /// The source device (`cuda:0`).
    pub src: String,
    /// The destination device (`cuda:1`).
    pub dst: String,
    /// Bytes per copy.
    pub bytes: u64,
    /// Whether `src` can address `dst`'s memory directly (peer access was
    /// enabled both ways where it can); without, the driver stages the copy.
    pub peer_access: bool,
    /// Median bytes copied per second src → dst, GB/s.
    pub gb_per_s: f64,
    /// Median bytes copied per second within `src`, GB/s (the ceiling).
    pub local_gb_per_s: f64,
    /// `gb_per_s / local_gb_per_s`.
    pub fraction_of_local: f64,
}

/// What `gpuport bench --collective` measured beyond the common figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveReport {
    /// The backend (`cuda`, `rocm`, `host`).
    pub backend: String,
    /// The engine's name and version (`NCCL 2.28.5`, `host`).
    pub engine: String,
    /// Each rank's device, by rank.
    pub devices: Vec<String>,
    /// The number of ranks, n.
    pub ranks: usize,
    /// The collective (`all_reduce(sum)`), in place.
    pub collective: String,
    /// The element type (`float32`).
    pub dtype: String,
    /// How the sweep was timed (`device-events`: from idle streams to the
    /// end of the batch on each rank's stream, the slowest rank's time).
    pub timing: String,
    /// Sizes and repetitions.
    pub config: CollectiveConfig,
    /// One point per size, ascending.
    pub points: Vec<CollectivePoint>,
    /// The peer copy rank 0 → rank 1, or `null` when it could not be taken
    /// (the reason is in the report's `skipped`).
    pub peer_copy: Option<PeerCopy>,
}
