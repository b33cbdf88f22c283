//! Tests of `python.rs`: the Python wording and classes of core errors.
use super::*;
use crate::error::array::{Location, ResidencyError};
use crate::error::memory::MemoryError;
use crate::error::StoreErrorKind;

/// What the Python suite (`tests/test_soundness.py`) refuses in a message.
const RUST_FORMS: [&str; 9] =
    ["Some(", "None)", "LockId", "exit()", "Location::", "--features", "::", "isize", "usize"];

fn graph(backend: BackendKind, op: &'static str, kind: GraphErrorKind, reason: &str) -> Error {
    Error::Graph { backend, op, kind, reason: reason.into() }
}

#[test]
fn every_sample_speaks_python_and_raises_a_gpuport_class() {
    let samples = samples();
    for e in &samples {
        let msg = e.python_message(None);
        for form in RUST_FORMS {
            assert!(!msg.contains(form), "{form:?} in {msg:?}");
        }
        assert!(!matches!(e.python_class(), ExceptionClass::Value | ExceptionClass::Buffer), "{e}");
    }
    // The families a core error can reach, each sampled at least once:
    // gpuport's own classes but the base and the one only the binding raises.
    let reached = ExceptionClass::GPUPORT
        .into_iter()
        .filter(|c| !matches!(c, ExceptionClass::Gpu | ExceptionClass::UnsupportedDType));
    for class in reached {
        assert!(samples.iter().any(|e| e.python_class() == class), "no sample raises {}", class.name());
    }
}

#[test]
fn lock_errors_name_the_python_call_and_the_with_block() {
    let e = Error::from(LockError::Locked { op: "move_to", held: 7 });
    assert_eq!(e.python_class(), ExceptionClass::Lock);
    assert_eq!(
        e.python_message(None),
        "move_memory: the array is locked by a `with array.get_dlpack()` block (lock id 7), in this thread or \
         another; inside that block use its context object (e.g. numpy.from_dlpack(ctx)), or call this after the block"
    );
    let e = Error::from(LockError::WrongId { op: "to_dlpack", held: 7, given: 9 });
    assert_eq!(
        e.python_message(None),
        "the export: the get_dlpack block with lock id 9 does not hold the array; the block with lock id 7 does"
    );
    assert!(e.python_message(Some("__dlpack__")).starts_with("__dlpack__: the get_dlpack block"));
    let e = Error::from(LockError::AlreadyLocked { held: 7, requested: 9 });
    assert_eq!(
        e.python_message(Some("ignored")),
        "get_dlpack: the array is already locked by a `with array.get_dlpack()` block (lock id 7); blocks on one \
         array cannot nest or overlap, in one thread or several"
    );
    // The wording the binding's tests quote (test_threads*.py, test_soundness.py).
    let e = Error::from(LockError::Busy { what: "MemArray" });
    assert_eq!(e.python_class(), ExceptionClass::Lock);
    assert_eq!(
        e.python_message(Some("ignored")),
        "this MemArray is busy in this thread: a call on it is still running and the Python code it ran (a \
         callback such as __index__, __dlpack__ or __del__) called it again; call it after that call returns"
    );
}

#[test]
fn residency_errors_say_move_memory() {
    let e = Error::from(ResidencyError { op: "host_view", needed: Location::Host, current: Location::Device });
    assert_eq!(e.python_class(), ExceptionClass::Residency);
    assert_eq!(
        e.python_message(None),
        "the export needs the host copy, but only the device copy is current; call move_memory(\"host\") first"
    );
    assert_eq!(
        e.python_message(Some("to_numpy")),
        "to_numpy needs the host copy, but only the device copy is current; call move_memory(\"host\") first"
    );
}

#[test]
fn a_backend_not_compiled_in_asks_for_another_package_not_a_cargo_feature() {
    let e = Error::BackendNotCompiled { backend: BackendKind::Cuda, feature: "cuda" };
    assert_eq!(e.python_class(), ExceptionClass::Unavailable);
    assert_eq!(
        e.python_message(None),
        "the cuda backend is not compiled into this gpuport build; install a gpuport package built with cuda support"
    );
    let e = Error::NoDevice { backend: BackendKind::Cuda, reason: "no device".into() };
    assert_eq!(
        (e.python_class(), e.python_message(None).as_str()),
        (ExceptionClass::Unavailable, "cuda is unavailable: no device")
    );
    let e = Error::LibraryNotFound { backend: BackendKind::Host, library: "libx", tried: "libx.so".into() };
    assert_eq!(e.python_class(), ExceptionClass::Unavailable);
}

