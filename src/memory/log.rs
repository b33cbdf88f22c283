//! An adaptor writing every allocation and free as a CSV line, like RMM's
//! `logging_resource_adaptor`.
//!
//! Columns: `timestamp_ns` (since the Unix epoch), `elapsed_ns` (since the
//! log started), `thread`, `event` (`allocate`, `free`, `allocate_failure`,
//! `free_failure`: a block the resource refused, see
//! [`MemoryError::ForeignBlock`](super::MemoryError::ForeignBlock)),
//! `device` (`cuda:0`), `address` (hex), `size` (bytes requested), `stream`
//! (the backend's stream id, empty where it has none), `free` and `total`
//! (device memory in bytes after the event, empty unless enabled).

use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::backend::{Device, Event, HostRegistration, MemoryInfo, Stream};
use crate::error::{Error, Result};

use super::block::Block;
use super::ipc_handle::IpcHandle;
use super::pinned::{PinnedFlags, PinnedMemory};
use super::report::{PoolReport, Statistics};
use super::resource::{forward_to_inner, MemoryResource};
use crate::backend::Backend;

/// The CSV header line [`LoggingResource`] writes first.
pub const CSV_HEADER: &str = "timestamp_ns,elapsed_ns,thread,event,device,address,size,stream,free,total";

/// Logs what passes through to `inner` as CSV.
pub struct LoggingResource<B: Backend> {
    inner: Arc<dyn MemoryResource<B>>,
    sink: Mutex<Box<dyn Write + Send>>,
    device: String,
    start: Instant,
    with_memory_info: bool,
}

impl<B: Backend> LoggingResource<B> {
    /// Logs to `sink`, writing the header now. With `with_memory_info`, each
    /// line carries the device's free and total memory (one driver query per
    /// event: slower).
    pub fn new(inner: Arc<dyn MemoryResource<B>>, sink: Box<dyn Write + Send>, with_memory_info: bool) -> Result<Self> {
        let mut sink = sink;
        writeln!(sink, "{CSV_HEADER}").map_err(io_error)?;
        let device = inner.device().info().spec();
        Ok(LoggingResource { inner, sink: Mutex::new(sink), device, start: Instant::now(), with_memory_info })
    }

    /// Logs to a new file at `path` (truncated).
    pub fn to_file(inner: Arc<dyn MemoryResource<B>>, path: &std::path::Path, with_memory_info: bool) -> Result<Self> {
        let file = std::fs::File::create(path).map_err(io_error)?;
        Self::new(inner, Box::new(std::io::BufWriter::new(file)), with_memory_info)
    }

    /// Flushes buffered lines to the sink.
    pub fn flush(&self) -> Result<()> {
        self.sink.lock().unwrap_or_else(|p| p.into_inner()).flush().map_err(io_error)
    }

    fn line(&self, event: &str, address: u64, size: usize, stream: &Stream<B>) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let elapsed = self.start.elapsed().as_nanos();
        let thread = format!("{:?}", std::thread::current().id());
        let thread: String = thread.chars().filter(char::is_ascii_digit).collect();
        let stream = self.inner.device().stream_id(stream).map(|s| s.to_string()).unwrap_or_default();
        let (free, total) = match self.with_memory_info.then(|| self.inner.memory_info()) {
            Some(Ok(m)) => (m.free.to_string(), m.total.to_string()),
            _ => (String::new(), String::new()),
        };
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        // A failed log write must not fail the allocation; the line is lost.
        let _ = writeln!(
            sink,
            "{now},{elapsed},{thread},{event},{},{address:#x},{size},{stream},{free},{total}",
            self.device
        );
    }
}

fn io_error(e: std::io::Error) -> Error {
    Error::InvalidArgument { name: "log sink", reason: e.to_string() }
}

impl<B: Backend> Drop for LoggingResource<B> {
    fn drop(&mut self) {
        let _ = self.sink.get_mut().unwrap_or_else(|p| p.into_inner()).flush();
    }
}

impl<B: Backend> fmt::Debug for LoggingResource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LoggingResource({:?})", self.inner)
    }
}

// SAFETY: blocks pass between the caller and `inner` unchanged; the log
// lines are all this adaptor adds.
unsafe impl<B: Backend> MemoryResource<B> for LoggingResource<B> {
    fn device(&self) -> &Arc<B::Device> {
        self.inner.device()
    }
    fn name(&self) -> &'static str {
        "logging"
    }
    fn allocate(&self, bytes: usize, stream: &Stream<B>) -> Result<Block<B>> {
        match self.inner.allocate(bytes, stream) {
            Ok(block) => {
                self.line("allocate", block.ptr(), bytes, stream);
                Ok(block)
            }
            Err(e) => {
                self.line("allocate_failure", 0, bytes, stream);
                Err(e)
            }
        }
    }
    fn deallocate(&self, block: Block<B>, stream: &Stream<B>, after: Vec<Event<B>>) -> Result<()> {
        let (ptr, len) = (block.ptr(), block.len());
        let freed = self.inner.deallocate(block, stream, after);
        self.line(if freed.is_ok() { "free" } else { "free_failure" }, ptr, len, stream);
        freed
    }
    forward_to_inner!();
    fn statistics(&self) -> Option<Statistics> {
        self.inner.statistics()
    }
}
