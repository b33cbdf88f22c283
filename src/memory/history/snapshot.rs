//! A snapshot: every current resource's segments, block by block with the
//! stack of each live block recorded, and the history's entries; written as
//! the pickle PyTorch's memory viewer reads (`torch.cuda.memory._snapshot`'s
//! `segments` and `device_traces`).

use std::path::Path;
use std::sync::Arc;

use crate::error::BackendKind;
use crate::memory::report::{BlockState, PoolReport};

use super::pickle::{to_pickle, Value};
use super::{entries, frames_of, DeviceKey, Frame, TraceEntry};

/// What a block of a snapshot is doing, as PyTorch names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotBlockState {
    /// Handed out (`active_allocated`).
    ActiveAllocated,
    /// Freed, waiting for events of its last uses (`active_awaiting_free`).
    ActiveAwaitingFree,
    /// Free for reuse (`inactive`).
    Inactive,
}

impl SnapshotBlockState {
    /// PyTorch's name.
    pub fn name(self) -> &'static str {
        match self {
            SnapshotBlockState::ActiveAllocated => "active_allocated",
            SnapshotBlockState::ActiveAwaitingFree => "active_awaiting_free",
            SnapshotBlockState::Inactive => "inactive",
        }
    }
}

/// One block of a segment.
#[derive(Debug, Clone)]
pub struct BlockSnapshot {
    /// Device address.
    pub address: u64,
    /// Bytes the block covers.
    pub size: usize,
    /// Bytes asked for (0 unless allocated).
    pub requested_size: usize,
    /// State.
    pub state: SnapshotBlockState,
    /// The allocation's stack, if it was recorded.
    pub frames: Arc<[Frame]>,
}

/// One segment of a pool.
#[derive(Debug, Clone)]
pub struct SegmentSnapshot {
    /// The device.
    pub device: DeviceKey,
    /// Device address.
    pub address: u64,
    /// Bytes (of an expandable segment: the bytes mapped).
    pub total_size: usize,
    /// The id of the stream whose allocation made it (0 for none).
    pub stream: u64,
    /// Of the pool's small class (PyTorch's `segment_type` `"small"`),
    /// else `"large"`.
    pub small: bool,
    /// An expandable segment (`is_expandable`).
    pub expandable: bool,
    /// PyTorch's `segment_pool_id`: `(0, 0)` for the pool's shared memory,
    /// `(capture id, 0)` for a graph pool's segment, as PyTorch names the
    /// private pool of a capture made without `pool=`.
    pub pool_id: (u64, u64),
    /// Bytes in allocated blocks.
    pub allocated_size: usize,
    /// Bytes in allocated blocks and blocks awaiting their events.
    pub active_size: usize,
    /// Bytes asked for by the allocated blocks.
    pub requested_size: usize,
    /// Its blocks, in address order.
    pub blocks: Vec<BlockSnapshot>,
}

/// Segments and history; see [`snapshot`].
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Every segment of the pools seen.
    pub segments: Vec<SegmentSnapshot>,
    /// The history's entries, oldest first.
    pub traces: Vec<TraceEntry>,
}

/// The segments of every device's current resource (those that report
/// segments: caching pools) and the recorded entries; with `backend`, only
/// that backend's.
pub fn snapshot(backend: Option<BackendKind>) -> Snapshot {
    let mut s = Snapshot::default();
    for (device, report) in crate::memory::current::current_reports() {
        if backend.is_none_or(|b| b == device.backend) {
            s.add_pool(device, &report);
        }
    }
    s.traces = entries().into_iter().filter(|e| backend.is_none_or(|b| b == e.device.backend)).collect();
    s
}

impl Snapshot {
    /// The entries and the segments of one pool's `report` (what an
    /// out-of-memory observer has at hand).
    pub fn of_pool(device: DeviceKey, report: &PoolReport) -> Snapshot {
        let mut s = Snapshot { segments: Vec::new(), traces: entries() };
        s.add_pool(device, report);
        s
    }