#[test]
fn shape_errors_write_shapes_as_python_tuples() {
    let e = Error::from(ShapeError::TooLarge { shape: vec![1 << 40, 1 << 40], elem_size: 8 });
    assert_eq!(e.python_class(), ExceptionClass::Shape);
    assert_eq!(
        e.python_message(None),
        "shape (1099511627776, 1099511627776) of 8-byte elements is too large: the number of elements times the \
         element size must be at most 9223372036854775807 bytes"
    );
    let e = Error::from(ShapeError::NotI64 { what: "extent", axis: 1, value: 1 << 70 });
    assert_eq!(
        e.python_message(None),
        "extent 1180591620717411303424 on axis 1 is too large: DLPack takes at most 9223372036854775807"
    );
    let e = Error::from(ShapeError::LengthMismatch { what: "copy_from_slice", shape: vec![2, 3], expected: 6, got: 5 });
    assert_eq!(e.python_message(None), "read_numpy_array: shape (2, 3) has 6 elements, but 5 were given");
    let e = Error::from(ShapeError::ShapeMismatch { what: "x", expected: vec![2], found: vec![3] });
    assert_eq!(e.python_message(None), "x: shape (3,) differs from (2,); the arrays must have the same shape");
    let e = Error::from(ShapeError::IndexOutOfBounds { index: vec![4], shape: vec![3] });
    assert_eq!(
        e.python_message(None),
        "index (4,) is out of bounds for shape (3,); each index must be below its extent"
    );
    let e = Error::from(ShapeError::OutOfRange {
        extents: vec![4, 2],
        strides: vec![-1, 4],
        reason: "reaches before the start".into(),
    });
    assert_eq!(
        e.python_message(None),
        "strided layout with extents (4, 2) and strides (-1, 4) reaches before the start"
    );
    // No Python wording of its own: the core's text has nothing Rust in it.
    let e = Error::from(ShapeError::InvalidSlice { op: "step", axis: 0, reason: "step 0 is not allowed".into() });
    assert_eq!(e.python_message(None), "invalid step on axis 0: step 0 is not allowed");
}

#[test]
fn out_of_bounds_is_an_invalid_argument_in_bytes() {
    let e = Error::OutOfBounds { what: "dst", offset: 0, len: 64, capacity: 16 };
    assert_eq!(e.python_class(), ExceptionClass::InvalidArgument);
    assert_eq!(e.python_message(None), "dst: 64 bytes at offset 0 reach past the end of a buffer of 16 bytes");
    let e = Error::InvalidArgument { name: "shape", reason: "negative extent -1".into() };
    assert_eq!(e.python_class(), ExceptionClass::InvalidArgument);
    assert_eq!(e.python_message(None), "invalid argument shape: negative extent -1");
}

#[test]
fn dlpack_errors_write_tuples_and_dlpack_arguments_raise_the_standard_builtins() {
    let e = Error::from(DLPackError::NotContiguous { shape: vec![4, 4], strides: vec![1, 8] });
    assert_eq!(e.python_class(), ExceptionClass::DLPack);
    assert_eq!(
        e.python_message(None),
        "DLPack tensor with shape (4, 4) and strides (1, 8) (elements) is not compact row-major; export a contiguous copy"
    );
    let e = Error::from(DLPackError::Overflow { shape: vec![2], strides: vec![-3], byte_offset: 16 });
    assert_eq!(
        e.python_message(None),
        "DLPack tensor shape (2,) with strides (-3,) and byte offset 16 overflows the address space"
    );
    let e = Error::from(DLPackError::BadStream { reason: "stream=-1 is not accepted".into() });
    assert_eq!((e.python_class(), e.python_class().name()), (ExceptionClass::Value, "ValueError"));
    assert_eq!(e.python_message(Some("__dlpack__")), "stream=-1 is not accepted");
    let e = Error::from(DLPackError::Refused { reason: "copy=False needs a copy".into() });
    assert_eq!((e.python_class(), e.python_class().name()), (ExceptionClass::Buffer, "BufferError"));
    assert_eq!(e.python_message(None), "copy=False needs a copy");
}

