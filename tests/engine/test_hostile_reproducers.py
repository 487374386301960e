"""Reproducers are data (hostile backends, round two, item 2): `kvconform replay` accepts only an op of
backends.base.OPS, the argument names of that op's reference function and JSON scalars or arrays as their
values; anything else is one line, exit 2, and nothing is imported or called. Replay also checks the
replaying backend's claims, as a run does."""
from __future__ import annotations

import json

import numpy as np
import pytest

from kvconform.conformance.engine import case as case_io
from kvconform.conformance.engine.case import Case


def _write_kv_reproducer(directory):
    pool = np.zeros((2, 4, 1, 2), np.float32)
    case = Case("write_kv", dict(k_pages=pool, v_pages=pool.copy(), k=np.ones((1, 1, 2), np.float32),
                                 v=np.ones((1, 1, 2), np.float32), slot_mapping=np.array([3], np.int32)), {}, 1)
    case_io.save(case, directory)
    return directory


def _tampered(tmp_path, edit):
    directory = _write_kv_reproducer(tmp_path / "repro")
    meta = json.loads((directory / "case.json").read_text())
    edit(meta)
    (directory / "case.json").write_text(json.dumps(meta))
    return directory


def _import_module(meta):   # the reproducer of the hostile round: the reference module's importer, by name
    meta.update(op="import_module", order=["name"], arrays={}, scalars={"name": "lying_backends"})


TAMPERED = {
    "import_module": (_import_module, "'op' is 'import_module', not an op of kvconform"),
    "op is a list": (lambda m: m.update(op=["write_kv"]), "'op' is a JSON list, not an op of kvconform"),
    "undeclared argument": (lambda m: (m["order"].append("callback"), m["scalars"].update(callback="os.system")),
                            "input 'callback' is not an argument of write_kv"),
    "scalar is an object": (lambda m: (m["order"].append("k_scale"), m["scalars"].update(k_scale={"__class__": 1})),
                            "input 'k_scale' of write_kv is a JSON dict"),
}


@pytest.mark.parametrize("kind", TAMPERED)
def test_a_reproducer_that_is_not_a_call_of_an_op_is_refused_in_one_line(kind, tmp_path, cli, monkeypatch):
    edit, words = TAMPERED[kind]
    mark = tmp_path / "imports.txt"
    monkeypatch.setenv("KVCONFORM_TEST_IMPORT_MARK", str(mark))
    directory = _tampered(tmp_path, edit)
    proc = cli("replay", str(directory))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not mark.exists(), "replay imported the module a reproducer named"


def test_a_valid_reproducer_still_replays_and_the_replaying_backends_claims_are_checked(tmp_path, cli):
    directory = _write_kv_reproducer(tmp_path / "repro")
    proc = cli("replay", str(directory))
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr
    bad = cli("replay", str(directory), "--backend", "fault_backends:make_bad_claims")
    assert bad.returncode == 3, bad.stdout + bad.stderr
    assert "NOT CHECKED" in bad.stdout and "claims cannot be used" in bad.stdout and "did you mean" in bad.stdout
