"""asarray and read_numpy_array follow one rule for NumPy arrays of
non-native byte order (converted, as NumPy converts them), and take
ml_dtypes.bfloat16 arrays as gpuport's bfloat16."""

import sys

import numpy as np
import pytest

import gpuport

ml_dtypes = pytest.importorskip("ml_dtypes")

OTHER = ">" if sys.byteorder == "little" else "<"


@pytest.mark.parametrize("typestr", ["i4", "f8", "u2", "c8"])
def test_asarray_and_read_numpy_array_convert_non_native_byte_order(typestr):
    x = (np.arange(6) * 3 - 5).astype(OTHER + typestr).reshape(2, 3)
    assert not x.dtype.isnative
    a = gpuport.asarray(x, device="host")
    assert a.dtype == x.dtype.name
    np.testing.assert_array_equal(a.to_numpy(), x)
    m = gpuport.MemArray((2, 3), x.dtype.name, device="host")
    m.read_numpy_array(x, casting="equiv")  # a byte-order change only
    np.testing.assert_array_equal(m.to_numpy(), x)
    m.read_numpy_array(x[::-1].copy())  # the default rule converts it too
    np.testing.assert_array_equal(m.to_numpy(), x[::-1])
    with pytest.raises(TypeError, match="'equiv'"):
        m.read_numpy_array(x, casting="no")  # NumPy's rule: no change at all


def test_bfloat16_arrays_are_taken_as_bfloat16():
    x = np.array([1.0, -2.5, 3.0e3, 0.0078125], dtype=ml_dtypes.bfloat16)
    a = gpuport.asarray(x, device="host")
    assert a.dtype == "bfloat16"
    out = a.to_numpy()
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.view(np.uint16), x.view(np.uint16))
    assert gpuport.from_dlpack(x).dtype == "bfloat16"
    m = gpuport.MemArray(4, "bfloat16", device="host")
    m.read_numpy_array(x)
    np.testing.assert_array_equal(m.to_numpy().view(np.uint16), x.view(np.uint16))
    m.read_numpy_array(np.array([0.5, 1, 2, 4], np.float32))  # float32 to bfloat16: same_kind
    np.testing.assert_array_equal(m.to_numpy().astype(np.float32), [0.5, 1, 2, 4])
    f = gpuport.MemArray(4, "float32", device="host")
    f.read_numpy_array(x)  # bfloat16 to float32: safe
    np.testing.assert_array_equal(f.to_numpy(), x.astype(np.float32))
