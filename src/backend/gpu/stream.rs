//! Streams and events of a GPU device.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::driver::{Driver, GraphCalls};
use super::event_pool::{EventPool, EventSource, OwnedEvent};
use crate::backend::graph::{CaptureMode, Owner, Recorder};
use crate::error::Result;

/// GPU streams on which gpuport runs a capture: those whose `capturing`
/// flag is set.
static CAPTURES_RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Whether a stream other than the null stream could have been captured by
/// someone else: set, for good, once a raw handle leaves gpuport
/// ([`GpuStream::as_raw`], [`GpuStream::address`]) or a foreign stream is
/// wrapped.
static HANDLES_SHARED: AtomicBool = AtomicBool::new(false);

/// Records that a stream handle left gpuport (a load first: this runs on
/// every `address()`, and a store would contend for the cache line).
fn share_handles() {
    if !HANDLES_SHARED.load(Ordering::Relaxed) {
        HANDLES_SHARED.store(true, Ordering::Release);
    }
}

/// Whether no GPU stream can be capturing, known without asking the driver:
/// gpuport runs no capture, and no stream handle but the null stream's
/// (which CUDA and HIP never capture) was ever in other hands. Another
/// library's capture needs a handle; and a stream joins a capture only by
/// waiting on an event recorded inside one, which needs a capturing stream
/// first. Allocation and free in the caching pool ask on every call, and
/// the driver's answer (`cuStreamIsCapturing`) is most of their cost.
/// PyTorch's caching allocator makes the same shortcut with its own
/// captures only; this one also covers captures begun by others.
pub(crate) fn surely_not_capturing() -> bool {
    CAPTURES_RUNNING.load(Ordering::Acquire) == 0 && !HANDLES_SHARED.load(Ordering::Acquire)
}

/// Runs `call`, a call gpuport makes on its own behalf rather than as the
/// caller's work (a free, an unload, a destroy, or an event's query or wait,
/// mostly from drops, which can run in a Python finalizer at any moment),
/// with the calling thread's capture mode set to relaxed. CUDA and HIP
/// invalidate a running global-mode capture when any thread not in relaxed
/// mode makes such a call, and a thread-local one when its own thread does;
/// a relaxed thread's call only fails if it truly conflicts (an event
/// recorded inside the capture). PyTorch's allocator and mscclpp set the
/// mode the same way around their frees and allocations.
pub(crate) fn apart_from_captures<D: Driver, R>(driver: &D, call: impl FnOnce() -> R) -> R {
    let Ok(before) = D::Graphs::exchange_capture_mode(driver, CaptureMode::Relaxed) else {
        // A runtime without the call (old HIP) has no mode to set.
        return call();
    };
    let result = call();
    if before != CaptureMode::Relaxed {
        let _ = D::Graphs::exchange_capture_mode(driver, before);
    }
    result
}

/// As [`apart_from_captures`], for cheap calls on hot paths (event queries):
/// the mode is switched only when a capture could be running.
pub(crate) fn apart_from_captures_if_any<D: Driver, R>(driver: &D, call: impl FnOnce() -> R) -> R {
    if surely_not_capturing() {
        call()
    } else {
        apart_from_captures(driver, call)
    }
}

struct StreamInner<D: Driver> {
    raw: D::Stream,
    /// Process-unique number (raw handles are reused after a stream is destroyed).
    id: u64,
    /// False for the null stream and borrowed streams, which are never destroyed.
    owned: bool,
    driver: Arc<D>,
    /// Whether a gpuport capture runs on this stream (read on every
    /// operation, so a plain flag); its recorder is in `recorder`.
    capturing: AtomicBool,
    /// The running capture's recorder, which keeps what captured work references.
    recorder: Mutex<Option<Arc<Recorder>>>,
    /// Keeps gpuport's captures from beginning or ending inside its sections.
    gate: crate::backend::gate::CaptureGate,
}

// SAFETY: the driver's contract: its handles may be used from any thread.
unsafe impl<D: Driver> Send for StreamInner<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for StreamInner<D> {}

impl<D: Driver> Drop for StreamInner<D> {
    fn drop(&mut self) {
        if *self.capturing.get_mut() {
            // Destroying the stream ends its capture.
            CAPTURES_RUNNING.fetch_sub(1, Ordering::AcqRel);
        }
        if self.owned && self.driver.bind().is_ok() {
            // SAFETY: created by `stream_create` of this driver, destroyed
            // once, after the last clone of the handle is gone. Pending work
            // still completes.
            let _ = apart_from_captures(&*self.driver, || unsafe { self.driver.stream_destroy(self.raw) });
        }
    }
}

