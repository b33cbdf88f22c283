//! Streams and events of any backend: [`AnyStream`], [`AnyEvent`].
//!
//! ```
//! use gpuport::dynamic::AnyStream;
//! let dev = gpuport::open("host")?;
//! let s = AnyStream::create(&dev)?;
//! let ev = s.record()?;
//! AnyStream::default_for(&dev).wait(&ev)?;
//! ev.synchronize()?;
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rustc_hash::FxHashMap;

use super::any::{mismatch, on_backend, Any, DynDevice, OnDevice, PerBackend};
use crate::backend::registry::AnyDevice;
use crate::backend::{Backend, Device, Event, Stream};
use crate::error::{BackendKind, Error, Result};

/// What [`AnyStream`] holds per backend: a stream and its device.
#[derive(Debug)]
pub struct Streams;

impl PerBackend for Streams {
    type Of<B: Backend> = OnDevice<B, Stream<B>>;
}

/// What [`AnyEvent`] holds per backend: an event and its device.
#[derive(Debug)]
pub struct Events;

impl PerBackend for Events {
    type Of<B: Backend> = OnDevice<B, Arc<Event<B>>>;
}

/// A stream of any compiled-in backend, with its device; clones name the same stream.
pub type AnyStream = Any<Streams>;

/// An event of any compiled-in backend, with its device; clones name the same event.
pub type AnyEvent = Any<Events>;

impl Clone for AnyStream {
    fn clone(&self) -> Self {
        on_backend!(map self, v => v.clone())
    }
}

impl Clone for AnyEvent {
    fn clone(&self) -> Self {
        on_backend!(map self, v => v.clone())
    }
}

/// Wraps a stream of `d`.
pub fn stream_on<D: DynDevice>(d: &Arc<D>, stream: Stream<D::B>) -> AnyStream {
    D::wrap::<Streams>(OnDevice { device: d.clone(), item: stream })
}

fn event_on<D: DynDevice>(d: &Arc<D>, event: Event<D::B>) -> AnyEvent {
    D::wrap::<Events>(OnDevice { device: d.clone(), item: Arc::new(event) })
}

fn record_on<D: DynDevice>(d: &Arc<D>, s: &Stream<D::B>) -> Result<AnyEvent> {
    let ev = d.create_event()?;
    d.record_event(&ev, s)?;
    Ok(event_on(d, ev))
}

impl AnyStream {
    /// The device's default stream.
    pub fn default_for(dev: &AnyDevice) -> AnyStream {
        on_backend!(dev, d => stream_on(d, d.default_stream().clone()))
    }

    /// A new stream on `dev`.
    pub fn create(dev: &AnyDevice) -> Result<AnyStream> {
        on_backend!(dev, d => Ok(stream_on(d, d.create_stream()?)))
    }

    /// The stream's device.
    pub fn device(&self) -> AnyDevice {
        on_backend!(self, v => DynDevice::any_device(&v.device))
    }

    /// The stream as `D`'s, or the mismatch error naming both devices.
    pub fn of<D: DynDevice>(&self, device: &Arc<D>) -> Result<&Stream<D::B>> {
        match D::get::<Streams>(self) {
            Some(v) if v.device.info().ordinal == device.info().ordinal => Ok(&v.item),
            _ => Err(mismatch("stream", &D::any_device(device), &self.device())),
        }
    }

    /// The native handle as an integer: a `CUstream` or `hipStream_t` (0 for
    /// the null stream); 0 on the host backend, whose streams have no handle
    /// another library understands.
    pub fn handle(&self) -> usize {
        match self {
            Any::Host(_) => 0,
            #[cfg(feature = "cuda")]
            Any::Cuda(v) => v.item.address(),
            #[cfg(feature = "rocm")]
            Any::Rocm(v) => v.item.address(),
        }
    }

    /// Blocks until the stream's work is done.
    pub fn synchronize(&self) -> Result<()> {
        on_backend!(self, v => v.device.synchronize(&v.item))
    }

    /// Records a new event at the end of the stream.
    pub fn record(&self) -> Result<AnyEvent> {
        on_backend!(self, v => record_on(&v.device, &v.item))
    }

    /// Records a marker at the end of the stream, for completion queries
    /// and waits only (no timing: cheaper to record on GPUs). `reuse`, an
    /// event of this stream's device that nobody waits for or queries any
    /// more, is recorded again instead of creating one (an event's state is
    /// that of its latest record); an event of another device is dropped
    /// and a new one made.
    pub fn record_marker(&self, reuse: Option<AnyEvent>) -> Result<AnyEvent> {
        if let Some(ev) = reuse {
            let recorded = on_backend!((self, &ev), (s, e) => {
                if s.device.info().ordinal == e.device.info().ordinal {
                    s.device.record_event(&e.item, &s.item).map(|()| true)
                } else {
                    Ok(false)
                }
            }, else => Ok(false))?;
            if recorded {
                return Ok(ev);
            }
        }
        on_backend!(self, v => {
            let ev = v.device.create_marker_event()?;
            v.device.record_event(&ev, &v.item)?;
            Ok(event_on(&v.device, ev))
        })
    }