#[test]
fn graph_errors_name_the_rule_and_what_python_code_to_write_instead() {
    let e =
        graph(BackendKind::Host, "synchronize", GraphErrorKind::SynchronousCall, "the stream is capturing (Active)");
    assert_eq!((e.python_class(), e.python_kind()), (ExceptionClass::Graph, Some("synchronous_call")));
    assert_eq!(
        e.python_message(Some("Stream.synchronize")),
        "Stream.synchronize: the stream is capturing a graph, so its work has not run (it runs at each \
         Graph.replay()) and nothing can wait for it; leave the `with ... capture()` block first, and enqueue only \
         asynchronous work (launch_kernel, memcpy_async, memset_async) on a capturing stream"
    );
    let e = graph(BackendKind::Cuda, "synchronize_device", GraphErrorKind::SynchronousCall, "CaptureMode::Global");
    assert_eq!(
        e.python_message(None),
        "synchronize_device: a graph capture in mode=\"global\" is running (on a GPU: the rule spans every GPU), and \
         this call would wait for the device or its default stream, which such a capture forbids on every thread; \
         leave the `with ... capture()` block first, or capture with mode=\"relaxed\" to allow waits outside the \
         capturing stream"
    );
    let reason = "a capture (Relaxed mode) is running on cuda:0, and a wait for the whole device would invalidate it";
    let e = graph(BackendKind::Cuda, "synchronize_device", GraphErrorKind::SynchronousCall, reason);
    assert_eq!(
        e.python_message(Some("device_synchronize")),
        "device_synchronize: a graph capture (mode=\"relaxed\") is running on this GPU, and a wait for the whole \
         device would invalidate it in every mode (CUDA and HIP refuse it); leave the `with ... capture()` block \
         first, or wait for the streams you need (Stream.synchronize) instead"
    );
    let e = graph(BackendKind::Host, "end_capture", GraphErrorKind::Invalidated, "an earlier error");
    assert_eq!(
        e.python_message(None),
        "end_capture: the capture was invalidated (an earlier error) and what it recorded is discarded; the stream \
         is usable again: capture again"
    );
    let e = graph(BackendKind::Rocm, "launch", GraphErrorKind::NestedLaunch, "not captured");
    assert_eq!(
        e.python_message(None),
        "launch: on the rocm backend a graph cannot be replayed into a capturing stream; replay it after the \
         capture ends, or on another stream"
    );
    let e =
        graph(BackendKind::Host, "add_index", GraphErrorKind::NotCapturable, "MemArray operations are not captured");
    assert_eq!(e.python_message(None), "add_index: MemArray operations are not captured");
}

#[test]
fn kind_names_are_the_python_strings() {
    use CollectiveErrorKind as C;
    use GraphErrorKind as G;
    // In declaration order, five to a line.
    let graph = [G::SynchronousCall, G::AlreadyCapturing, G::DefaultStream, G::Invalidated, G::Isolation]
        .into_iter()
        .chain([G::CapturedEvent, G::UpdateRefused, G::PoolAllocation, G::OutOfMemory, G::NestedLaunch])
        .chain([G::WrongThread, G::NotCapturable])
        .map(G::name)
        .collect::<Vec<_>>();
    assert_eq!(
        graph.join(" "),
        "synchronous_call already_capturing default_stream invalidated isolation captured_event update_refused \
         pool_allocation out_of_memory nested_launch wrong_thread not_capturable"
    );
    let collective = [C::Library, C::Engine, C::Mismatch, C::Timeout, C::Aborted, C::RemoteFailure].map(C::name);
    assert_eq!(collective, ["library", "engine", "mismatch", "timeout", "aborted", "remote_failure"]);
    let peers = [C::PeerInitFailed { rank: 1 }, C::VersionMismatch { rank: 1 }].map(C::name);
    assert_eq!(peers, ["peer_init_failed", "version_mismatch"]);
}

#[test]
fn collective_errors_keep_their_text_and_carry_a_kind() {
    let e = Error::Collective {
        engine: "host".into(),
        rank: Some(1),
        kind: CollectiveErrorKind::Aborted,
        reason: "aborted".into(),
    };
    assert_eq!((e.python_class(), e.python_kind()), (ExceptionClass::Collective, Some("aborted")));
    assert_eq!(e.python_message(Some("all_reduce")), "host communicator (rank 1): aborted");
}

#[test]
fn errors_without_python_wording_keep_their_display_text() {
    let cases: Vec<(Error, ExceptionClass, &str)> = vec![
        (
            Error::OutOfMemory { backend: BackendKind::Cuda, ordinal: 0, bytes: 1 << 40 },
            ExceptionClass::OutOfMemory,
            "cuda:0: out of device memory allocating 1099511627776 bytes",
        ),
        (
            Error::DeviceMismatch { what: "stream", expected: "cuda:0".into(), found: "host".into() },
            ExceptionClass::DeviceMismatch,
            "stream belongs to host, but the operation runs on cuda:0",
        ),
        (
            Error::InvalidDeviceSpec { spec: "tpu:0".into(), reason: "unknown backend \"tpu\"".into() },
            ExceptionClass::InvalidDevice,
            "invalid device spec \"tpu:0\": unknown backend \"tpu\"; accepted: \"host\", \"cuda[:N]\", \"rocm[:N]\"",
        ),
        (
            Error::Unsupported { op: "add_index", backend: BackendKind::Host, hint: Some("use float32".into()) },
            ExceptionClass::Unsupported,
            "add_index is not supported by the host backend: use float32",
        ),
        (
            Error::HostTask("a kernel panicked".into()),
            ExceptionClass::Driver,
            "host stream work failed: a kernel panicked",
        ),
        (
            Error::KernelNotFound { name: "k".into(), available: "add_index".into() },
            ExceptionClass::Kernel,
            "kernel \"k\" not found in module; available: add_index",
        ),
        (
            Error::from(MemoryError::WouldWait { resource: "pool" }),
            ExceptionClass::Gpu,
            "memory resource \"pool\" would have waited for another thread (inside `without_waiting`)",
        ),
        (
            Error::Store { addr: "h:1".into(), kind: StoreErrorKind::Timeout, reason: "no answer".into() },
            ExceptionClass::Gpu,
            "gpuport store at h:1: no answer",
        ),
    ];
    for (e, class, text) in cases {
        assert_eq!((e.python_class(), e.python_kind()), (class, None), "{e}");
        assert_eq!(e.python_message(Some("call")), text);
        assert_eq!(e.python_message(None), e.to_string());
    }
}

