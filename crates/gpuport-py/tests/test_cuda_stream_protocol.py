"""The cuda.core stream protocol, ``__cuda_stream__``, as gpuport consumes
and produces it: a method (or an attribute) giving ``(0, handle)``;
another shape or type is a TypeError, another version a ValueError, each
saying what is accepted; a foreign stream's object is kept while gpuport's
work on its handle runs."""

import gc
import weakref

import pytest

import gpuport
from gpuport import runtime as rt


class MethodStream:
    """A producer as cuda.core's and CuPy's streams are: a method."""

    def __init__(self, value, keep=None):
        self.value = value
        self.keep = keep  # the stream whose handle `value` names, kept alive

    def __cuda_stream__(self):
        return self.value


class AttributeStream:
    """A producer that holds the pair as an attribute."""

    def __init__(self, value):
        self.__cuda_stream__ = value


@pytest.mark.parametrize("kind", [MethodStream, AttributeStream])
def test_the_method_and_the_attribute_forms_are_both_accepted(kind):
    s = gpuport.Stream.external(kind((0, 0)), device="host")
    assert s.is_external and s.handle == 0
    buf = rt.malloc(8, device="host")
    rt.memset_async(buf, 3, 8, stream=kind((0, 0)))
    out = bytearray(8)
    rt.memcpy(out, buf, 8)
    assert bytes(out) == b"\x03" * 8


@pytest.mark.parametrize(
    "value, got",
    [
        ([0, 0], "a list"),
        (0, "an int"),
        ((0,), "a tuple of 1 item"),
        ((0, 0, 0), "a tuple of 3 item"),
        ((0, "0x10"), "a str as the handle"),
        (("0", 0), "a str as the version"),
        ((0.0, 0), "a float as the version"),
        ((0, None), "a NoneType as the handle"),
    ],
)
@pytest.mark.parametrize("kind", [MethodStream, AttributeStream])
def test_a_wrong_shape_or_type_is_a_type_error_saying_what_is_accepted(kind, value, got):
    for call in (
        lambda s: gpuport.Stream.external(s, device="host"),
        lambda s: rt.memset_async(rt.malloc(8, device="host"), 0, 8, stream=s),
        lambda s: gpuport.MemArray(3, device="host").add_index(stream=s),
    ):
        with pytest.raises(TypeError) as e:
            call(kind(value))
        msg = str(e.value)
        assert f"{kind.__name__}.__cuda_stream__ must give a 2-tuple of ints (version, handle)" in msg, msg
        assert "with version 0" in msg and got in msg, msg


@pytest.mark.parametrize("version", [1, 2, -1])
def test_a_wrong_version_is_a_value_error_naming_the_accepted_one(version):
    with pytest.raises(ValueError, match=rf"gave version {version}; gpuport accepts version 0 only, \(0, handle\)"):
        gpuport.Stream.external(MethodStream((version, 0)), device="host")
    with pytest.raises(ValueError, match="accepts version 0 only"):
        rt.memset_async(rt.malloc(8, device="host"), 0, 8, stream=AttributeStream((version, 0)))


def test_an_error_raised_by_the_method_goes_through():
    class Broken:
        def __cuda_stream__(self):
            raise RuntimeError("no stream here")

    with pytest.raises(RuntimeError, match="no stream here"):
        gpuport.Stream.external(Broken(), device="host")


def test_gpuport_streams_produce_the_protocol(device):
    s = gpuport.Stream(device)
    if device.backend == "host":
        with pytest.raises(TypeError, match="not a CUDA or ROCm stream"):
            s.__cuda_stream__()
        return
    version, handle = s.__cuda_stream__()
    assert (version, handle) == (0, s.handle) and handle != 0
    # What gpuport produces it consumes: the same stream, borrowed.
    assert gpuport.Stream.external(s, device=device).handle == handle
    assert gpuport.Stream.external(MethodStream(s.__cuda_stream__(), keep=s), device=device).handle == handle


def test_a_foreign_stream_object_is_kept_while_work_on_its_handle_runs(gpu_device):
    ours = gpuport.Stream(gpu_device)
    theirs = MethodStream(ours.__cuda_stream__(), keep=ours)
    gone = weakref.ref(theirs)
    buf = rt.malloc(1 << 20, device=gpu_device)
    rt.memset_async(buf, 1, 1 << 20, stream=theirs)
    del theirs
    gc.collect()
    assert gone() is not None, "kept until the memset has run"
    ours.synchronize()
    rt.device_synchronize(device=gpu_device)  # drops what completed work kept
    gc.collect()
    assert gone() is None


def _peer_stream(name):
    """A CUDA stream of a peer library on device 0, or a skip saying why."""
    if "cuda:0" not in [d.spec for d in gpuport.devices()]:
        pytest.skip("no CUDA device here")
    if name == "cupy":
        cupy = pytest.importorskip("cupy")
        return cupy.cuda.Stream(non_blocking=True)
    if name == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("torch has no CUDA here")
        return torch.cuda.Stream()
    core = pytest.importorskip("cuda.core")
    if not hasattr(core, "Device"):  # before cuda.core 1.0
        core = pytest.importorskip("cuda.core.experimental")
    dev = core.Device(0)
    dev.set_current()
    return dev.create_stream()


@pytest.mark.parametrize("peer", ["cupy", "torch", "cuda.core"])
def test_peer_streams_are_accepted_as_they_come(peer):
    """CuPy's and cuda.core's streams have the method; torch's stream is
    accepted through its ``cuda_stream`` handle when it lacks the method."""
    s = _peer_stream(peer)
    if not hasattr(s, "__cuda_stream__"):
        s = gpuport.Stream.external(s.cuda_stream, device="cuda:0")
    buf = rt.malloc(1 << 16, device="cuda:0")
    rt.memset_async(buf, 7, 1 << 16, stream=s)
    rt.device_synchronize(device="cuda:0")  # every stream of the device, the peer's too
    out = bytearray(1 << 16)
    rt.memcpy(out, buf, 1 << 16)
    # A count, not `bytes(out) == ...`: pytest's diff of two 64 KiB strings
    # takes minutes, which made a wrong value look like a hang.
    assert out.count(7) == 1 << 16, f"{out.count(7)} of {1 << 16} bytes set"
