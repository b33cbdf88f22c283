//! Stream capture and graphs of a GPU device, over the vendor's
//! [`GraphCalls`]: [`GpuGraph`] and [`GpuGraphExec`], and capture on a
//! [`GpuStream`].
//!
//! The driver records the work; gpuport records, beside it, the owners of
//! what the work references (the stream's recorder, filled by the device's
//! operations while `in_capture`), and, per executable graph, an event
//! after its latest launch on each stream, so dropping it can wait for its
//! launches before what they use is released.

use std::fmt;
use std::sync::{Arc, Mutex};

use super::driver::{Driver, GraphCalls};
use super::stream::{apart_from_captures, apart_from_captures_if_any, GpuStream};
use super::Gpu;
use crate::backend::graph::{CaptureMode, CaptureStatus, CaptureStream, RawGraph, RawGraphExec, Recorder};
use crate::error::{graph_error, Error, GraphErrorKind, Result};

type G<D> = <D as Driver>::Graphs;

impl<D: Driver> CaptureStream<Gpu<D>> for GpuStream<D> {
    fn capture_ordinal(&self) -> usize {
        self.ordinal()
    }

    fn gate(&self) -> &crate::backend::gate::CaptureGate {
        self.gate_ref()
    }

    fn begin_capture(&self, mode: CaptureMode, recorder: Arc<Recorder>) -> Result<()> {
        let d = self.driver();
        d.bind()?;
        if self.capture_status_bound()?.is_capturing() {
            return Err(graph_error(
                D::KIND,
                "begin_capture",
                GraphErrorKind::AlreadyCapturing,
                "the stream is already capturing; end that capture first".into(),
            ));
        }
        // The recorder goes in first, so that no moment exists where the
        // driver captures and gpuport's count of captures does not know.
        self.set_recorder(Some(recorder));
        // SAFETY: the device is current; the stream is alive (we hold it) and not capturing.
        let begun = unsafe { G::<D>::begin_capture(d, self.raw(), mode) };
        if begun.is_err() {
            self.set_recorder(None);
        }
        begun
    }

    fn end_capture(&self) -> Result<GpuGraph<D>> {
        let d = self.driver();
        // SAFETY: the device is current; the stream is alive and was capturing.
        let ended = d.bind().and_then(|()| unsafe { G::<D>::end_capture(d, self.raw()) });
        // The recorder (and gpuport's count of captures) goes only once the
        // driver no longer captures: not after a refused end (ended from
        // the wrong thread), where the capture goes on.
        let still = ended.is_err() && self.capture_status_asked().is_ok_and(|s| s.is_capturing());
        if !still {
            self.set_recorder(None);
        }
        match ended {
            Ok(raw) => Ok(GpuGraph { raw, driver: d.clone() }),
            Err(Error::Driver(e)) if e.code == D::code(G::<D>::CAPTURE_INVALIDATED) => Err(graph_error(
                D::KIND,
                "end_capture",
                GraphErrorKind::Invalidated,
                format!("the capture was invalidated by an earlier error, and is discarded ({e})"),
            )),
            Err(e) => Err(e),
        }
    }

    /// A capture another library began on the stream (the driver says it
    /// captures, gpuport runs none) gets `owner` kept for the rest of the
    /// process: gpuport cannot see when that library's graph goes.
    fn keep_for_graph(&self, owner: crate::backend::graph::Owner) {
        if self.in_capture() {
            self.keep(std::iter::once(owner));
        } else if self.capture_status().is_ok_and(|s| s.is_capturing()) {
            self.hold_until_graph_gone(owner);
        }
    }

    /// The driver's id of the capture (gpuport's or another library's). A
    /// runtime that cannot tell (an old HIP) is `Unsupported` while the
    /// stream captures.
    fn capture_id(&self) -> Result<Option<u64>> {
        if super::stream::surely_not_capturing() {
            return Ok(None);
        }
        let d = self.driver();
        d.bind()?;
        // SAFETY: the device is current; the stream is alive (we hold it).
        match unsafe { G::<D>::capture_id(d, self.raw()) } {
            Err(Error::Unsupported { .. }) if !self.capture_status_bound()?.is_capturing() => Ok(None),
            id => id,
        }
    }

