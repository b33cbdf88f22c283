//! Rules a binding's conversions follow, moved out of the Python binding
//! (issue 32): a shape's extents (`dynamic::array::extent_from`), the
//! routes of `from_dlpack` and `asarray` and the lazy views a table's
//! import refuses (`dynamic::import_route`), `__cuda_stream__`
//! (`dynamic::stream_protocol`), an array range's device
//! (`dynamic::raw::Place`), C strings (`dynamic::module::c_string`) and
//! the allocator hooks' sizes (`dynamic::memory`).

use gpuport::array::ShapeError;
use gpuport::dynamic::array::{extent_from, GivenExtent, MAX_EXTENT};
use gpuport::dynamic::import_route::{
    asarray_route, from_dlpack_route, protocol_route, AsarrayRoute, DlpackRoute, Offer, ProtocolCall, DLPACK_CALLS,
};
use gpuport::Error;

#[test]
fn extents_are_non_negative_and_fit_in_i64() {
    assert_eq!(extent_from(GivenExtent::Int(0)).unwrap(), 0);
    assert_eq!(extent_from(GivenExtent::Int(i64::MAX)).unwrap() as u64, MAX_EXTENT);
    let e = extent_from(GivenExtent::Int(-1)).unwrap_err();
    assert!(matches!(e, Error::Shape(ShapeError::NegativeExtent { value: -1 })), "{e:?}");
    assert_eq!(e.python_message(None), "extent -1 is negative; extents must be non-negative");
    let e = extent_from(GivenExtent::Wide("9223372036854775808".into())).unwrap_err();
    assert_eq!(
        e.python_message(None),
        "extent 9223372036854775808 is out of range: extents must be non-negative and at most 9223372036854775807"
    );
}

/// What a `from_dlpack` probe looks for, and what `__dlpack__` offers (never asked).
const GPUPORT_ARRAY: &str = "gpuport array";
const TABLE: &str = "exchange table";
const DLPACK: &str = "__dlpack__";

/// `from_dlpack_route` for an object offering `offered`, and the offers it asked about.
fn dlpack_route_of(copy: Option<bool>, offered: &[&str]) -> (DlpackRoute<&'static str>, Vec<&'static str>) {
    let asked = std::cell::RefCell::new(Vec::new());
    let probe = |o: &'static str| {
        asked.borrow_mut().push(o);
        offered.contains(&o)
    };
    let route =
        from_dlpack_route(copy, || Ok::<_, ()>(probe(GPUPORT_ARRAY)), || Ok(probe(TABLE).then_some("the table")))
            .unwrap();
    (route, asked.into_inner())
}

#[test]
fn from_dlpack_takes_its_own_arrays_then_the_table_then_the_protocol() {
    let protocol = |ask_copy, host_copy| DlpackRoute::Protocol(ProtocolCall { ask_copy, host_copy });
    // A gpuport array (whose type has a table too) is taken as itself.
    assert_eq!(
        dlpack_route_of(None, &[GPUPORT_ARRAY, TABLE, DLPACK]),
        (DlpackRoute::GpuportArray, vec![GPUPORT_ARRAY])
    );
    // The table route carries the table the probe found.
    assert_eq!(
        dlpack_route_of(None, &[TABLE, DLPACK]),
        (DlpackRoute::ExchangeTable("the table"), vec![GPUPORT_ARRAY, TABLE])
    );
    assert_eq!(dlpack_route_of(None, &[DLPACK]).0, protocol(None, false));
    // copy=True: the producer is not asked for a copy, gpuport makes one; no table.
    assert_eq!(dlpack_route_of(Some(true), &[GPUPORT_ARRAY, TABLE]), (protocol(None, true), vec![]));
    assert_eq!(dlpack_route_of(Some(false), &[TABLE]), (protocol(Some(false), false), vec![]));
    assert_eq!(protocol_route(Some(true)), ProtocolCall { ask_copy: None, host_copy: true });
    // A failing probe is the route's failure.
    assert_eq!(from_dlpack_route(None, || Err::<bool, _>("probe"), || Ok(None::<()>)), Err("probe"));
    assert_eq!(from_dlpack_route(None, || Ok(false), || Err::<Option<()>, _>("table")), Err("table"));
}

#[test]
fn dlpack_is_called_versioned_first_then_legacy() {
    assert_eq!(DLPACK_CALLS, [Some((1, gpuport::dlpack::ffi::DLPACK_MINOR_VERSION)), None]);
}

#[test]
fn asarray_tries_itself_then_dlpack_then_the_interface_then_numpy() {
    use Offer::*;
    let route_of = |offered: &[Offer]| {
        let mut asked = Vec::new();
        let route = asarray_route(|o| {
            asked.push(o);
            Ok::<_, ()>(offered.contains(&o))
        })
        .unwrap();
        (route, asked)
    };
    assert_eq!(route_of(&[GpuportArray, Dlpack]), (AsarrayRoute::Itself, vec![GpuportArray]));
    // CuPy offers both: DLPack first, and the interface is not read.
    assert_eq!(route_of(&[Dlpack, CudaArrayInterface]), (AsarrayRoute::Dlpack, vec![GpuportArray, Dlpack]));
    assert_eq!(route_of(&[CudaArrayInterface]).0, AsarrayRoute::CudaArrayInterface);
    assert_eq!(route_of(&[]), (AsarrayRoute::NumpyConversion, vec![GpuportArray, Dlpack, CudaArrayInterface]));
}

