//! Streams and events of a GPU device.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::driver::Driver;
use crate::backend::graph::{Owner, Recorder};

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
}

// SAFETY: the driver's contract: its handles may be used from any thread.
unsafe impl<D: Driver> Send for StreamInner<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for StreamInner<D> {}

impl<D: Driver> Drop for StreamInner<D> {
    fn drop(&mut self) {
        if self.owned && self.driver.bind().is_ok() {
            // SAFETY: created by `stream_create` of this driver, destroyed
            // once, after the last clone of the handle is gone. Pending work
            // still completes.
            let _ = unsafe { self.driver.stream_destroy(self.raw) };
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
        GpuStream {
            inner: Arc::new(StreamInner {
                raw,
                id: crate::backend::next_stream_id(),
                owned,
                driver,
                capturing: AtomicBool::new(false),
                recorder: Mutex::new(None),
            }),
        }
    }

    /// The raw handle (`CUstream`, `hipStream_t`), for interop with other
    /// libraries of the same vendor.
    pub fn as_raw(&self) -> D::Stream {
        self.inner.raw
    }

    /// The raw handle as an integer, as other libraries pass it (a
    /// `CUstream` or `hipStream_t`; 0 for the null stream).
    pub fn address(&self) -> usize {
        super::driver::RawAddress::address(self.inner.raw)
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
        self.inner.capturing.store(recorder.is_some(), Ordering::Release);
        *slot = recorder;
    }
}

/// An event of a GPU device.
pub struct GpuEvent<D: Driver> {
    raw: D::Event,
    driver: Arc<D>,
}

// SAFETY: the driver's contract: its handles may be used from any thread.
unsafe impl<D: Driver> Send for GpuEvent<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for GpuEvent<D> {}

impl<D: Driver> fmt::Debug for GpuEvent<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}Event({}:{}, {:p})", D::NAME, D::KIND, self.driver.ordinal(), self.raw)
    }
}

impl<D: Driver> GpuEvent<D> {
    /// Takes ownership of `raw`, made by `driver.event_create`.
    pub(crate) fn new(driver: Arc<D>, raw: D::Event) -> Self {
        GpuEvent { raw, driver }
    }

    pub(crate) fn raw(&self) -> D::Event {
        self.raw
    }

    /// The driver state of the event's device.
    pub(crate) fn driver(&self) -> &D {
        &self.driver
    }
}

impl<D: Driver> Drop for GpuEvent<D> {
    fn drop(&mut self) {
        if self.driver.bind().is_ok() {
            // SAFETY: created by `event_create` of this driver, destroyed once.
            let _ = unsafe { self.driver.event_destroy(self.raw) };
        }
    }
}
