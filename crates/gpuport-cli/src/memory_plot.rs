//! `gpuport memory plot FILE -o out.png`: memory in use over time, one line
//! per stream, from a memory snapshot's `device_traces` (gpuport's
//! `dump_snapshot`, or PyTorch's `_dump_snapshot`; read by `pickle.rs`).
//!
//! Each stream's line steps up at an `alloc` and down at a `free_completed`
//! of the same address. Blocks allocated before the recording began show
//! up only as frees; each line is lifted by what those took, so that none
//! goes below zero. Text (title, axes, legend) needs a font, as the bench
//! chart's does (`plot.rs`); without one the lines and axes are drawn alone.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use plotters::prelude::*;

use super::pickle::{self, Value};
use super::plot::{font, put_text, write_png, FONT_ENV};

const W: u32 = 1100;
const H: u32 = 600;
const LEFT: i32 = 90;
const RIGHT: i32 = 170;
const TOP: i32 = 50;
const BOTTOM: i32 = 50;

const COLORS: [RGBColor; 6] = [
    RGBColor(40, 110, 200),
    RGBColor(200, 80, 40),
    RGBColor(60, 150, 60),
    RGBColor(150, 60, 170),
    RGBColor(200, 160, 20),
    RGBColor(40, 160, 170),
];

/// One stream's memory in use: (time in µs, bytes) at each change.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Timeline {
    /// Steps, in trace order.
    pub points: Vec<(i128, i128)>,
}

/// Memory in use per (device, stream) from a snapshot's `device_traces`.
pub fn timelines(snapshot: &Value) -> Result<BTreeMap<(usize, i128), Timeline>, String> {
    let traces = snapshot.get("device_traces").ok_or("the file has no 'device_traces': not a memory snapshot")?;
    let mut out: BTreeMap<(usize, i128), Timeline> = BTreeMap::new();
    for (device, trace) in traces.items().iter().enumerate() {
        let mut live: HashMap<i128, (i128, i128)> = HashMap::new(); // addr -> (size, stream)
        let mut level: BTreeMap<i128, i128> = BTreeMap::new();
        let mut lowest: BTreeMap<i128, i128> = BTreeMap::new();
        for e in trace.items() {
            let field = |k: &str| e.get(k).and_then(Value::int);
            let (Some(action), Some(time)) = (e.get("action").and_then(Value::str), field("time_us")) else {
                continue;
            };
            let (addr, size, stream) =
                (field("addr").unwrap_or(0), field("size").unwrap_or(0), field("stream").unwrap_or(0));
            let (stream, delta) = match action {
                "alloc" => {
                    live.insert(addr, (size, stream));
                    (stream, size)
                }
                "free_completed" => match live.remove(&addr) {
                    Some((size, stream)) => (stream, -size),
                    None => (stream, -size),
                },
                _ => continue,
            };
            let now = level.entry(stream).or_insert(0);
            *now += delta;
            let low = lowest.entry(stream).or_insert(0);
            *low = (*low).min(*now);
            out.entry((device, stream)).or_default().points.push((time, *now));
        }
        for (stream, low) in lowest {
            if let Some(t) = out.get_mut(&(device, stream)) {
                t.points.iter_mut().for_each(|p| p.1 -= low);
            }
        }
    }
    Ok(out)
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / f64::from(1u32 << 20))
}

/// Reads the snapshot at `input` and draws its timeline to `out` (PNG).
/// Returns a note when the chart had to leave something out.
pub fn plot_file(input: &Path, out: &Path) -> Result<Option<String>, String> {
    let data = std::fs::read(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let snapshot = pickle::load(&data).map_err(|e| format!("{}: {e}", input.display()))?;
    let lines = timelines(&snapshot)?;
    if lines.is_empty() {
        return Err(format!(
            "{}: no alloc or free in its device_traces (was the history recording? gpuport.memory.record_memory_history)",
            input.display()
        ));
    }
    draw(&lines, out)
}

/// Draws `lines` to `path` (PNG).
#[allow(clippy::cast_precision_loss)] // pixel positions from times and byte counts
pub fn draw(lines: &BTreeMap<(usize, i128), Timeline>, path: &Path) -> Result<Option<String>, String> {
    let all = lines.values().flat_map(|t| t.points.iter());
    let t0 = all.clone().map(|p| p.0).min().unwrap_or(0);
    let t1 = all.clone().map(|p| p.0).max().unwrap_or(0).max(t0 + 1);
    let top = all.map(|p| p.1).max().unwrap_or(0).max(1) as f64 * 1.05;
    let (x0, x1, y0, y1) = (LEFT, W as i32 - RIGHT, H as i32 - BOTTOM, TOP);
    let x = |t: i128| x0 + (((t - t0) as f64 / (t1 - t0) as f64) * f64::from(x1 - x0)) as i32;
    let y = |b: i128| y0 - ((b as f64 / top) * f64::from(y0 - y1)) as i32;
    let font = font();
    let mut buf = vec![0u8; (W * H * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (W, H)).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| e.to_string();
        root.fill(&WHITE).map_err(e)?;
        let put = |s: &str, px: i32, py: i32, size: f32| match font {
            Some(f) => put_text(&root, f, s, (px, py), size),
            None => Ok(()),
        };
        root.draw(&PathElement::new(vec![(x0, y1), (x0, y0), (x1, y0)], BLACK.stroke_width(1))).map_err(e)?;
        for i in 0..=4 {
            let b = top / 4.0 * f64::from(i);
            let py = y0 - ((b / top) * f64::from(y0 - y1)) as i32;
            root.draw(&PathElement::new(vec![(x0 - 4, py), (x1, py)], RGBColor(225, 225, 225).stroke_width(1)))
                .map_err(e)?;
            put(&mib(b), 8, py - 7, 12.0)?;
        }
        put("memory in use per stream over time", 10, 12, 18.0)?;
        put(&format!("{:.3} s", (t1 - t0) as f64 / 1e6), x1 - 50, y0 + 10, 12.0)?;
        put("0 s", x0, y0 + 10, 12.0)?;
        for (i, ((device, stream), t)) in lines.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            // Steps: the level holds until the next change.
            let mut pts = Vec::with_capacity(t.points.len() * 2 + 1);
            let mut last = 0;
            for &(time, bytes) in &t.points {
                pts.push((x(time), y(last)));
                pts.push((x(time), y(bytes)));
                last = bytes;
            }
            pts.push((x1, y(last)));
            root.draw(&PathElement::new(pts, color.stroke_width(2))).map_err(e)?;
            let ly = TOP + 20 * i32::try_from(i).unwrap_or(i32::MAX / 40);
            root.draw(&Rectangle::new([(x1 + 10, ly + 4), (x1 + 24, ly + 14)], color.filled())).map_err(e)?;
            put(&format!("device {device} stream {stream}"), x1 + 30, ly + 2, 12.0)?;
        }
        root.present().map_err(e)?;
    }
    write_png(path, &buf, W, H)?;
    Ok(font.is_none().then(|| format!("no font found (set {FONT_ENV} to a .ttf file): lines only, no text")))
}