#[test]
fn each_error_is_also_the_builtin_its_class_derives_from() {
    let cases: Vec<(Error, &str)> = vec![
        (Error::OutOfMemory { backend: BackendKind::Cuda, ordinal: 0, bytes: 8 }, "MemoryError"),
        (DLPackError::BadStream { reason: "stream=2".into() }.into(), "ValueError"),
        (DLPackError::Refused { reason: "copy=False".into() }.into(), "BufferError"),
        (DLPackError::ReadOnly.into(), "BufferError"),
        (ShapeError::IndexOutOfBounds { index: vec![4], shape: vec![3] }.into(), "ValueError"),
        (Error::OutOfBounds { what: "dst", offset: 0, len: 64, capacity: 16 }, "ValueError"),
        (Error::InvalidArgument { name: "n", reason: "negative".into() }, "ValueError"),
        (Error::InvalidDeviceSpec { spec: "tpu".into(), reason: "unknown".into() }, "ValueError"),
        (Error::DeviceMismatch { what: "stream", expected: "cuda:0".into(), found: "host".into() }, "ValueError"),
        (Error::Unsupported { op: "ipc", backend: BackendKind::Host, hint: None }, "NotImplementedError"),
        (LockError::AlreadyLocked { held: 1, requested: 2 }.into(), "RuntimeError"),
        (graph(BackendKind::Host, "update", GraphErrorKind::UpdateRefused, "3 nodes"), "RuntimeError"),
        (Error::HostTask("panicked".into()), "RuntimeError"),
    ];
    for (e, builtin) in cases {
        assert_eq!(e.python_class().builtin(), builtin, "{e}");
    }
    assert_eq!(ExceptionClass::UnsupportedDType.builtin(), "TypeError");
    assert_eq!(ExceptionClass::Gpu.builtin(), "RuntimeError");
}

#[test]
fn tuples_are_written_as_python_writes_them() {
    assert_eq!(tuple(&[2usize, 3]), "(2, 3)");
    assert_eq!(tuple(&[5usize]), "(5,)");
    assert_eq!(tuple::<usize>(&[]), "()");
    assert_eq!(tuple(&[-1isize, 8]), "(-1, 8)");
}

#[test]
fn a_dlpack_type_naming_no_copy_is_unavailable_and_says_use_device() {
    let e = Error::from(DLPackError::NoCopyOn { device_type: 2, device: "host".into(), device_copy: 1 });
    assert_eq!(e.python_class(), ExceptionClass::Unavailable);
    assert_eq!(
        e.python_message(None),
        "DLPack device type 2 is not where this array can live: it is on host (device copy: DLPack type 1, host \
         copy: 1); use \"device\" for the device copy"
    );
}

#[test]
fn a_graph_call_says_a_device_mismatch_in_the_graphs_terms_and_other_errors_as_usual() {
    let mismatch = |what| Error::DeviceMismatch { what, expected: "cuda:0".into(), found: "cuda:1".into() };
    let stream = mismatch("stream").python_message_of_graph_call("Graph.launch");
    assert!(stream.starts_with("Graph.launch: the stream belongs to cuda:1, but this graph was captured on cuda:0"));
    assert!(stream.ends_with("pass a stream of cuda:0 (None: its default stream)"), "{stream}");
    let of_graph = mismatch("graph").python_message_of_graph_call("Graph.update");
    assert!(of_graph.ends_with("pass a graph of cuda:0"), "{of_graph}");
    // Outside a graph call the mismatch keeps its own text.
    assert_eq!(mismatch("stream").python_message(None), mismatch("stream").to_string());
    let empty = graph(BackendKind::Host, "replay", GraphErrorKind::NotCaptured, "the graph holds no captured work");
    assert_eq!(empty.python_message_of_graph_call("Graph.replay"), empty.python_message(Some("Graph.replay")));
}