/// A stream of a GPU device; clones name the same stream.
pub struct GpuStream<D: Driver> {
    inner: Arc<StreamInner<D>>,
}

impl<D: Driver> Clone for GpuStream<D> {
    fn clone(&self) -> Self {
        GpuStream { inner: self.inner.clone() }
    }
}

impl<D: Driver> fmt::Debug for GpuStream<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}Stream({}:{}, {:p})", D::NAME, D::KIND, self.inner.driver.ordinal(), self.inner.raw)
    }
}

impl<D: Driver> GpuStream<D> {
    /// Wraps `raw`, a stream of `driver`'s device; `owned` streams are
    /// destroyed with their last handle.
    pub(crate) fn new(driver: Arc<D>, raw: D::Stream, owned: bool) -> Self {
        Self::with_gate(driver, raw, owned, Default::default())
    }

    /// The device's default stream (the null stream), which gpuport never
    /// captures: its capture gate is closed (`crate::backend::gate`).
    pub(crate) fn default_of(driver: Arc<D>) -> Self {
        Self::with_gate(driver, D::NULL_STREAM, false, crate::backend::gate::CaptureGate::closed())
    }

    fn with_gate(driver: Arc<D>, raw: D::Stream, owned: bool, gate: crate::backend::gate::CaptureGate) -> Self {
        if !owned && super::driver::RawAddress::address(raw) != 0 {
            share_handles();
        }
        GpuStream {
            inner: Arc::new(StreamInner {
                raw,
                id: crate::backend::next_stream_id(),
                owned,
                driver,
                capturing: AtomicBool::new(false),
                recorder: Mutex::new(None),
                gate,
            }),
        }
    }

    /// The raw handle (`CUstream`, `hipStream_t`), for interop with other
    /// libraries of the same vendor. From then on, every capture check asks
    /// the driver, since the other library may capture the stream.
    pub fn as_raw(&self) -> D::Stream {
        share_handles();
        self.inner.raw
    }

    /// The raw handle as an integer, as other libraries pass it (a
    /// `CUstream` or `hipStream_t`; 0 for the null stream). As
    /// [`as_raw`](Self::as_raw), it makes every capture check ask the driver.
    pub fn address(&self) -> usize {
        share_handles();
        super::driver::RawAddress::address(self.inner.raw)
    }

    /// The raw handle, for gpuport's own driver calls (it does not leave gpuport).
    pub(crate) fn raw(&self) -> D::Stream {
        self.inner.raw
    }

    /// A handle of another library's stream (`Device::stream_is_borrowed`):
    /// not created by gpuport and not a default stream.
    pub(crate) fn is_borrowed(&self) -> bool {
        !self.inner.owned && super::driver::RawAddress::address(self.inner.raw) != 0
    }

    /// The number that tells this stream apart (see `Device::stream_id`).
    pub(crate) fn id(&self) -> u64 {
        self.inner.id
    }

    /// The ordinal of the device the stream belongs to.
    pub(crate) fn ordinal(&self) -> usize {
        self.inner.driver.ordinal()
    }

    /// The driver state of the stream's device.
    pub(crate) fn driver(&self) -> &Arc<D> {
        &self.inner.driver
    }

    /// The stream's capture gate (`crate::backend::gate`).
    pub(crate) fn gate_ref(&self) -> &crate::backend::gate::CaptureGate {
        &self.inner.gate
    }

    /// Whether a gpuport capture runs on this stream (cheap: no driver call).
    pub(crate) fn in_capture(&self) -> bool {
        self.inner.capturing.load(Ordering::Acquire)
    }