    /// Makes later work on this stream wait for `event` (no host wait).
    pub fn wait(&self, event: &AnyEvent) -> Result<()> {
        on_backend!((self, event), (s, e) => s.device.wait_event(&s.item, &e.item),
            else => Err(mismatch("event", &self.device(), &event.device())))
    }

    /// The stream another library names by its native handle on `dev`: 0 is
    /// the device's default stream; on CUDA, 1 and 2 are the legacy and
    /// per-thread default streams, on ROCm 2 is `hipStreamPerThread`. The
    /// host backend's streams have no integer handles, so it takes 0 only.
    ///
    /// Each (device, handle) is borrowed once and then reused, so the
    /// caching pool sees one stream per handle and reuses a block freed on
    /// it at once, in stream order, as RMM does.
    ///
    /// # Safety
    /// `handle` is 0, a special handle of the vendor, or a live stream of
    /// `dev`, which stays alive while the returned stream (or work a pool
    /// orders on it) is used.
    pub unsafe fn borrow(dev: &AnyDevice, handle: usize) -> Result<AnyStream> {
        if handle == 0 {
            return Ok(AnyStream::default_for(dev));
        }
        if dev.backend() == BackendKind::Host {
            return Err(Error::InvalidArgument {
                name: "stream",
                reason: format!(
                    "stream {handle}: the host backend's streams have no integer handles; pass 0 or a stream object"
                ),
            });
        }
        // Fx hash: handles a peer library passes in, looked up per hook call
        // (see `kept_by_address` in src/dynamic/memory.rs).
        type Borrowed = Mutex<FxHashMap<(BackendKind, usize, usize), AnyStream>>;
        static BORROWED: OnceLock<Borrowed> = OnceLock::new();
        let key = (dev.backend(), dev.info().ordinal, handle);
        let mut map = BORROWED.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = map.get(&key) {
            return Ok(s.clone());
        }
        let s = match dev {
            AnyDevice::Host(d) => stream_on(d, d.default_stream().clone()),
            #[cfg(feature = "cuda")]
            // SAFETY: forwarded caller contract.
            AnyDevice::Cuda(d) => stream_on(d, unsafe { d.borrow_stream(handle) }),
            #[cfg(feature = "rocm")]
            // SAFETY: forwarded caller contract.
            AnyDevice::Rocm(d) => stream_on(d, unsafe { d.borrow_stream(handle) }),
        };
        map.insert(key, s.clone());
        Ok(s)
    }

    /// A stream per device, made on first use, on which exports hand their
    /// pending work to consumers that take a stream (the CUDA Array
    /// Interface's `stream` entry).
    pub fn export_stream(dev: &AnyDevice) -> Result<AnyStream> {
        type Exports = Mutex<HashMap<(BackendKind, usize), AnyStream>>;
        static EXPORTS: OnceLock<Exports> = OnceLock::new();
        let key = (dev.backend(), dev.info().ordinal);
        let mut map = EXPORTS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = map.get(&key) {
            return Ok(s.clone());
        }
        let s = AnyStream::create(dev)?;
        map.insert(key, s.clone());
        Ok(s)
    }
}

impl AnyEvent {
    /// The event's device.
    pub fn device(&self) -> AnyDevice {
        on_backend!(self, v => DynDevice::any_device(&v.device))
    }

    /// Blocks until the work before the event is done.
    pub fn synchronize(&self) -> Result<()> {
        on_backend!(self, v => v.device.synchronize_event(&v.item))
    }

    /// Whether the work before the event is done.
    pub fn is_complete(&self) -> Result<bool> {
        on_backend!(self, v => v.device.event_is_complete(&v.item))
    }

    /// Milliseconds from this event to `end` (both recorded and complete).
    pub fn elapsed_ms(&self, end: &AnyEvent) -> Result<f32> {
        on_backend!((self, end), (a, b) => a.device.elapsed_ms(&a.item, &b.item),
            else => Err(mismatch("event", &self.device(), &end.device())))
    }

    /// The event as `D`'s, or the mismatch error.
    pub fn of<D: DynDevice>(&self, device: &Arc<D>) -> Result<&Event<D::B>> {
        match D::get::<Events>(self) {
            Some(v) if v.device.info().ordinal == device.info().ordinal => Ok(&v.item),
            _ => Err(mismatch("event", &D::any_device(device), &self.device())),
        }
    }
}