#[test]
fn cuda_stream_gives_version_zero_and_a_handle() {
    use gpuport::dynamic::stream_protocol::{
        cuda_stream_handle, keeps_stream_object, stream_handle, GivenItem::*, GivenValue, StreamArgError,
    };
    use gpuport::error::python::ExceptionClass;
    assert_eq!(cuda_stream_handle("S", GivenValue::Tuple(vec![Int(0), Int(5)])), Ok(5));
    let refused = |v| cuda_stream_handle("S", v).unwrap_err();
    let e = refused(GivenValue::Tuple(vec![Int(1), Int(5)]));
    assert_eq!(e.to_string(), "S.__cuda_stream__ gave version 1; gpuport accepts version 0 only, (0, handle)");
    assert_eq!(e.python_class(), ExceptionClass::Value);
    assert!(matches!(refused(GivenValue::Tuple(vec![Int(-1), Int(5)])), StreamArgError::Version { version: -1, .. }));
    let expected = "S.__cuda_stream__ must give a 2-tuple of ints (version, handle), with version 0; got";
    for (value, got) in [
        (GivenValue::Other("list".into()), "a list"),
        (GivenValue::Other("int".into()), "an int"),
        (GivenValue::Tuple(vec![Int(0)]), "a tuple of 1 item(s)"),
        (GivenValue::Tuple(vec![Int(0), Other("str".into())]), "a str as the handle"),
        (GivenValue::Tuple(vec![Other("float".into()), Int(5)]), "a float as the version"),
    ] {
        let e = refused(value);
        assert_eq!(e.to_string(), format!("{expected} {got}"));
        assert_eq!(e.python_class(), ExceptionClass::Type);
    }
    assert_eq!(stream_handle(-2), Err(StreamArgError::NotAHandle(-2)));
    assert_eq!(StreamArgError::NotAHandle(-2).to_string(), "stream -2 is not a stream handle");
    assert_eq!(stream_handle(0), Ok(0));
    assert!(keeps_stream_object(7, false));
    assert!(!keeps_stream_object(0, false) && !keeps_stream_object(7, true));
}

#[test]
fn lazy_views_are_refused_naming_the_bit_and_its_resolve() {
    use gpuport::dynamic::import_route::{refuse_lazy_views, LazyView};
    let set = |bits: &'static [LazyView]| move |v: LazyView| Ok::<_, ()>(bits.contains(&v));
    let refusal = |bits| refuse_lazy_views(false, set(bits), || "Tensor".into()).unwrap();
    assert!(refusal(&[]).is_ok());
    let e = refusal(&[LazyView::Negative]).unwrap_err();
    assert!(matches!(e, Error::DLPack(_)), "{e:?}");
    assert_eq!(
        e.python_message(None),
        "from_dlpack: the Tensor has the negative bit set (a lazy view: its memory holds the values without the \
         negative applied, which DLPack cannot describe); call .resolve_neg() on it first, as its own __dlpack__ requires"
    );
    assert!(refusal(&[LazyView::Conjugate, LazyView::Negative]).unwrap_err().to_string().contains("resolve_conj()"));
    // A gpuport array is not asked.
    let never = |_| -> Result<bool, ()> { panic!("asked") };
    assert!(refuse_lazy_views(true, never, || "MemArray".into()).unwrap().is_ok());
    assert_eq!(refuse_lazy_views(false, |_| Err::<bool, _>("probe"), String::new).unwrap_err(), "probe");
    assert_eq!((LazyView::Conjugate.method(), LazyView::Negative.method()), ("is_conj", "is_neg"));
}

#[test]
fn a_range_of_unknown_device_takes_its_arrays_device() {
    use gpuport::dynamic::raw::Place;
    let host = gpuport::open("host").unwrap();
    let spec = |p: Place| p.device().map(|d| d.info().spec());
    assert_eq!(spec(Place::Device(None).on_known_device(&host)), Some(host.info().spec()));
    assert!(matches!(Place::Host.on_known_device(&host), Place::Host));
    assert!(matches!(Place::Unknown.on_known_device(&host), Place::Unknown));
    assert!(matches!(Place::Null.on_known_device(&host), Place::Null));
}

#[test]
fn c_strings_refuse_a_nul_byte_inside() {
    use gpuport::dynamic::module::{c_string, InteriorNul};
    assert_eq!(&*c_string("ListOfBytes", 0, b"-lineinfo").unwrap(), b"-lineinfo\0");
    assert_eq!(&*c_string("ListOfBytes", 0, b"").unwrap(), b"\0");
    let e = c_string("ListOfBytes", 2, b"-O3\0x").unwrap_err();
    assert_eq!(e, InteriorNul { list: "ListOfBytes", item: 2 });
    assert_eq!(e.to_string(), "ListOfBytes: item 2 contains a NUL byte");
    assert!(c_string("ListOfBytes", 0, b"\0").is_err());
}