    /// Keeps `owners` alive with the graph, while a gpuport capture runs.
    pub(crate) fn keep(&self, owners: impl IntoIterator<Item = Owner>) {
        if !self.in_capture() {
            return;
        }
        if let Some(recorder) = self.inner.recorder.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            for owner in owners {
                recorder.keep(owner);
            }
        }
    }

    /// Installs (`Some`) or removes (`None`) the running capture's recorder.
    pub(crate) fn set_recorder(&self, recorder: Option<Arc<Recorder>>) {
        let mut slot = self.inner.recorder.lock().unwrap_or_else(|p| p.into_inner());
        // Under the lock, so that the count is the number of streams whose
        // flag is set (two threads ending one capture count it once).
        let now = recorder.is_some();
        if self.inner.capturing.swap(now, Ordering::AcqRel) != now {
            if now {
                CAPTURES_RUNNING.fetch_add(1, Ordering::AcqRel);
            } else {
                CAPTURES_RUNNING.fetch_sub(1, Ordering::AcqRel);
            }
        }
        *slot = recorder;
    }
}

/// An event of a GPU device. A marker event (no timing) goes back to its
/// device's pool when dropped, unless last recorded inside a capture
/// (`event_pool.rs`).
pub struct GpuEvent<D: Driver> {
    owned: OwnedEvent<D>,
    /// The driver's id of the capture the latest recording was made in,
    /// plus one (0: not in a capture). Such an event is recorded only when
    /// the graph runs: queries, waits and timings of it are refused without
    /// asking the driver, which invalidates the capture while it runs, and
    /// crashed (SIGSEGV inside `cuEventQuery`, CUDA 13 on an H200) once its
    /// graph was destroyed.
    captured_in: std::sync::atomic::AtomicU64,
}

// SAFETY: the driver's contract: its handles may be used from any thread.
unsafe impl<D: Driver> Send for GpuEvent<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for GpuEvent<D> {}

impl<D: Driver> fmt::Debug for GpuEvent<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}Event({}:{}, {:p})", D::NAME, D::KIND, self.driver().ordinal(), self.raw())
    }
}

impl<D: Driver> GpuEvent<D> {
    /// Takes ownership of `raw`, made by `driver.event_create` (destroyed
    /// with the handle).
    pub(crate) fn new(driver: Arc<D>, raw: D::Event) -> Self {
        Self::owning(OwnedEvent::new(driver, raw))
    }

    /// A marker event of `driver`'s device: one from its pool, else a new
    /// one (`driver.event_create_untimed`).
    pub(crate) fn marker(driver: Arc<D>) -> Result<Self> {
        OwnedEvent::marker(driver).map(Self::owning)
    }

    fn owning(owned: OwnedEvent<D>) -> Self {
        GpuEvent { owned, captured_in: std::sync::atomic::AtomicU64::new(0) }
    }

    /// The capture the latest recording was made in (see `captured_in`).
    pub(crate) fn captured_in(&self) -> Option<u64> {
        self.captured_in.load(Ordering::Acquire).checked_sub(1)
    }

    /// Notes where the latest recording was made (`None`: outside captures).
    pub(crate) fn set_captured_in(&self, capture: Option<u64>) {
        let v = capture.map_or(0, |c| c.saturating_add(1));
        // A load first: events are recorded on hot paths, mostly outside captures.
        if self.captured_in.load(Ordering::Relaxed) != v {
            self.captured_in.store(v, Ordering::Release);
        }
    }

    pub(crate) fn raw(&self) -> D::Event {
        self.owned.raw()
    }

    /// The driver state of the event's device.
    pub(crate) fn driver(&self) -> &D {
        self.owned.source()
    }
}

impl<D: Driver> Drop for GpuEvent<D> {
    fn drop(&mut self) {
        if self.captured_in().is_some() {
            // Recorded inside a capture: part of that capture's graph, so
            // never handed to another holder (`event_pool.rs`).
            self.owned.keep_out_of_pool();
        }
    }
}

/// The driver state as the source of its device's events (`event_pool.rs`).
impl<D: Driver> EventSource for D {
    type Event = D::Event;

    fn pool(&self) -> &EventPool<D::Event> {
        self.marker_events()
    }

    fn create_marker(&self) -> Result<D::Event> {
        self.bind()?;
        self.event_create_untimed()
    }

    unsafe fn destroy(&self, events: Vec<D::Event>) {
        if self.bind().is_err() {
            return;
        }
        // Relaxed: a destroy is cleanup gpuport makes on its own behalf,
        // mostly from drops, which may run while another thread captures
        // (`apart_from_captures`). Pooled marker events skip this: only a
        // full pool, a timed or captured event, or teardown gets here.
        apart_from_captures(self, || {
            for event in events {
                // SAFETY: the caller's contract: made here, destroyed once.
                let _ = unsafe { self.event_destroy(event) };
            }
        });
    }
}
