//! An opt-in history of the caching pools' allocations, frees, segments and
//! out-of-memory failures, with a stack for each, kept in a bounded ring
//! (PyTorch's `_record_memory_history`). [`snapshot`] joins it with every
//! current resource's segments; [`Snapshot::to_pickle`] writes the file
//! PyTorch's memory viewer (`torch.cuda._memory_viz`, pytorch.org/memory_viz)
//! reads.
//!
//! While recording is off, the pool's only cost is one relaxed atomic load
//! per allocation and free ([`recording`]; `benches/memory.rs` times
//! alloc+free with recording off and on).
//!
//! Stacks: a [`FrameSource`] set with [`set_frame_source`] (the Python
//! package sets one that returns the Python frames, only while it records),
//! and, with [`HistoryConfig::rust_backtrace`], the Rust backtrace (slow:
//! microseconds a frame). Segment events carry no stack: they are recorded
//! under the pool's lock, where no foreign code may run.
//!
//! ```
//! use gpuport::memory::{history, Allocator, CachingPool, PoolConfig};
//! use gpuport::{Device, Host, HostDevice};
//!
//! let d = HostDevice::open(0)?;
//! let pool = Allocator::<Host>::new(CachingPool::new(d.clone(), PoolConfig::default()));
//! history::start(history::HistoryConfig::default());
//! drop(pool.alloc(4096, d.default_stream())?);
//! history::stop();
//! let actions: Vec<_> = history::entries().iter().map(|e| e.action).collect();
//! assert!(actions.contains(&history::Action::Alloc));
//! # history::clear();
//! # Ok::<(), gpuport::Error>(())
//! ```

mod pickle;
mod snapshot;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::BackendKind;

pub use snapshot::{snapshot, BlockSnapshot, SegmentSnapshot, Snapshot, SnapshotBlockState};

/// What a [`TraceEntry`] records; the names are PyTorch's trace actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// A block handed out (`alloc`).
    Alloc,
    /// A block given back by its user (`free_requested`).
    FreeRequested,
    /// The pool took the block back (`free_completed`; recorded with the
    /// request: the pool files a freed block at once, and its own events
    /// gate reuse on other streams).
    FreeCompleted,
    /// A plain segment taken from the storage (`segment_alloc`).
    SegmentAlloc,
    /// A plain segment given back to the storage (`segment_free`).
    SegmentFree,
    /// Memory mapped at the end of an expandable segment (`segment_map`):
    /// the address and size of the part mapped.
    SegmentMap,
    /// Memory unmapped from the end of an expandable segment
    /// (`segment_unmap`): the address and size of the part unmapped.
    SegmentUnmap,
    /// An allocation the pool could not serve after its retry (`oom`).
    Oom,
}

impl Action {
    /// PyTorch's name of the action.
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Oom => "oom",
        }
    }
}

/// One frame of a stack, innermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Source file.
    pub filename: String,
    /// Line in it (0 where unknown).
    pub line: u32,
    /// Function.
    pub name: String,
}

/// Returns the caller's stack, innermost frame first.
pub type FrameSource = Arc<dyn Fn() -> Vec<Frame> + Send + Sync>;

/// A device as the history names it: its backend and ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceKey {
    /// The backend.
    pub backend: BackendKind,
    /// The device's ordinal.
    pub ordinal: usize,
}

impl DeviceKey {
    /// The spec that opens the device (`"cuda:0"`, `"host"`).
    pub fn spec(&self) -> String {
        match self.backend {
            BackendKind::Host => "host".to_string(),
            b => format!("{b}:{}", self.ordinal),
        }
    }
}

/// One recorded event.
#[derive(Debug, Clone)]
pub struct TraceEntry {
    /// What happened.
    pub action: Action,
    /// Where.
    pub device: DeviceKey,
    /// Block or segment address (0 for [`Action::Oom`]).
    pub addr: u64,
    /// Bytes: asked for (alloc, free, oom) or the segment's size.
    pub size: usize,
    /// The backend's stream id (0 where it has none).
    pub stream: u64,
    /// Microseconds since the Unix epoch.
    pub time_us: u64,
    /// The stack, innermost first (empty for segment events).
    pub frames: Arc<[Frame]>,
    /// Device memory free when an allocation failed ([`Action::Oom`] only).
    pub device_free: usize,
}

/// Settings of a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryConfig {
    /// Most entries kept; the oldest go first (PyTorch's `max_entries`).
    pub max_entries: usize,
    /// Record the Rust backtrace with each allocation, free and failure
    /// (`std::backtrace::Backtrace::force_capture`; microseconds each).
    pub rust_backtrace: bool,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig { max_entries: 100_000, rust_backtrace: false }
    }
}

static RECORDING: AtomicBool = AtomicBool::new(false);

struct Recorder {
    config: HistoryConfig,
    entries: VecDeque<TraceEntry>,
    /// The stack of each live block allocated while recording, for the
    /// snapshot's blocks.
    live: HashMap<(DeviceKey, u64), Arc<[Frame]>>,
}

fn recorder() -> &'static Mutex<Recorder> {
    static RECORDER: OnceLock<Mutex<Recorder>> = OnceLock::new();
    RECORDER.get_or_init(|| {
        Mutex::new(Recorder { config: HistoryConfig::default(), entries: VecDeque::new(), live: HashMap::new() })
    })
}

fn lock_recorder() -> std::sync::MutexGuard<'static, Recorder> {
    recorder().lock().unwrap_or_else(|p| p.into_inner())
}

static FRAME_SOURCE: RwLock<Option<FrameSource>> = RwLock::new(None);

