//! `gpuport bench --plot FILE.png`: a bar chart of the figures against the
//! ceiling; for `bench --collective`, all-reduce bus bandwidth against size
//! (log scale) with the peer copy's bandwidth as a dashed line.
//!
//! Drawn with plotters into an RGB buffer and encoded with the `png` crate,
//! so nothing links a system library. Text is rasterized here with ab_glyph
//! (plotters' own ab_glyph text rounds each glyph's offset separately, which
//! lifts small periods off the baseline) from a TrueType font found at run
//! time (`$GPUPORT_FONT`, else DejaVu Sans or Liberation Sans at their usual
//! paths); with none found the chart has bars and the ceiling line but no
//! text, and [`draw`] says so.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ab_glyph::{point, Font, FontArc, PxScale, ScaleFont};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::bench::BenchReport;
use super::collective::{size_name, CollectiveReport};

/// The environment variable naming a `.ttf` file for the chart's text.
pub const FONT_ENV: &str = "GPUPORT_FONT";

const FONT_PATHS: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// The first usable font, loaded once.
pub(crate) fn font() -> Option<&'static FontArc> {
    static FONT: OnceLock<Option<FontArc>> = OnceLock::new();
    FONT.get_or_init(|| {
        let candidates = std::env::var_os(FONT_ENV).map(PathBuf::from).into_iter().chain(FONT_PATHS.map(PathBuf::from));
        candidates.into_iter().find_map(|path| FontArc::try_from_vec(std::fs::read(path).ok()?).ok())
    })
    .as_ref()
}

