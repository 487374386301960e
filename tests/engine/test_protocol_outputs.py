"""What a backend may return (issue 26 item 4; conformance/protocol.py): plain tuples, NamedTuples, torch
tensors of any dtype, jax arrays and other array-likes are converted by one function; anything else, and an
array that cannot be converted, is a failure said in words; aliasing and mutation are found through any
array-like. Before protocol.py a plain 3-tuple failed with "The truth value of an array ... is ambiguous",
a 3-tuple for 2 fields with a NumPy TypeError, torch bfloat16 / float8 outputs as "backend raised
TypeError", and `torch.from_numpy(input)` passed the aliasing check."""
from __future__ import annotations

import pickle
from typing import NamedTuple

import ml_dtypes
import numpy as np
import pytest

from kvconform import reference
from kvconform.conformance.engine.protocol import (ALIAS, InputSnapshot, ProtocolViolation, aliased_inputs, protocol_outputs, structure_problem)
from protocol_backends import FORMS

torch = pytest.importorskip("torch")


class Pair(NamedTuple):
    first: object
    second: object


def _bits(x: np.ndarray) -> bytes:
    return np.ascontiguousarray(x).tobytes()


# --- conversion: one function for every form ------------------------------------------------------------

def test_every_allowed_form_converts_bit_for_bit():
    bf16 = np.array([1.5, -0.0, np.nan, np.inf, 2.0 ** -133], ml_dtypes.bfloat16)
    f8 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2)
    i32 = np.arange(6, dtype=np.int32).reshape(2, 3)
    bf16_tensor = torch.from_numpy(bf16.view(np.int16).copy()).view(torch.bfloat16)
    f8_tensor = torch.from_numpy(f8.view(np.uint8).copy()).view(torch.float8_e5m2)
    cases = [
        (i32, [i32], None),
        (np.float32(2.5), [np.array(2.5, np.float32)], None),
        ((i32, bf16), [i32, bf16], None),                            # a plain tuple
        (Pair(bf16_tensor, f8_tensor), [bf16, f8], ("first", "second")),  # own NamedTuple of torch tensors
        (torch.from_numpy(i32.T.copy()).T, [i32], None),             # a non-contiguous tensor
        (torch.ones(3, requires_grad=True), [np.ones(3, np.float32)], None),
    ]
    for result, arrays, fields in cases:
        outputs = protocol_outputs(result)
        assert [a.dtype for a in outputs.arrays] == [a.dtype for a in arrays]
        assert [_bits(a) for a in outputs.arrays] == [_bits(np.asarray(a)) for a in arrays]
        assert outputs.fields == fields
        value = pickle.loads(pickle.dumps(outputs)).value()     # any NamedTuple type crosses the pipe
        if fields is not None:
            assert value._fields == fields
        assert isinstance(value, tuple) == isinstance(result, tuple)


def test_jax_arrays_convert_bit_for_bit():
    jnp = pytest.importorskip("jax.numpy")
    bf16 = np.array([1.5, -0.0, np.nan, -np.inf], ml_dtypes.bfloat16)
    outputs = protocol_outputs((jnp.asarray(bf16), jnp.arange(3, dtype=jnp.int32)))
    assert outputs.arrays[0].dtype == bf16.dtype and _bits(outputs.arrays[0]) == _bits(bf16)
    assert outputs.arrays[1].tolist() == [0, 1, 2]


@pytest.mark.parametrize("result, message", [
    ([np.zeros(2)], "returned a list, expected an array (NumPy, torch, jax) or a tuple of arrays"),
    ((x for x in ()), "returned a generator, expected an array"),
    (None, "returned None, expected an array"),
    ((np.zeros(2), None), "returned a tuple whose element 1 is None, expected arrays"),
    (Pair(np.zeros(2), 3.0), "returned a tuple whose field second is a float, expected arrays"),
    (Pair(np.zeros(2), (np.zeros(1),)), "returned a tuple whose field second is a tuple, expected arrays"),
    (torch.empty(2, 3, dtype=torch.bfloat16, device="meta"),
     "returned a torch.bfloat16 tensor on meta that could not be converted: NotImplementedError"),
    (Pair(np.zeros(2), torch.zeros(2, dtype=torch.complex64)),
     "returned a tuple whose field second is a torch.complex64 tensor on cpu that could not be converted: "
     "torch dtype complex64 has no exact NumPy counterpart"),
])
def test_forms_outside_the_protocol_are_said_in_words(result, message):
    with pytest.raises(ProtocolViolation) as info:
        protocol_outputs(result)
    assert str(info.value).startswith(message), str(info.value)


def test_a_field_count_that_differs_from_the_references_is_said_in_words():
    pools = reference.KVPages(np.zeros(2), np.zeros(2))
    three = {f"output{i}": np.zeros(2) for i in range(3)}
    assert structure_problem(three, pools._asdict()) == "returned 3 fields, the reference returns 2 fields (k_pages, v_pages)"
    assert structure_problem({"out": np.zeros(2)}, pools._asdict()) == \
        "returned one array, the reference returns 2 fields (k_pages, v_pages)"
    assert structure_problem({"keys": 1, "values": 2}, pools._asdict()) is None    # matched by position


