"""Outputs that lie (hostile backends, round two, item 1): whatever a backend returns becomes a plain ndarray
of its values in its worker, before anything judges it, and nothing of the backend's crosses to the run's
process (tests/engine/lying_backends.py)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import lying_backends as lying
from kvconform import reference
from kvconform.conformance.engine.protocol import Opaque, ProtocolViolation, plain_data, protocol_outputs
from kvconform.conformance.engine.call_errors import _error_payload


class _EngineOnly(pickle.Unpickler):
    """Unpickles only what the engine's own modules, NumPy and the standard types define."""

    def find_class(self, module, name):
        if module.split(".")[0] not in ("numpy", "ml_dtypes", "kvconform", "builtins", "copyreg", "_codecs",
                                        "collections"):
            raise AssertionError(f"the payload carries {module}.{name}")
        return super().find_class(module, name)


def _crosses_as_data(payload) -> bool:
    import io
    _EngineOnly(io.BytesIO(pickle.dumps(payload))).load()
    return True


def _rotate_case():
    rng = np.random.default_rng(0)
    k_pages = rng.standard_normal((2, 4, 2, 8)).astype(np.float32)
    angles = np.arange(8)[:, None] * np.arange(1, 5)[None, :] * 0.1
    lut = np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)    # [rows, rotary_dim]
    return dict(k_pages=k_pages, rotated_block_indices=np.array([0, 1], np.int32),
                rotation_deltas=np.array([[1], [3]], np.int32), trig_lut=lut)


@pytest.mark.parametrize("backend", [lying.LiesBySubclass(), lying.LiesByArrayMethod(),
                                     lying.LiesByDtypeMetadata()], ids=lambda b: b.name)
def test_every_output_becomes_a_plain_array_of_the_backends_values(backend):
    raw = backend.rotate_keys(**_rotate_case())
    outputs = protocol_outputs(raw)
    (arr,) = outputs.arrays
    assert type(arr) is np.ndarray and arr.dtype.metadata is None
    assert np.array_equal(np.ndarray.view(np.asarray(raw), np.ndarray), arr)
    # nothing of the backend's module travels to the run's process
    assert _crosses_as_data(outputs)
    if backend.name != "lies-by-dtype-metadata":
        assert not np.isclose(arr, reference.rotate_keys(**_rotate_case())).all()   # the 7.0s show


def test_dtypes_that_hold_no_numbers_and_field_names_that_are_not_names_are_violations():
    with pytest.raises(ProtocolViolation, match="converts to an object array"):
        protocol_outputs(np.array([object()], dtype=object))
    with pytest.raises(ProtocolViolation, match=r"dtype '\|V8'"):
        protocol_outputs(np.zeros(2, dtype=[("a", np.int32), ("b", np.float32)]))

    class Odd(tuple):
        _fields = (1,)
    with pytest.raises(ProtocolViolation, match="whose _fields are not one name per element"):
        protocol_outputs(Odd((np.zeros(2),)))


def test_texts_and_descriptions_cross_as_built_in_data():
    try:
        lying.RaisesWithOwnText().rotate_keys(**_rotate_case())
    except ValueError as exc:
        payload = _error_payload(exc)
    assert payload[1] == "rotation failed" and type(payload[1]) is str
    assert _crosses_as_data(payload)
    described = plain_data({"name": lying.MessageText("x"), "capabilities": {"write_kv": {
        "page_sizes": [np.int64(16)], "limits": {"max_pages": lying.Marker()}}}})
    assert type(described["name"]) is str
    assert described["capabilities"]["write_kv"]["page_sizes"] == [16]
    assert type(described["capabilities"]["write_kv"]["page_sizes"][0]) is int
    assert isinstance(described["capabilities"]["write_kv"]["limits"]["max_pages"], Opaque)
    assert _crosses_as_data(described)


def test_lying_outputs_fail_through_a_run_and_the_run_never_imports_the_backend(cli, tmp_path, monkeypatch):
    """One run of the three liars' rotate_keys goldens, differentials and poison tests: every one fails (the
    7.0s are seen), the metadata liar passes (its values are right), and the run's own process never
    imports the backends' module: only their workers do. In the same run: pytest.skip() inside an op is
    the backend's raise, and claims written with NumPy integers are valid."""
    mark = tmp_path / "imports.txt"
    monkeypatch.setenv("KVCONFORM_TEST_IMPORT_MARK", str(mark))
    out = tmp_path / "out"
    proc = cli("run", "--backend", "lying_backends:make_subclass", "--backend", "lying_backends:make_array_method",
               "--backend", "lying_backends:make_dtype_metadata", "--backend", "lying_backends:make_own_text",
               "--backend", "lying_backends:make_skips_in_op", "--backend", "lying_backends:make_numpy_integer_claims",
               "--ops", "rotate_keys", "--out", str(out), "--", "-k", "golden or differential or poison")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    by_backend = {}
    for r in cli.report(out)["results"]:
        if r["status"] != "unsupported":
            by_backend.setdefault(r["backend"], []).append(r)
    for name in ("lies-by-subclass", "lies-by-array-method"):
        assert by_backend[name] and {r["status"] for r in by_backend[name]} == {"fail"}, \
            [(r["test"], r["status"]) for r in by_backend[name]]
    assert {r["status"] for r in by_backend["lies-by-dtype-metadata"]} == {"pass"}
    own_text = by_backend["raises-with-own-text"]
    assert {r["status"] for r in own_text} == {"fail"} and "rotation failed" in own_text[0]["message"]
    skips = by_backend["skips-in-op"]
    assert {r["status"] for r in skips} == {"fail"}, [r["message"][:300] for r in skips]
    assert "backend raised Skipped: no kernel for this shape" in skips[0]["message"]
    assert "worker process died" not in skips[0]["message"]
    # np.int64 claims are ints: no claims problem (it claims write_kv only, so "claims none of the requested
    # ops" is its one reason, which the removed "tests chosen by hand" rule used to turn into a warning)
    mine = [r for r in cli.report(out)["gate"]["not_checked"] if r["backend"] == "numpy-integer-claims"]
    assert [r["kind"] for r in mine] == ["ops"], mine
    importers = {line.split()[1] for line in mark.read_text().splitlines()}   # the parent pid of each importer
    # every importer is a worker, whose parent is the run's pytest process; that process itself never imports
    pids = {line.split()[0] for line in mark.read_text().splitlines()}
    assert not importers & pids, mark.read_text()