    /// Adds the segments of a pool's report.
    pub fn add_pool(&mut self, device: DeviceKey, report: &PoolReport) {
        for seg in &report.segment_map {
            let mut out = SegmentSnapshot {
                device,
                address: seg.address,
                total_size: seg.size,
                stream: seg.stream,
                small: seg.small,
                expandable: seg.expandable,
                pool_id: (seg.graph_capture.unwrap_or(0), 0),
                allocated_size: 0,
                active_size: 0,
                requested_size: 0,
                blocks: Vec::with_capacity(seg.blocks.len()),
            };
            for b in &seg.blocks {
                let address = seg.address + b.offset as u64;
                let (state, requested) = match b.state {
                    BlockState::Allocated { requested } => (SnapshotBlockState::ActiveAllocated, requested),
                    BlockState::Pending => (SnapshotBlockState::ActiveAwaitingFree, 0),
                    BlockState::FreeForAnyStream | BlockState::FreeForStream(_) => (SnapshotBlockState::Inactive, 0),
                };
                let frames = match state {
                    SnapshotBlockState::ActiveAllocated => frames_of(device, address).unwrap_or_else(|| Arc::from([])),
                    _ => Arc::from([]),
                };
                if state == SnapshotBlockState::ActiveAllocated {
                    out.allocated_size += b.size;
                    out.requested_size += requested;
                }
                if state != SnapshotBlockState::Inactive {
                    out.active_size += b.size;
                }
                out.blocks.push(BlockSnapshot { address, size: b.size, requested_size: requested, state, frames });
            }
            self.segments.push(out);
        }
    }

    /// The entries of each device ordinal, `device_traces[ordinal]` as
    /// PyTorch lays them out (devices of several backends with one ordinal
    /// share a list; [`snapshot`]'s `backend` keeps them apart).
    pub fn device_traces(&self) -> Vec<Vec<&TraceEntry>> {
        let count = self
            .traces
            .iter()
            .map(|e| e.device.ordinal + 1)
            .chain(self.segments.iter().map(|s| s.device.ordinal + 1))
            .max()
            .unwrap_or(0);
        let mut out = vec![Vec::new(); count];
        for e in &self.traces {
            out[e.device.ordinal].push(e);
        }
        out
    }

    /// The snapshot as a pickle of PyTorch's snapshot dict.
    pub fn to_pickle(&self) -> Vec<u8> {
        to_pickle(&self.to_value())
    }

    /// Writes [`to_pickle`](Self::to_pickle) to `path` (the history is
    /// kept whatever happens).
    pub fn write_pickle(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_pickle())
    }

    fn to_value(&self) -> Value {
        let segments = self.segments.iter().map(segment_value).collect();
        let traces = self
            .device_traces()
            .into_iter()
            .map(|list| Value::List(list.into_iter().map(entry_value).collect()))
            .collect();
        Value::Dict(vec![("segments", Value::List(segments)), ("device_traces", Value::List(traces))])
    }
}

fn frames_value(frames: &[Frame]) -> Value {
    Value::List(
        frames
            .iter()
            .map(|f| {
                Value::Dict(vec![
                    ("filename", f.filename.as_str().into()),
                    ("line", f.line.into()),
                    ("name", f.name.as_str().into()),
                ])
            })
            .collect(),
    )
}

fn segment_value(s: &SegmentSnapshot) -> Value {
    let blocks = s
        .blocks
        .iter()
        .map(|b| {
            Value::Dict(vec![
                ("address", b.address.into()),
                ("size", b.size.into()),
                ("requested_size", b.requested_size.into()),
                ("state", b.state.name().into()),
                ("frames", frames_value(&b.frames)),
            ])
        })
        .collect();
    Value::Dict(vec![
        ("device", s.device.ordinal.into()),
        ("device_spec", s.device.spec().into()),
        ("address", s.address.into()),
        ("total_size", s.total_size.into()),
        ("allocated_size", s.allocated_size.into()),
        ("active_size", s.active_size.into()),
        ("requested_size", s.requested_size.into()),
        ("stream", s.stream.into()),
        ("segment_type", if s.small { "small" } else { "large" }.into()),
        ("segment_pool_id", Value::Tuple(vec![s.pool_id.0.into(), s.pool_id.1.into()])),
        ("is_expandable", Value::Bool(s.expandable)),
        ("frames", Value::List(Vec::new())),
        ("blocks", Value::List(blocks)),
    ])
}

fn entry_value(e: &TraceEntry) -> Value {
    let mut d = vec![
        ("action", e.action.name().into()),
        ("addr", e.addr.into()),
        ("size", e.size.into()),
        ("stream", e.stream.into()),
        ("time_us", e.time_us.into()),
        ("device_spec", e.device.spec().into()),
        ("frames", frames_value(&e.frames)),
    ];
    if e.action == super::Action::Oom {
        d.push(("device_free", e.device_free.into()));
    }
    Value::Dict(d)
}
