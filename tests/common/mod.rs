//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::Write;

/// Opens `spec`, or prints why the test is skipped and returns `None`.
///
/// The reason goes straight to the process's stderr (not through `eprintln!`,
/// which the test harness captures), so a skip is visible in every run.
pub fn open_or_skip(spec: &str) -> Option<gpuport::AnyDevice> {
    match gpuport::open(spec) {
        Ok(dev) => Some(dev),
        Err(e) => {
            let name = std::thread::current().name().unwrap_or("?").to_string();
            let _ = writeln!(std::io::stderr(), "skipped: {name} on {spec}: {e}");
            None
        }
    }
}

/// Runs a generic test body on `spec` if that device can be opened.
#[macro_export]
macro_rules! on_device {
    ($spec:expr, $body:path) => {
        if let Some(dev) = common::open_or_skip($spec) {
            gpuport::with_device!(dev, d => $body(d.as_ref()));
        }
    };
}

/// A deterministic byte pattern of length `n`.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}
