//! The `gpuport` command as a user runs it: the built binary, its exit
//! status, its JSON report and its chart.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

/// The binary cargo built; in the GPU bundle (test binaries in `.gpu/tests/`,
/// the command in `.gpu/bin/`, see ci/gpu-bundle) `$GPUPORT_BIN` or `../bin/gpuport`.
fn exe() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_gpuport"));
    if built.exists() {
        return built;
    }
    if let Some(path) = std::env::var_os("GPUPORT_BIN") {
        return path.into();
    }
    let beside = std::env::current_exe().ok().and_then(|t| Some(t.parent()?.parent()?.join("bin").join("gpuport")));
    beside.filter(|p| p.exists()).unwrap_or(built)
}

fn gpuport(args: &[&str]) -> Output {
    Command::new(exe()).args(args).env_remove("GPUPORT_DEVICE").output().expect("run the gpuport binary")
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gpuport-cli-{}-{name}", std::process::id()))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn info_lists_the_host() {
    let out = gpuport(&["info"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("host"), "{stdout}");
    assert!(stdout.contains("memory resource"), "{stdout}");
    assert!(stdout.contains("free of"), "{stdout}");
}

const BACKENDS: [&str; 3] = ["cuda", "rocm", "host"];

/// The `name: ...` status line of each backend in `stdout` (device lines are indented).
fn status_lines(stdout: &str) -> Vec<(&'static str, Vec<&str>)> {
    BACKENDS.map(|name| (name, stdout.lines().filter(|l| l.starts_with(&format!("{name}:"))).collect())).to_vec()
}

#[test]
fn info_names_each_backend_once_on_one_line() {
    let out = gpuport(&["info"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (name, lines) in status_lines(&stdout) {
        assert_eq!(lines.len(), 1, "{name} has {} status lines:\n{stdout}", lines.len());
        let rest = &lines[0][name.len() + 1..];
        // Not "cuda: unavailable: cuda is unavailable: ..." nor "the cuda backend is ...".
        for repeated in [format!("{name} is unavailable"), format!("the {name} backend"), format!(" {name}:")] {
            assert!(!rest.contains(&repeated), "{:?} repeats its backend name", lines[0]);
        }
    }
    // Unindented lines (backend statuses, the default device) appear once.
    // Indented device details may repeat: on the H100, `rocm:0` through the
    // HIP-on-CUDA shim is the same GPU as `cuda:0`, with the same memory line.
    let mut seen = std::collections::HashSet::new();
    for line in stdout.lines().filter(|l| !l.trim().is_empty() && !l.starts_with(' ')) {
        assert!(seen.insert(line), "{line:?} is printed twice:\n{stdout}");
    }
}

#[test]
fn the_main_job_says_why_each_backend_is_unavailable_once() {
    let info = gpuport(&["info"]);
    let all = gpuport(&[]);
    assert!(all.status.success(), "{}", text(&all));
    let everything = text(&all);
    for (name, lines) in status_lines(&String::from_utf8_lossy(&info.stdout)) {
        // What would repeat if the demo's notes said it again, in any wording.
        let key = if lines[0].contains("not compiled in") {
            format!("--features {name}`")
        } else if let Some((_, reason)) = lines[0].split_once(": unavailable: ") {
            reason.to_string()
        } else {
            continue;
        };
        assert_eq!(everything.matches(&key).count(), 1, "{name}: {key:?} is not said exactly once:\n{everything}");
    }
    assert!(everything.contains("all correct"), "{everything}");
}

const FIGURES: [&str; 12] = [
    "d2d_copy",
    "alloc_free_1MiB/caching_pool",
    "alloc_free_1MiB/native_async",
    "alloc_free_1MiB/plain",
    "h2d_pinned",
    "d2h_pinned",
    "h2d_pageable/plain",
    "h2d_pageable/pipelined",
    "d2h_pageable/plain",
    "d2h_pageable/pipelined",
    "launch_empty",
    "add_index_f32",
];

#[test]
fn bench_quick_writes_json_with_every_field_and_a_png() {
    let (json, png) = (temp("bench.json"), temp("bench.png"));
    let out = gpuport(&[
        "bench",
        "--quick",
        "--device",
        "host",
        "--json",
        json.to_str().expect("utf-8 temp path"),
        "--plot",
        png.to_str().expect("utf-8 temp path"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("add_index_f32") && stdout.contains("ceiling"), "{stdout}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON file")).expect("valid JSON");
    let _ = std::fs::remove_file(&json);
    assert_eq!(report["schema"], 1);
    assert_eq!(report["quick"], true);
    assert!(report["gpuport_version"].is_string());
    assert!(report["unix_time"].as_u64().is_some_and(|t| t > 0));
    for key in [
        "bandwidth_bytes",
        "pageable_bytes",
        "alloc_bytes",
        "reps",
        "batch",
        "pageable_batch",
        "alloc_iters",
        "launch_iters",
    ] {
        assert!(report["config"][key].as_u64().is_some_and(|v| v > 0), "config.{key}: {}", report["config"]);
    }
    let device = &report["device"];
    assert_eq!(device["spec"], "host");
    assert_eq!(device["backend"], "host");
    for key in ["name", "arch", "memory_resource"] {
        assert!(device[key].as_str().is_some_and(|s| !s.is_empty()), "device.{key}: {device}");
    }
    for key in ["multiprocessors", "total_memory_bytes", "free_memory_bytes"] {
        assert!(device[key].as_u64().is_some_and(|v| v > 0), "device.{key}: {device}");
    }
    let ceiling = &report["ceiling"];
    assert_eq!(ceiling["name"], "d2d_copy");
    assert!(ceiling["bytes"].as_u64().is_some_and(|v| v > 0));
    assert!(ceiling["gb_per_s"].as_f64().is_some_and(|v| v > 0.0));
    assert!(report["skipped"].as_array().is_some_and(|s| s.is_empty()), "host skips nothing: {}", report["skipped"]);

    let figures = report["figures"].as_array().expect("figures array");
    for name in FIGURES {
        let f = figures.iter().find(|f| f["name"] == name).unwrap_or_else(|| panic!("{name} missing"));
        for key in ["median", "best", "worst"] {
            assert!(f[key].as_f64().is_some_and(|v| v > 0.0 && v.is_finite()), "{name}.{key}: {f}");
        }
        for key in ["reps", "iters_per_rep"] {
            assert!(f[key].as_u64().is_some_and(|v| v > 0), "{name}.{key}: {f}");
        }
        assert!(f["bytes"].is_u64(), "{name}.bytes: {f}");
        assert!(f["category"].is_string(), "{f}");
        assert!(matches!(f["unit"].as_str(), Some("us" | "GB/s")), "{f}");
        assert!(matches!(f["timing"].as_str(), Some("host-clock" | "device-events")), "{f}");
        // Present in every figure, null where it does not apply.
        for key in ["fraction_of_ceiling", "baseline", "speedup"] {
            assert!(f.get(key).is_some(), "{name} lacks {key}: {f}");
        }
    }
    let frac = |name: &str| figures.iter().find(|f| f["name"] == name).and_then(|f| f["fraction_of_ceiling"].as_f64());
    assert_eq!(frac("d2d_copy"), Some(1.0));
    assert!(frac("add_index_f32").is_some_and(|x| x > 0.0));
    assert!(frac("launch_empty").is_none());

    let bytes = std::fs::read(&png).expect("PNG file");
    let _ = std::fs::remove_file(&png);
    assert!(bytes.len() > 100 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
}

#[test]
fn bench_collective_on_the_host_runs_two_ranks() {
    let (json, png) = (temp("collective.json"), temp("collective.png"));
    let out = gpuport(&[
        "bench",
        "--collective",
        "--quick",
        "--device",
        "host",
        "--json",
        json.to_str().expect("utf-8 temp path"),
        "--plot",
        png.to_str().expect("utf-8 temp path"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("busbw") && stdout.contains("peer copy host -> host"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON file")).expect("valid JSON");
    let _ = std::fs::remove_file(&json);
    let c = &report["collective"];
    assert_eq!(c["ranks"], 2);
    assert_eq!(c["engine"], "host");
    assert_eq!(c["dtype"], "float32");
    let points = c["points"].as_array().expect("points");
    assert!(points.len() >= 3, "{c}");
    for p in points {
        for key in ["time_us", "algbw_gb_per_s", "busbw_gb_per_s"] {
            assert!(p[key].as_f64().is_some_and(|v| v > 0.0 && v.is_finite()), "{key}: {p}");
        }
    }
    assert!(c["peer_copy"]["gb_per_s"].as_f64().is_some_and(|v| v > 0.0), "{c}");
    assert_eq!(report["ceiling"]["name"], "d2d_copy");
    let bytes = std::fs::read(&png).expect("PNG file");
    let _ = std::fs::remove_file(&png);
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // One rank is a usage error that says what is accepted.
    let out = gpuport(&["bench", "--collective", "--device", "host", "--devices", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("accepted: --devices 2..="), "{}", text(&out));
}

#[test]
fn bad_device_exits_2_naming_the_spec() {
    for cmd in ["bench", "demo"] {
        let out = gpuport(&[cmd, "--device", "tpu:0"]);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("tpu:0"), "{cmd}: {stderr}");
    }
}

#[test]
fn usage_errors_exit_2() {
    for args in [&["bench", "--frobnicate"][..], &["nonsense"], &["bench", "--json"], &["info", "extra"]] {
        let out = gpuport(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
    }
    let out = gpuport(&["--help"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("bench"));
}

#[test]
fn a_saved_report_is_redrawn_and_a_bad_one_exits_2() {
    // A report `gpuport bench --device cuda:0 --json` wrote on the H100 (BENCHMARKS.md, `gpuport bench`).
    // The build tree's path, or the working directory's (the GPU bundle runs from the repo root).
    let saved = "crates/gpuport-cli/tests/data/bench-h100-2026-11-22.json";
    let built = format!("{}/../../{saved}", env!("CARGO_MANIFEST_DIR"));
    let report = if std::path::Path::new(&built).exists() { built.as_str() } else { saved };
    let png = temp("replot.png");
    let out = gpuport(&["plot", report, png.to_str().expect("utf-8 temp path")]);
    assert!(out.status.success(), "{}", text(&out));
    let bytes = std::fs::read(&png).expect("PNG file");
    let _ = std::fs::remove_file(&png);
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");

    let not_a_report = report.replace("bench-h100-2026-11-22.json", "not-a-report.txt");
    assert!(std::path::Path::new(&not_a_report).exists(), "{not_a_report} is missing");
    let out = gpuport(&["plot", &not_a_report, "/tmp/never.png"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("not a `gpuport bench --json` report"), "{}", text(&out));
}

/// Runs `gpuport bench --quick --device host` with `extra`, which must be
/// refused as bad usage before any figure is taken.
fn refused_before_running(extra: &[&str], says: &[&str]) {
    let mut args = vec!["bench", "--quick", "--device", "host"];
    args.extend_from_slice(extra);
    let out = gpuport(&args);
    assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for s in says {
        assert!(stderr.contains(s), "{extra:?}: stderr lacks {s:?}: {stderr}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("ceiling") && !stdout.contains("d2d_copy"), "{extra:?}: the bench ran: {stdout}");
}

#[test]
fn a_chart_path_not_ending_in_png_is_refused_before_the_run() {
    for name in ["chart.jpg", "chart", "chart.png.txt"] {
        let path = temp(name);
        refused_before_running(&["--plot", path.to_str().expect("utf-8 temp path")], &["--plot", ".png"]);
        assert!(!path.exists(), "{name} was written");
    }
    // Upper case is a PNG name too (and is checked, then drawn, only after the run).
    let upper = temp("chart-upper.PNG");
    let out = gpuport(&["bench", "--quick", "--device", "host", "--plot", upper.to_str().expect("utf-8 temp path")]);
    let _ = std::fs::remove_file(&upper);
    assert!(out.status.success(), "{}", text(&out));
    // `gpuport plot` checks its output the same way.
    let out = gpuport(&["plot", "no-such-report.json", temp("replot.jpg").to_str().expect("utf-8 temp path")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(".png"), "{}", text(&out));
}

#[test]
fn output_paths_in_missing_or_unwritable_folders_are_refused_before_the_run() {
    let missing = temp("no-such-folder");
    let json = missing.join("bench.json");
    let png = missing.join("bench.png");
    refused_before_running(&["--json", json.to_str().expect("utf-8")], &["--json", "does not exist"]);
    refused_before_running(&["--plot", png.to_str().expect("utf-8")], &["--plot", "does not exist"]);
    // A folder is not a file.
    let dir = std::env::temp_dir();
    refused_before_running(&["--json", dir.to_str().expect("utf-8")], &["--json", "folder"]);
    // /proc refuses new files even to root.
    if cfg!(target_os = "linux") {
        refused_before_running(&["--json", "/proc/gpuport-bench.json"], &["--json", "cannot create"]);
    }
    // A good path beside a bad one: nothing is written.
    let good = temp("good.json");
    refused_before_running(&["--json", good.to_str().expect("utf-8"), "--plot", "chart.gif"], &[".png"]);
    assert!(!good.exists(), "the good --json path was written although --plot was refused");
}

#[test]
fn version_is_the_gpuport_crates() {
    let out = gpuport(&["--version"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("gpuport {}\n", gpuport::VERSION));
}

/// Pixels of the PNG at `path` that are not white.
fn inked_pixels(path: &std::path::Path) -> usize {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).expect("open the png")));
    let mut reader = decoder.read_info().expect("a png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("png size")];
    let info = reader.next_frame(&mut buf).expect("png pixels");
    buf[..info.buffer_size()].chunks(info.color_type.samples()).filter(|px| px.iter().any(|&c| c < 250)).count()
}

#[test]
fn memory_plot_draws_a_recorded_history_and_refuses_a_file_that_is_not_a_snapshot() {
    use gpuport::memory::{history, Allocator, CachingPool, PoolConfig};
    use gpuport::{Device, HostDevice};
    let d = HostDevice::open(0).expect("host");
    let pool = Arc::new(CachingPool::<gpuport::Host>::new(d.clone(), PoolConfig::default()));
    let alloc = Allocator::<gpuport::Host>::from_arc(pool.clone());
    let (s1, s2) = (d.create_stream().expect("stream"), d.create_stream().expect("stream"));
    history::start(history::HistoryConfig::default());
    let mut kept = Vec::new();
    for i in 1..=6 {
        kept.push(alloc.alloc(i << 20, &s1).expect("alloc"));
        kept.push(alloc.alloc(i << 19, &s2).expect("alloc"));
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    kept.drain(..6);
    history::stop();
    drop(kept);
    let key = history::DeviceKey { backend: gpuport::BackendKind::Host, ordinal: 0 };
    let snap = history::Snapshot::of_pool(key, &pool.report());
    history::clear();
    let file = temp("snapshot.pickle");
    snap.write_pickle(&file).expect("write the snapshot");
    let png_path = temp("memory.png");
    let out = gpuport(&["memory", "plot", file.to_str().expect("utf-8"), "-o", png_path.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(inked_pixels(&png_path) > 2000, "the chart is nearly blank");
    let not_a_snapshot = temp("not-a-snapshot.pickle");
    std::fs::write(&not_a_snapshot, b"hello").expect("write");
    let out =
        gpuport(&["memory", "plot", not_a_snapshot.to_str().expect("utf-8"), "-o", png_path.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    assert!(text(&out).contains("not-a-snapshot"), "{}", text(&out));
    for p in [file, png_path, not_a_snapshot] {
        let _ = std::fs::remove_file(p);
    }
}