    /// A runtime without capture support (an old HIP without
    /// `hipStreamIsCapturing`) has no capture running: `None`, so that
    /// every wait, which asks first, still works there.
    fn capture_status(&self) -> Result<CaptureStatus> {
        if super::stream::surely_not_capturing() {
            return Ok(CaptureStatus::None);
        }
        self.driver().bind()?;
        self.capture_status_bound()
    }
}

/// The driver's release of an owner handed to another library's graph
/// (`GpuStream::hold_until_graph_gone`): runs on a driver thread, where no
/// driver call may be made, so the owner's drop is put off
/// ([`release_later`](crate::backend::graph::release_later)).
///
/// # Safety
/// `data` is the `Box<Owner>` that `hold_until_graph_gone` leaked, released once.
unsafe extern "C" fn release_owner(data: *mut std::ffi::c_void) {
    // SAFETY: the function's contract.
    let owner = unsafe { Box::from_raw(data.cast::<crate::backend::graph::Owner>()) };
    crate::backend::graph::release_later(*owner);
}

impl<D: Driver> GpuStream<D> {
    /// Hands `owner` to the graph another library is capturing on this
    /// stream: the driver releases it once that graph and every executable
    /// graph made from it are gone. Where the driver cannot (an old HIP),
    /// `owner` is kept for the rest of the process.
    fn hold_until_graph_gone(&self, owner: crate::backend::graph::Owner) {
        let data = Box::into_raw(Box::new(owner)).cast::<std::ffi::c_void>();
        let d = self.driver();
        // SAFETY: the device is current; the stream is alive and captures;
        // `release_owner(data)` takes back the box leaked above, once, and
        // makes no driver call. On an error the box stays leaked: kept for good.
        let _ = d.bind().and_then(|()| unsafe { G::<D>::retain_in_capture(d, self.raw(), data, release_owner) });
    }

    /// [`capture_status`](CaptureStream::capture_status) for a caller that
    /// has just made the stream's device current on this thread (`bind`),
    /// so that it is not asked again.
    pub(super) fn capture_status_bound(&self) -> Result<CaptureStatus> {
        if super::stream::surely_not_capturing() {
            return Ok(CaptureStatus::None);
        }
        self.capture_status_asked()
    }

    /// The driver's answer, always asked (the device is current).
    fn capture_status_asked(&self) -> Result<CaptureStatus> {
        // SAFETY: the device is current (the caller's contract); the stream is alive.
        match unsafe { G::<D>::capture_status(self.driver(), self.raw()) } {
            Err(Error::Unsupported { .. }) => Ok(CaptureStatus::None),
            status => status,
        }
    }
}

/// A captured graph of a GPU device; destroyed on drop.
pub struct GpuGraph<D: Driver> {
    raw: <G<D> as GraphCalls<D>>::Graph,
    driver: Arc<D>,
}

// SAFETY: the driver's contract: its handles may be used from any thread;
// graph objects are used only through `&self` calls the driver serializes
// (instantiate, node count) and destroyed once.
unsafe impl<D: Driver> Send for GpuGraph<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for GpuGraph<D> {}

impl<D: Driver> fmt::Debug for GpuGraph<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}Graph({}:{}, {:p})", D::NAME, D::KIND, self.driver.ordinal(), self.raw)
    }
}

impl<D: Driver> Drop for GpuGraph<D> {
    fn drop(&mut self) {
        if self.driver.bind().is_ok() {
            // SAFETY: made by `end_capture` of this driver, destroyed once.
            let _ = apart_from_captures(&*self.driver, || unsafe { G::<D>::destroy_graph(&self.driver, self.raw) });
        }
    }
}

impl<D: Driver> RawGraph<Gpu<D>> for GpuGraph<D> {
    fn node_count(&self) -> Result<usize> {
        self.driver.bind()?;
        // SAFETY: the device is current; the graph is alive.
        unsafe { G::<D>::node_count(&self.driver, self.raw) }
    }

    fn instantiate(&self) -> Result<GpuGraphExec<D>> {
        self.driver.bind()?;
        // SAFETY: the device is current; the graph is alive.
        let raw = unsafe { G::<D>::instantiate(&self.driver, self.raw) }?;
        Ok(GpuGraphExec { raw, driver: self.driver.clone(), launched: Mutex::new(Vec::new()) })
    }
}