# --- purity through any array-like -----------------------------------------------------------------------

def test_aliasing_is_found_through_torch_dlpack_and_array_interface():
    k = np.zeros((4, 2), ml_dtypes.bfloat16)
    slots = np.arange(4, dtype=np.int32)
    inputs = {"k_pages": k, "slot_mapping": slots}

    class Exported:   # a foreign array exporting the memory of its own buffer
        def __init__(self, arr):
            self.__array_interface__ = arr.__array_interface__

    class DLPackOnly:
        def __init__(self, t):
            self._t = t

        def __dlpack__(self, **kw):
            return self._t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self._t.__dlpack_device__()

    bf16_view = torch.from_numpy(k.view(np.int16)).view(torch.bfloat16)[1:]    # a bit-reinterpreted slice
    assert aliased_inputs(torch.from_numpy(slots), inputs) == [f"out{ALIAS}slot_mapping"]
    assert aliased_inputs(Pair(np.ones(1), bf16_view), inputs) == [f"second{ALIAS}k_pages"]
    assert aliased_inputs((Exported(slots[1:]),), inputs) == [f"output0{ALIAS}slot_mapping"]
    assert aliased_inputs(DLPackOnly(torch.from_numpy(slots)), inputs) == [f"out{ALIAS}slot_mapping"]
    assert aliased_inputs(torch.from_numpy(slots).clone(), inputs) == []
    assert aliased_inputs(torch.empty(4, device="meta"), inputs) == []


def test_mutation_through_a_torch_view_is_found_nan_payloads_included():
    x = np.array([np.nan, 1.0], np.float32)
    inputs = {"x": x, "slot_mapping": np.arange(3, dtype=np.int32), "page_size": 4}
    snapshot = InputSnapshot(inputs)
    assert snapshot.mutated(inputs) == []
    torch.from_numpy(inputs["slot_mapping"]).add_(1)
    x.view(np.uint32)[0] ^= 1            # another NaN: equal as a value, not as stored bits
    assert snapshot.mutated(inputs) == ["x", "slot_mapping"]


# --- through the CLI -------------------------------------------------------------------------------------

def test_each_form_through_a_run(cli, tmp_path):
    """One run: the protocol-forms backend (tests/engine/protocol_backends.py) returns each op's reference
    result in another form; lists and generators (fault_backends.py) fail naming the protocol, in the
    worker and in replay --no-isolation."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "protocol_backends:make_backend", "--backend", "fault_backends:make_returns_list",
               "--backend", "fault_backends:make_returns_generator", "--ops", ",".join(FORMS), "--out", str(out),
               "--", "-k", "golden or (write_kv_differential and base)")
    assert proc.returncode == 1, proc.stdout[-3000:]
    results = cli.report(out)["results"]
    forms = {}
    for r in results:
        if r["backend"] == "protocol-forms" and r["status"] != "unsupported":
            forms.setdefault(r["op"], []).append(r)
    assert set(forms) == set(FORMS), sorted(forms)
    allowed = ("block_table_to_csr", "write_kv", "append_slot_mapping", "slot_mapping_from_arena")
    for op in allowed:
        assert [r["status"] for r in forms[op]] == ["pass"] * len(forms[op]), forms[op][0].get("message")
    assert any("kv_dtype=bfloat16" in r["dtypes"] for r in forms["write_kv"])     # torch bfloat16 went through
    assert any("kv_dtype=float8_e4m3fn" in r["dtypes"] for r in forms["write_kv"])

    def headline(op):   # every golden of the op fails the same way (metadata has one per page size)
        assert [r["status"] for r in forms[op]] == ["fail"] * len(forms[op])
        return forms[op][0]["message"].splitlines()[0]
    assert "protocol-forms returned 3 fields, the reference returns 2 fields (page_indices, kv_lens)" in \
        headline("csr_to_block_table")
    assert ("protocol-forms returned a tuple whose field offsets is a torch.int64 tensor on meta that could not "
            "be converted: NotImplementedError") in headline("arena_layout")
    assert "backend raised" not in headline("arena_layout")
    assert f"share memory with its inputs (ref_counts{ALIAS}ref_counts)" in headline("page_table_step")

    records = {r["backend"]: r for r in results if r["backend"] != "protocol-forms" and r["status"] == "fail"}
    for name, kind in (("returns-list", "a list"), ("returns-generator", "a generator")):
        record = records[name]
        expected = f"{name} returned {kind}, expected an array (NumPy, torch, jax) or a tuple of arrays"
        assert expected in record["message"].splitlines()[0], record["message"]
    replayed = cli("replay", records["returns-list"]["repro"], "--no-isolation", "--backend",
                   "fault_backends:make_returns_list")
    assert replayed.returncode == 1 and "returned a list, expected an array" in replayed.stdout, replayed