#[test]
fn allocator_hooks_take_sizes_an_allocation_can_span() {
    use gpuport::dynamic::memory::{signed_request, unsigned_request, RequestTooLarge};
    assert_eq!(signed_request(1).unwrap(), Some(1));
    assert_eq!(signed_request(0).unwrap(), None);
    let e = signed_request(-5).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { name: "size", .. }), "{e:?}");
    assert_eq!(e.to_string(), "invalid argument size: -5 < 0");
    assert_eq!(unsigned_request(0), Ok(0));
    assert_eq!(unsigned_request(isize::MAX as usize), Ok(isize::MAX as usize));
    let e = unsigned_request(1 << 63).unwrap_err();
    assert_eq!(e, RequestTooLarge { size: 1 << 63 });
    assert_eq!(e.to_string(), "cannot allocate 9223372036854775808 bytes: more than isize::MAX");
}

#[test]
fn allocator_hooks_read_a_negative_device_id_as_their_library_does() {
    use gpuport::dynamic::memory::{hook_device, NegativeId};
    use gpuport::BackendKind;
    // PyTorch: -1 is CPU memory, the host backend.
    assert_eq!(hook_device(BackendKind::Cuda, -1, NegativeId::Host).unwrap().info().spec(), "host");
    // CuPy: a negative id names no device.
    for id in [-1, i32::MIN] {
        let e = hook_device(BackendKind::Cuda, id, NegativeId::Refused).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name: "device id", .. }), "{e}");
        assert!(e.to_string().contains(&format!("{id} is negative")), "{e}");
    }
    // Ordinals open the backend's device.
    assert_eq!(hook_device(BackendKind::Host, 0, NegativeId::Refused).unwrap().info().spec(), "host");
}

/// The tests here that allocate through the hooks share the host device's
/// pool: one at a time, so that a test's pool counters are its own.
static HOST_POOL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn allocator_hooks_remember_targets_per_request_kind_not_per_device() {
    use gpuport::dynamic::memory::{alloc_kept, release_by_address, NegativeId};
    use gpuport::BackendKind;
    let _one = HOST_POOL.lock().unwrap_or_else(|p| p.into_inner());
    // PyTorch's -1 (the host) is remembered after the first request; CuPy's
    // -1 is still refused afterwards, on the same thread, every time.
    for _ in 0..3 {
        // SAFETY: 0 is the default stream.
        let ptr = unsafe { alloc_kept(BackendKind::Cuda, -1, NegativeId::Host, 0, 64) }.unwrap();
        assert!(release_by_address(ptr));
        // SAFETY: as above.
        let e = unsafe { alloc_kept(BackendKind::Cuda, -1, NegativeId::Refused, 0, 64) }.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name: "device id", .. }), "{e}");
    }
    // Remembered targets allocate as the first request did: distinct live
    // blocks, each released once.
    // SAFETY: as above.
    let ptrs: Vec<u64> =
        (0..4).map(|_| unsafe { alloc_kept(BackendKind::Host, 0, NegativeId::Refused, 0, 256) }.unwrap()).collect();
    let mut unique = ptrs.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ptrs.len(), "a remembered target handed out a live block twice");
    for p in ptrs {
        assert!(release_by_address(p));
        assert!(!release_by_address(p));
    }
}

#[test]
fn allocator_hooks_free_to_the_pool_on_the_requests_stream() {
    use gpuport::dynamic::memory::{alloc_kept, release_by_address, statistics, NegativeId};
    use gpuport::BackendKind;
    let _one = HOST_POOL.lock().unwrap_or_else(|p| p.into_inner());
    let dev = gpuport::open("host").unwrap();
    // A size no other test here asks for.
    const SIZE: usize = 3 << 20;
    // SAFETY: 0 is the default stream.
    let alloc = || unsafe { alloc_kept(BackendKind::Host, 0, NegativeId::Refused, 0, SIZE) }.unwrap();
    let first = alloc();
    assert!(release_by_address(first));
    let (before, report) = statistics(&dev).unwrap();
    let reuses = report.expect("the host device's resource is the caching pool").counters.same_stream_reuses;
    let second = alloc();
    assert_eq!(statistics(&dev).unwrap().0.current_bytes, before.current_bytes + SIZE, "counted while kept");
    assert!(release_by_address(second));
    let (after, report) = statistics(&dev).unwrap();
    assert_eq!(after.current_bytes, before.current_bytes, "counted as freed once released");
    // Given back on the request's stream: the next request of the size on
    // it takes the same block from that stream's own list.
    assert_eq!(second, first, "the block did not come back to the request's stream");
    assert_eq!(report.unwrap().counters.same_stream_reuses, reuses + 1, "not a same-stream reuse");
}