/// Starts (or goes on) recording with `config`; entries recorded before are
/// kept (the oldest dropped if `max_entries` shrank).
pub fn start(config: HistoryConfig) {
    let mut r = lock_recorder();
    r.config = HistoryConfig { max_entries: config.max_entries.max(1), ..config };
    let max = r.config.max_entries;
    while r.entries.len() > max {
        r.entries.pop_front();
    }
    RECORDING.store(true, Ordering::Relaxed);
}

/// Stops recording; what was recorded stays until [`clear`].
pub fn stop() {
    RECORDING.store(false, Ordering::Relaxed);
}

/// Forgets every entry and every live block's stack.
pub fn clear() {
    let mut r = lock_recorder();
    r.entries.clear();
    r.live.clear();
}

/// Whether recording is on: one relaxed atomic load, the pools' whole cost
/// while it is off.
#[inline(always)]
pub fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

/// Sets (or, with `None`, removes) the source of every recorded stack. It
/// is called on the allocating thread with no lock of a pool held.
pub fn set_frame_source(source: Option<FrameSource>) {
    *FRAME_SOURCE.write().unwrap_or_else(|p| p.into_inner()) = source;
}

/// The entries recorded, oldest first.
pub fn entries() -> Vec<TraceEntry> {
    lock_recorder().entries.iter().cloned().collect()
}

/// The recorded stack of the live block at `addr` of `device`, if any.
pub(crate) fn frames_of(device: DeviceKey, addr: u64) -> Option<Arc<[Frame]>> {
    lock_recorder().live.get(&(device, addr)).cloned()
}

fn now_us() -> u64 {
    let us = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0);
    u64::try_from(us).unwrap_or(u64::MAX)
}

/// The caller's stack: the frame source's frames, then the Rust backtrace
/// if the recording asks for it.
fn capture_frames(rust_backtrace: bool) -> Arc<[Frame]> {
    let source = FRAME_SOURCE.read().unwrap_or_else(|p| p.into_inner()).clone();
    let mut frames = source.map(|s| s()).unwrap_or_default();
    if rust_backtrace {
        frames.extend(parse_backtrace(&std::backtrace::Backtrace::force_capture().to_string()));
    }
    frames.into()
}

/// Frames of a `Backtrace`'s text (`  N: name` lines, each followed by an
/// `at file:line:col` line where known).
fn parse_backtrace(text: &str) -> Vec<Frame> {
    let mut frames: Vec<Frame> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(at) = line.strip_prefix("at ") {
            if let Some(last) = frames.last_mut() {
                let mut parts = at.rsplitn(3, ':');
                let (_col, line_no, file) = (parts.next(), parts.next(), parts.next());
                if let (Some(file), Some(Ok(n))) = (file, line_no.map(str::parse)) {
                    last.filename = file.to_string();
                    last.line = n;
                }
            }
        } else if let Some((index, name)) = line.split_once(": ") {
            if index.chars().all(|c| c.is_ascii_digit()) {
                frames.push(Frame { filename: String::new(), line: 0, name: name.to_string() });
            }
        }
    }
    frames
}

fn push(r: &mut Recorder, entry: TraceEntry) {
    if r.entries.len() >= r.config.max_entries {
        r.entries.pop_front();
    }
    r.entries.push_back(entry);
}

/// Records a block event (alloc, free or oom) with the caller's stack.
/// Call only with no lock of a pool held: the frame source may run foreign
/// code.
#[cold]
#[inline(never)]
pub(crate) fn record_block(action: Action, device: DeviceKey, addr: u64, size: usize, stream: u64) {
    let rust_backtrace = lock_recorder().config.rust_backtrace;
    let frames = capture_frames(rust_backtrace);
    let entry = TraceEntry { action, device, addr, size, stream, time_us: now_us(), frames, device_free: 0 };
    let mut r = lock_recorder();
    match action {
        Action::Alloc => {
            r.live.insert((device, addr), entry.frames.clone());
            push(&mut r, entry);
        }
        Action::FreeRequested | Action::FreeCompleted => {
            r.live.remove(&(device, addr));
            push(&mut r, TraceEntry { action: Action::FreeRequested, ..entry.clone() });
            push(&mut r, TraceEntry { action: Action::FreeCompleted, ..entry });
        }
        _ => push(&mut r, entry),
    }
}

/// Records an out-of-memory failure of `size` bytes.
#[cold]
#[inline(never)]
pub(crate) fn record_oom(device: DeviceKey, size: usize, stream: u64, device_free: usize) {
    let rust_backtrace = lock_recorder().config.rust_backtrace;
    let frames = capture_frames(rust_backtrace);
    let entry =
        TraceEntry { action: Action::Oom, device, addr: 0, size, stream, time_us: now_us(), frames, device_free };
    push(&mut lock_recorder(), entry);
}

/// Records a segment event, without a stack (it runs under a pool's lock).
#[cold]
#[inline(never)]
pub(crate) fn record_segment(action: Action, device: DeviceKey, addr: u64, size: usize, stream: u64) {
    let entry =
        TraceEntry { action, device, addr, size, stream, time_us: now_us(), frames: Arc::from([]), device_free: 0 };
    push(&mut lock_recorder(), entry);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backtrace_text_becomes_frames_with_files_and_lines() {
        let text = "   0: gpuport::memory::pool::alloc\n             at ./src/memory/pool/mod.rs:12:5\n   1: main\n";
        let frames = parse_backtrace(text);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].name, "gpuport::memory::pool::alloc");
        assert_eq!(frames[0].filename, "./src/memory/pool/mod.rs");
        assert_eq!(frames[0].line, 12);
        assert_eq!(frames[1].name, "main");
        assert_eq!(frames[1].line, 0);
    }
}