/// An executable graph of a GPU device; destroyed on drop.
pub struct GpuGraphExec<D: Driver> {
    raw: <G<D> as GraphCalls<D>>::Exec,
    driver: Arc<D>,
    /// Per stream launched on (by stream id): an event recorded after the
    /// latest launch there.
    launched: Mutex<Vec<(u64, D::Event)>>,
}

// SAFETY: the driver's contract: its handles may be used from any thread;
// `launched` is under a lock, and `update` takes `&mut self`.
unsafe impl<D: Driver> Send for GpuGraphExec<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for GpuGraphExec<D> {}

impl<D: Driver> fmt::Debug for GpuGraphExec<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}GraphExec({}:{}, {:p})", D::NAME, D::KIND, self.driver.ordinal(), self.raw)
    }
}

impl<D: Driver> Drop for GpuGraphExec<D> {
    fn drop(&mut self) {
        if self.driver.bind().is_err() {
            return;
        }
        let (driver, raw) = (&*self.driver, self.raw);
        let launched = self.launched.get_mut().unwrap_or_else(|p| p.into_inner());
        apart_from_captures(driver, || {
            for (_, event) in launched.drain(..) {
                // SAFETY: made by `event_create` of this driver, destroyed once.
                let _ = unsafe { driver.event_destroy(event) };
            }
            // SAFETY: made by `instantiate` of this driver, destroyed once;
            // launches in flight complete first (the driver's rule).
            let _ = unsafe { G::<D>::destroy_exec(driver, raw) };
        });
    }
}

impl<D: Driver> RawGraphExec<Gpu<D>> for GpuGraphExec<D> {
    fn launch(&self, stream: &GpuStream<D>) -> Result<()> {
        let d = &self.driver;
        d.bind()?;
        // CUDA refuses an executable graph launched into a capturing stream
        // (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, which also ends the
        // capture): refused first, as on the host backend; the capture check
        // and the launch are one section of the stream's gate.
        let _section = crate::backend::graph::capture_section::<Gpu<D>>(stream);
        if stream.capture_status_bound()?.is_capturing() {
            return Err(crate::backend::graph::nested_launch(D::KIND));
        }
        // SAFETY: the device is current; the stream belongs to it (checked
        // by the caller) and is alive; what the graph references is alive
        // (kept by the `GraphExec`, or promised at capture).
        unsafe { G::<D>::launch(d, self.raw, stream.raw()) }?;
        let mut launched = self.launched.lock().unwrap_or_else(|p| p.into_inner());
        let event = match launched.iter().find(|(id, _)| *id == stream.id()) {
            Some(&(_, event)) => event,
            None => {
                let event = d.event_create()?;
                launched.push((stream.id(), event));
                event
            }
        };
        // SAFETY: the device is current; both handles are alive and of this device.
        unsafe { d.event_record(event, stream.raw()) }
    }

    fn update(&mut self, graph: &GpuGraph<D>) -> Result<()> {
        let d = &self.driver;
        d.bind()?;
        // SAFETY: the device is current; both objects are alive and of this device.
        match unsafe { G::<D>::update(d, self.raw, graph.raw) }? {
            None => Ok(()),
            Some(why) => Err(graph_error(
                D::KIND,
                "update",
                GraphErrorKind::UpdateRefused,
                format!("the driver refused the update ({why}); the executable graph is unchanged"),
            )),
        }
    }

    fn is_idle(&self) -> bool {
        if self.driver.bind().is_err() {
            return false;
        }
        let launched = self.launched.lock().unwrap_or_else(|p| p.into_inner());
        apart_from_captures_if_any(&*self.driver, || {
            launched.iter().all(|&(_, e)| {
                // SAFETY: the device is current; the events are alive (owned here).
                unsafe { self.driver.event_query(e) }.unwrap_or(false)
            })
        })
    }

    fn wait_idle(&self) {
        if self.driver.bind().is_err() {
            return;
        }
        let launched = self.launched.lock().unwrap_or_else(|p| p.into_inner());
        apart_from_captures(&*self.driver, || {
            for &(_, event) in launched.iter() {
                // SAFETY: as in `is_idle`.
                if unsafe { self.driver.event_synchronize(event) }.is_err() {
                    // The device failed; nothing will run any more.
                    let _ = self.driver.synchronize_device();
                }
            }
        })
    }
}
