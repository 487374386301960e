"""`kvconform check-backend` and `kvconform list --backend` (issue 12): what is wrong with a backend, in
plain words, before a full run; each authoring mistake of authoring_backends.py is named."""
from __future__ import annotations

import pytest


def test_our_numpy_backend_has_no_problem(cli):
    proc = cli("check-backend", "numpy", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "no problem found" in proc.stdout
    assert "write_kv: one small case matches the reference" in proc.stdout


@pytest.mark.parametrize("factory, needle, code", [
    # invalid claims: nothing of the backend can be checked (exit 3, NOT CHECKED), as in `kvconform run`
    ("MisspelledFeature", "NOT CHECKED authoring_backends:MisspelledFeature: its claims are invalid: "
                          "ragged_paged_attention: unknown feature 'slidng_window' (did you mean 'sliding_window'?)", 3),
    ("NoMethod", "rotate_keys: is claimed but the backend has no method rotate_keys", 1),
    ("WrongSignature", "write_kv: does not accept the argument(s) slot_mapping", 1),
    ("WrongValues", "write_kv: differs from the reference on", 1),
])
def test_each_authoring_mistake_is_named(cli, factory, needle, code):
    proc = cli("check-backend", f"authoring_backends:{factory}", timeout=600)
    assert proc.returncode == code, proc.stdout[-3000:]
    assert needle in proc.stdout, proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_mutant_is_caught_on_its_op(cli):
    proc = cli("check-backend", "kvconform.conformance.mutants.kv_write:WriteKvNegativeSlotWraps",
               timeout=600)
    # one small case need not hit the bug; when it does, the op is named
    assert proc.returncode in (0, 1)
    if proc.returncode == 1:
        assert "WRONG write_kv:" in proc.stdout


def test_unknown_backend_is_a_usage_error(cli):
    proc = cli("check-backend", "no_such_module:make")
    assert proc.returncode in (1, 2) and "no_such_module" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_list_backend_shows_a_module_factory_backends_claims_and_limits(cli):
    proc = cli("list", "--backend", "constraint_backends:DecodeOnly")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("constraint_backends:DecodeOnly")
    assert any("ragged_paged_attention" in line and 'limits={"q_len":{"values":[1]}}' in line for line in lines)
    assert "numpy " not in proc.stdout   # only the backend asked for
    bad = cli("list", "--backend", "bad spec")
    assert bad.returncode == 2 and "unknown backend 'bad spec'" in bad.stderr


def test_list_shows_per_op_only_the_claim_fields_it_reads(cli):
    """Issue 28.5: the metadata ops read a page size and nothing else, the recurrent ops no page size or
    head dim, attention every field (backends/base.py CLAIM_FIELDS)."""
    proc = cli("list", "--backend", "numpy")
    assert proc.returncode == 0, proc.stderr
    line = {l.split()[0]: l for l in proc.stdout.splitlines()[1:] if l.startswith("    ")}
    attention = line["ragged_paged_attention"]
    for field in ("dtypes=", "kv=", "page_sizes=", "head_dims=", "features=", "layouts="):
        assert field in attention, attention
    for op in ("block_table_to_csr", "append_slot_mapping", "page_table_step", "plan_eviction"):
        assert line[op].split()[1:] == ["page_sizes=any"], line[op]
    assert "reads no claim fields" in line["arena_layout"]
    recurrent = line["selective_state_update"]
    assert "dtypes=" in recurrent and "kv=" in recurrent and "features=" in recurrent
    assert "page_sizes=" not in recurrent and "head_dims=" not in recurrent and "layouts=" not in recurrent
    assert "dtypes=" not in line["shift_keys"] and "kv=" in line["shift_keys"]
