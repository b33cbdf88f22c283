//! What a capturing host stream holds: the nodes it has captured, in
//! order. Below both the stream (`stream.rs`, which pushes its work here
//! while a capture runs) and the graph (`graph.rs`, which begins, ends and
//! replays captures).

use std::sync::Arc;

use crate::backend::graph::Recorder;
use crate::error::{graph_error, BackendKind, Error, GraphErrorKind, Result};

/// What a node does, for [`GraphExec::update`](crate::GraphExec::update)'s shape check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NodeKind {
    Copy,
    Memset,
    Kernel(&'static str),
    EventRecord,
    EventWait,
    /// A graph replay (never inside a capture: refused).
    Replay,
}

pub(super) type NodeFn = Arc<dyn Fn() + Send + Sync>;

/// A capture running on a host stream.
pub(super) struct HostCapture {
    /// Process-unique, to tell which capture an event was recorded in.
    pub(super) id: u64,
    pub(super) nodes: Vec<(NodeKind, NodeFn)>,
    /// Why the capture was invalidated, if it was.
    pub(super) invalidated: Option<String>,
    /// The generic layer's recorder, for owners that no node holds.
    pub(super) recorder: Arc<Recorder>,
}

impl HostCapture {
    /// Adds a node; an invalidated capture takes no more work (as on CUDA).
    pub(super) fn push(&mut self, kind: NodeKind, task: NodeFn) -> Result<()> {
        if let Some(why) = &self.invalidated {
            return Err(invalidated("enqueue", why));
        }
        self.nodes.push((kind, task));
        Ok(())
    }
}

pub(super) fn invalidated(op: &'static str, why: &str) -> Error {
    graph_error(BackendKind::Host, op, GraphErrorKind::Invalidated, format!("the capture was invalidated: {why}"))
}
