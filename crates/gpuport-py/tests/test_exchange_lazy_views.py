"""The C exchange consumer keeps the refusals of the Python path: a tensor
marked conjugate or negative (torch's ``is_conj()``/``is_neg()``: its memory
holds the values without the bit applied) is refused, never imported as
wrong values, whatever the producer's table would give."""

import numpy as np
import pytest

import gpuport

from test_exchange_api import Tables, producer_class


@pytest.mark.parametrize("bit", ["conj", "neg"])
def test_a_conjugate_or_negative_view_is_refused_before_the_table_is_called(bit):
    tables = Tables()
    base = producer_class(tables.capsule(tables.table()))
    flags = {"is_conj": lambda self: bit == "conj", "is_neg": lambda self: bit == "neg"}
    cls = type("LazyView", (base,), flags)
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(gpuport.DLPackError, match=rf"{'conjugate' if bit == 'conj' else 'negative'} bit.*resolve_{bit}\(\)"):
        gpuport.from_dlpack(cls(x))
    assert tables.from_py_calls == 0 and not tables.live, "the table is not asked for the tensor"


def test_a_resolved_tensor_is_imported_through_the_table():
    tables = Tables()
    base = producer_class(tables.capsule(tables.table()))
    cls = type("Resolved", (base,), {"is_conj": lambda self: False, "is_neg": lambda self: False})
    x = np.arange(4, dtype=np.float32)
    m = gpuport.from_dlpack(cls(x))
    assert tables.from_py_calls == 1
    np.testing.assert_array_equal(m.to_numpy(), x)