/// Draws `text` in black with its top-left corner at `(x, top)`, `size` pixels high.
pub(crate) fn put_text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    font: &FontArc,
    text: &str,
    (x, top): (i32, i32),
    size: f32,
) -> Result<(), String> {
    let scale = PxScale::from(size);
    let scaled = font.as_scaled(scale);
    let baseline = top as f32 + scaled.ascent();
    let mut caret = x as f32;
    let mut prev = None;
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = prev {
            caret += scaled.kern(p, id);
        }
        if let Some(outline) = font.outline_glyph(id.with_scale_and_position(scale, point(caret, baseline))) {
            let bounds = outline.px_bounds();
            let mut failed = None;
            outline.draw(|gx, gy, coverage| {
                if coverage > 0.02 && failed.is_none() {
                    let at = (bounds.min.x as i32 + gx as i32, bounds.min.y as i32 + gy as i32);
                    if let Err(e) = area.draw_pixel(at, &BLACK.mix(f64::from(coverage.min(1.0)))) {
                        failed = Some(e.to_string());
                    }
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
        }
        caret += scaled.h_advance(id);
        prev = Some(id);
    }
    Ok(())
}

const W: u32 = 1100;
const ROW: i32 = 26;
const LEFT: i32 = 250;
const RIGHT: i32 = 200;

/// Draws the chart of `report` to `path` (PNG). Returns a note when the
/// chart had to leave something out.
pub fn draw(report: &BenchReport, path: &Path) -> Result<Option<String>, String> {
    if let Some(c) = &report.collective {
        return draw_collective(report, c, path);
    }
    let font = font();
    let bw: Vec<_> = report.figures.iter().filter(|f| f.unit == "GB/s").collect();
    let lat: Vec<_> = report.figures.iter().filter(|f| f.unit == "us").collect();
    let h = (60 + 50 + ROW * bw.len() as i32 + 50 + ROW * lat.len() as i32 + 30) as u32;
    let mut buf = vec![0u8; (W * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (W, h)).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| e.to_string();
        root.fill(&WHITE).map_err(e)?;
        let put = |s: &str, x: i32, y: i32, size: f32| match font {
            Some(f) => put_text(&root, f, s, (x, y), size),
            None => Ok(()),
        };
        let d = &report.device;
        put(&format!("gpuport {} bench on {} ({}, {})", report.gpuport_version, d.spec, d.name, d.arch), 10, 10, 20.0)?;
        put(
            &format!("ceiling: device-to-device copy = {:.1} GB/s (bytes read + written)", report.ceiling.gb_per_s),
            10,
            36,
            15.0,
        )?;
        let span = (W as i32 - LEFT - RIGHT) as f64;

        // Bandwidth: linear scale up to the larger of the ceiling and the best figure.
        let mut y = 70;
        put("bandwidth, GB/s (red line: the ceiling)", 10, y, 16.0)?;
        y += 26;
        let top = bw.iter().map(|f| f.median).fold(report.ceiling.gb_per_s, f64::max).max(1e-9) * 1.05;
        let bw_top = y;
        for f in &bw {
            let len = ((f.median / top) * span).clamp(1.0, span) as i32;
            let color = if f.fraction_of_ceiling.is_some() { RGBColor(40, 110, 200) } else { RGBColor(90, 160, 90) };
            root.draw(&Rectangle::new([(LEFT, y + 3), (LEFT + len, y + ROW - 3)], color.filled())).map_err(e)?;
            put(&f.name, 10, y + 5, 14.0)?;
            let mut label = format!("{:.1}", f.median);
            if let Some(x) = f.fraction_of_ceiling {
                label += &format!(" ({:.0}%)", 100.0 * x);
            }
            if let (Some(b), Some(s)) = (&f.baseline, f.speedup) {
                label += &format!(" {s:.2}x vs {}", b.rsplit('/').next().unwrap_or(b));
            }
            put(&label, LEFT + len + 6, y + 5, 13.0)?;
            y += ROW;
        }
        let cx = LEFT + ((report.ceiling.gb_per_s / top) * span) as i32;
        root.draw(&PathElement::new(vec![(cx, bw_top - 4), (cx, y + 2)], RED.stroke_width(2))).map_err(e)?;

        // Latency: log scale, 0.01 µs .. the worst figure.
        y += 24;
        put("latency, µs per operation (log scale; shorter is better)", 10, y, 16.0)?;
        y += 26;
        let lo = 0.01f64;
        let hi = lat.iter().map(|f| f.median).fold(1.0, f64::max) * 2.0;
        let scale = |v: f64| ((v.max(lo) / lo).ln() / (hi / lo).ln() * span).clamp(1.0, span) as i32;
        for f in &lat {
            let len = scale(f.median);
            root.draw(&Rectangle::new([(LEFT, y + 3), (LEFT + len, y + ROW - 3)], RGBColor(200, 120, 40).filled()))
                .map_err(e)?;
            put(&f.name, 10, y + 5, 14.0)?;
            let mut label = format!("{:.3} µs", f.median);
            if let (Some(b), Some(s)) = (&f.baseline, f.speedup) {
                label += &format!(" {s:.1}x vs {}", b.rsplit('/').next().unwrap_or(b));
            }
            put(&label, LEFT + len + 6, y + 5, 13.0)?;
            y += ROW;
        }
        root.present().map_err(e)?;
    }
    write_png(path, &buf, W, h)?;
    Ok(font.is_none().then(|| format!("no font found (set {FONT_ENV} to a .ttf file): bars only, no text")))
}

/// The note [`draw`] returns when no font was found.
fn font_note() -> Option<String> {
    font().is_none().then(|| format!("no font found (set {FONT_ENV} to a .ttf file): lines only, no text"))
}

const CH: u32 = 620;

/// `bench --collective`'s chart: bus bandwidth (median, and the best
/// repetition lighter) against bytes per rank on a log2 axis.
fn draw_collective(report: &BenchReport, c: &CollectiveReport, path: &Path) -> Result<Option<String>, String> {
    let font = font();
    let mut buf = vec![0u8; (W * CH * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (W, CH)).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| e.to_string();
        root.fill(&WHITE).map_err(e)?;
        let put = |s: &str, x: i32, y: i32, size: f32| match font {
            Some(f) => put_text(&root, f, s, (x, y), size),
            None => Ok(()),
        };
        put(
            &format!(
                "gpuport {} bench --collective: {} of {}, in place, {} ranks ({}), {}",
                report.gpuport_version,
                c.collective,
                c.dtype,
                c.ranks,
                c.devices.join(", "),
                c.engine
            ),
            10,
            10,
            18.0,
        )?;
        put(
            "bus bandwidth = bytes / time x 2(n-1)/n (nccl-tests); dots: medians, light: best repetition",
            10,
            36,
            14.0,
        )?;
        let (x0, x1, y0, y1) = (90, W as i32 - 40, 90, CH as i32 - 70);
        let lo = c.points.first().map_or(1.0, |p| (p.bytes.max(1) as f64).log2());
        let hi = c.points.last().map_or(2.0, |p| (p.bytes.max(1) as f64).log2()).max(lo + 1.0);
        let curve_top = c.points.iter().map(|p| p.busbw_gb_per_s_best.max(p.busbw_gb_per_s)).fold(0.0, f64::max);
        // The peer copy's line, where it fits within 4 x the curve's scale.
        let peer = c.peer_copy.as_ref().map(|p| (p, p.gb_per_s <= 4.0 * curve_top.max(1e-12)));
        let top = match peer {
            Some((p, true)) => curve_top.max(p.gb_per_s),
            _ => curve_top,
        }
        .max(1e-9)
            * 1.1;
        let x_of = |bytes: u64| x0 + (((bytes.max(1) as f64).log2() - lo) / (hi - lo) * f64::from(x1 - x0)) as i32;
        let y_of = |v: f64| y1 - ((v / top).clamp(0.0, 1.0) * f64::from(y1 - y0)) as i32;
        let grey = RGBColor(225, 225, 225);
        for i in 0..=5 {
            let v = top * f64::from(i) / 5.0;
            let y = y_of(v);
            root.draw(&PathElement::new(vec![(x0, y), (x1, y)], grey.stroke_width(1))).map_err(e)?;
            let label = if top >= 50.0 {
                format!("{v:.0}")
            } else if top >= 0.5 {
                format!("{v:.2}")
            } else {
                format!("{v:.1e}")
            };
            put(&label, 10, y - 8, 13.0)?;
        }
        for p in &c.points {
            let x = x_of(p.bytes);
            root.draw(&PathElement::new(vec![(x, y0), (x, y1)], grey.stroke_width(1))).map_err(e)?;
            put(&size_name(p.bytes as usize), x - 20, y1 + 8, 12.0)?;
        }
        root.draw(&PathElement::new(vec![(x0, y0), (x0, y1), (x1, y1)], BLACK.stroke_width(1))).map_err(e)?;
        put("bytes per rank (log scale)", (x0 + x1) / 2 - 80, y1 + 32, 14.0)?;
        put("GB/s", 10, y0 - 24, 14.0)?;
        if let Some((p, fits)) = peer {
            let text = format!(
                "peer copy {} -> {} of {}: {:.1} GB/s copied; within {}: {:.1} GB/s",
                p.src,
                p.dst,
                size_name(p.bytes as usize),
                p.gb_per_s,
                p.src,
                p.local_gb_per_s
            );
            if fits {
                let y = y_of(p.gb_per_s);
                let mut x = x0;
                while x < x1 {
                    let end = (x + 10).min(x1);
                    root.draw(&PathElement::new(vec![(x, y), (end, y)], RED.stroke_width(2))).map_err(e)?;
                    x += 18;
                }
                put(&format!("dashed: {text}"), x0 + 10, 60, 14.0)?;
            } else {
                put(&format!("{text} (above the chart's scale)"), x0 + 10, 60, 14.0)?;
            }
        }
        let best: Vec<(i32, i32)> = c.points.iter().map(|p| (x_of(p.bytes), y_of(p.busbw_gb_per_s_best))).collect();
        root.draw(&PathElement::new(best, RGBColor(160, 190, 235).stroke_width(2))).map_err(e)?;
        let median: Vec<(i32, i32)> = c.points.iter().map(|p| (x_of(p.bytes), y_of(p.busbw_gb_per_s))).collect();
        root.draw(&PathElement::new(median.clone(), RGBColor(40, 110, 200).stroke_width(3))).map_err(e)?;
        for (pt, p) in median.iter().zip(&c.points) {
            root.draw(&Circle::new(*pt, 4, RGBColor(40, 110, 200).filled())).map_err(e)?;
            if p.busbw_gb_per_s >= 0.05 * top {
                let v = p.busbw_gb_per_s;
                let label = if v >= 10.0 {
                    format!("{v:.0}")
                } else if v >= 1.0 {
                    format!("{v:.1}")
                } else {
                    format!("{v:.3}")
                };
                put(&label, pt.0 - 14, pt.1 - 22, 12.0)?;
            }
        }
        root.present().map_err(e)?;
    }
    write_png(path, &buf, W, CH)?;
    Ok(font_note())
}

pub(crate) fn write_png(path: &Path, rgb: &[u8], w: u32, h: u32) -> Result<(), String> {
    let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(rgb).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{BenchConfig, Ceiling, DeviceReport, Figure};

    fn figure(name: &str, unit: &str, median: f64, frac: Option<f64>) -> Figure {
        Figure {
            name: name.into(),
            category: "x".into(),
            unit: unit.into(),
            median,
            best: median,
            worst: median,
            reps: 1,
            iters_per_rep: 1,
            bytes: 1,
            timing: "host-clock".into(),
            fraction_of_ceiling: frac,
            baseline: None,
            speedup: None,
        }
    }

    #[test]
    fn draws_a_png() {
        let report = BenchReport {
            schema: 1,
            gpuport_version: "0".into(),
            unix_time: 0,
            quick: true,
            config: BenchConfig::quick(),
            device: DeviceReport {
                spec: "host".into(),
                backend: "host".into(),
                name: "test".into(),
                arch: "x".into(),
                multiprocessors: 1,
                total_memory_bytes: 1,
                free_memory_bytes: 1,
                memory_resource: "caching-pool".into(),
            },
            ceiling: Ceiling { name: "d2d_copy".into(), bytes: 1, gb_per_s: 10.0 },
            figures: vec![
                figure("d2d_copy", "GB/s", 10.0, Some(1.0)),
                figure("add_index_f32", "GB/s", 12.0, Some(1.2)),
                figure("launch_empty", "us", 3.0, None),
                figure("alloc", "us", 0.001, None),
            ],
            skipped: vec![],
            collective: None,
        };
        let path = std::env::temp_dir().join(format!("gpuport-plot-test-{}.png", std::process::id()));
        draw(&report, &path).expect("draw");
        let bytes = std::fs::read(&path).expect("read");
        let _ = std::fs::remove_file(&path);
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }
}
