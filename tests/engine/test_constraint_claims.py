"""Constraint claims (issue 12): a kernel with real limits is checked inside them and never outside.

Each fake backend (constraint_backends.py) raises if called outside its claimed limits; the suite must
give it zero failures and still run numerical cases, and a limit name outside the vocabulary is an error."""
from __future__ import annotations

import pytest

from kvconform.backends.base import OpClaims
from kvconform.conformance.strategies import constraints

NUMERICAL = ("golden", "differential", "property", "stateful")


LIMITED = ("DecodeOnly", "FewKvHeads", "HeadDim128", "NoEmptySequences")


@pytest.mark.parametrize("factory", LIMITED)
def test_limited_kernel_is_never_called_outside_its_claims(run_many, factory):
    # one run of the four kernels (conftest run_many, in process: each raises if called outside its limits,
    # which no isolation changes); each test reads its own kernel's records
    run = run_many("ragged_paged_attention", [f"constraint_backends:{f}" for f in LIMITED], "ci")
    results = run.records(f"constraint_backends:{factory}")
    bad = [(r["id"], r["message"][:300]) for r in results if r["status"] not in ("pass", "unsupported")]
    assert run.returncode == 0 and results and not bad, bad or run.output
    ran = [r for r in results if r["status"] == "pass" and r["layer"] in NUMERICAL]
    assert any(r["layer"] == "differential" for r in ran) and any(r["layer"] == "property" for r in ran)
    # goldens are restated at real sizes (issue 31): a kernel of head dims multiple of 128 runs them too
    assert any(r["layer"] == "golden" for r in ran), [r["id"] for r in results if r["layer"] == "golden"]


def test_constraint_forms():
    assert constraints.admits(3, 3) and not constraints.admits(3, 4)
    assert constraints.admits({"values": [1, 2, 4]}, 4) and not constraints.admits({"values": [1, 2, 4]}, 3)
    assert constraints.admits({"multiple_of": 128, "max": 256}, 256)
    assert not constraints.admits({"multiple_of": 128, "max": 256}, 384)
    assert constraints.admits({"min": 2}, 2) and not constraints.admits({"min": 2}, 1)
    with pytest.raises(ValueError, match="size constraint"):
        constraints.admits("128", 128)


def test_allowed_falls_back_to_the_constraints_own_values():
    claims = OpClaims(dtypes=("float32",), kv_dtypes=("float32",), limits={"head_dim": {"multiple_of": 128}})
    assert constraints.allowed(claims, "head_dim", (4, 8)) == (128, 256)
    claims = OpClaims(limits={"num_kv_heads": {"values": [8]}})
    assert constraints.allowed(claims, "num_kv_heads", (1, 2, 3)) == (8,)


def test_dtype_pairs_restrict_the_draw():
    claims = OpClaims(dtypes=("float32", "bfloat16"), kv_dtypes=("bfloat16", "int8"),
                      limits={"dtype_pairs": [["bfloat16", "int8"]]})
    assert constraints.dtype_pairs(claims, ("float32", "bfloat16"), ("bfloat16", "int8"), "x") == [("bfloat16", "int8")]


def test_unsupported_outside_the_claims_is_unsupported_with_the_backends_reason(cli, tmp_path):
    """kvconform.Unsupported for a case outside the claims (an unclaimed feature run with
    --run-unclaimed) makes the test `unsupported` with the backend's reason, never a pass or a failure."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "constraint_backends:DeclinesSoftCap", "--ops", "ragged_paged_attention",
               "--profile", "ci", "--out", str(out), "--run-unclaimed", "--", "-k", "differential and soft_cap",
               timeout=600)
    results = cli.report(out)["results"]
    assert results and proc.returncode == 3, proc.stdout[-2000:]   # -k: the run's other tests not run
    assert "NOT CHECKED -k 'differential and soft_cap' selected " in proc.stdout
    for r in results:
        assert r["status"] == "unsupported", (r["id"], r["status"], r["message"][:300])
        assert "declined a case outside its claims (does not claim feature soft_cap)" in r["message"]
        assert "soft cap is not implemented by this kernel" in r["message"]


def test_unsupported_inside_the_claims_is_a_failure(cli, tmp_path):
    """Raising kvconform.Unsupported for a case the backend claims is a failure that says so, with a
    minimal counterexample (the declined KV-head count)."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "constraint_backends:OverclaimsKvHeads", "--ops", "ragged_paged_attention",
               "--profile", "ci", "--out", str(out), "--", "-k", "differential and base", timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:]
    failed = [r for r in cli.report(out)["results"] if r["status"] == "fail"]
    assert failed
    for r in failed:
        assert "claims more than it supports" in r["message"], r["message"][:500]
        assert "tiles take 1, 2, 4 or 8 KV heads" in r["message"]
        assert r["repro"]


def test_outside_names_each_dimension_outside_the_claims():
    claims = OpClaims(dtypes=("float32",), kv_dtypes=("bfloat16",), page_sizes=(16,),
                      limits={"q_len": {"values": [1]}, "num_kv_heads": {"values": [1, 2, 4]},
                              "max_kv_len": 64})
    inside = constraints.case_space({"dtype": "float32", "kv_dtype": "bfloat16", "page_size": 16, "hq": 8,
                                     "hkv": 4, "q_lens": [1, 1], "kv_lens": [3, 64]})
    assert constraints.outside(claims, inside) == []
    far = constraints.case_space({"dtype": "float16", "kv_dtype": "bfloat16", "page_size": 8, "hq": 6,
                                  "hkv": 3, "q_lens": [1, 2], "kv_lens": [65]})
    reasons = constraints.outside(claims, far)
    assert any("dtype=float16" in r for r in reasons) and any("page_size=8" in r for r in reasons)
    assert any("num_kv_heads=3" in r for r in reasons) and any("q_len=[1, 2]" in r for r in reasons)
    assert any("max_kv_len=64" in r for r in reasons)


def test_claims_widen_the_size_reach_columns():
    """spec/paged_attention.md PA-51: a listed value joins a size column's candidates, a multiple_of keeps
    the candidates it admits, a claimed set is drawn as listed (large values first where they matter)."""
    from kvconform.conformance.strategies import attention_reach as ar
    from kvconform.conformance.strategies import paged_attention as pa
    listed = OpClaims(features=("gqa",), limits={"page_size": {"values": [16, 544]},
                                                 "group_size": {"values": [1, 2, 4, 8, 48]}})
    assert constraints.reach(listed, "page_size", ar.BIG_PAGE_SIZES) == (544, 16)
    assert (1, 48) in pa._head_counts(listed, pa.Variant("long_heads", (), (), reach="heads"))
    sixteen = OpClaims(limits={"page_size": {"multiple_of": 16}})
    assert constraints.reach(sixteen, "page_size", ar.REACH_PAGE_SIZES) == (48, 16)
    assert constraints.reach(sixteen, "page_size", ar.BIG_PAGE_SIZES) == ar.BIG_PAGE_SIZES
    claimed = OpClaims(page_sizes=(16, 544, 32), head_dims=(64, 128, 96))
    assert ar.page_sizes(claimed, "page_size")[0] == 544
    assert ar.page_sizes(claimed, "pages")[0] == 16
    assert ar.head_dims(claimed, "head_dim", "long_head_dim", None)[0] == 96
    assert constraints.reach(OpClaims(limits={"page_size": {"values": [8]}}), "page_size", ar.BIG_PAGE_SIZES) == (8,)
    with pytest.raises(pytest.skip.Exception):    # no (Hkv, group) of 128 query heads within 8
        pa._head_counts(OpClaims(features=("gqa",), limits={"num_q_heads": 8}),
                        pa.Variant("long_heads", (), (), reach="heads"))


def test_a_minimum_window_and_a_rope_dim_are_honoured_by_every_draw(cli, tmp_path):
    """PA-54, ML-12: windows below the claimed minimum and other RoPE dims are never drawn, and windowed
    cases still run."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "constraint_backends:MinimumWindow", "--ops",
               "ragged_paged_attention,mla_paged_attention", "--profile", "quick", "--seed", "1", "--out", str(out),
               "--", "-k", "sliding_window or combined or golden or mla_differential", timeout=900)
    results = cli.report(out)["results"]
    bad = [(r["id"], r["message"][:300]) for r in results if r["status"] not in ("pass", "unsupported")]
    assert proc.returncode == 3 and not bad, bad   # -k: the run's other tests not run (NOT CHECKED)
    assert "NOT CHECKED -k 'sliding_window or combined or golden or mla_differential' selected " in proc.stdout
    windowed = [r for r in results if r["status"] == "pass" and "sliding_window" in r["features"]]
    assert {r["op"] for r in windowed} == {"ragged_paged_attention", "mla_paged_attention"}, windowed


def test_no_empty_sequences_for_the_page_table_ops(cli, tmp_path):
    """MD-24: a kernel claiming seq_len >= 1 is never handed an empty sequence (goldens with one are skipped,
    every column still runs)."""
    out = tmp_path / "out"
    ops = "block_table_to_csr,csr_to_block_table,append_slot_mapping,slot_mapping_from_arena,page_table_step"
    proc = cli("run", "--backend", "constraint_backends:NoEmptyPageTables", "--ops", ops, "--profile", "quick",
               "--seed", "1", "--out", str(out), timeout=900)
    results = cli.report(out)["results"]
    bad = [(r["id"], r["message"][:300]) for r in results if r["status"] not in ("pass", "unsupported")]
    assert proc.returncode == 0 and not bad, bad
    for op in ops.split(","):
        mine = [r for r in results if r["op"] == op and r["status"] == "pass"]
        assert {"differential", "errors"} <= {r["layer"] for r in mine}, (op, [r["id"] for r in mine])
    # a golden with an empty sequence (or the manager's script, whose "add" makes one) is skipped, saying
    # why; each op with sequences has one without (`*_no_empty`), which runs
    goldens = [r for r in results if r["layer"] == "golden" and r["op"] != "arena_layout"]
    skipped = [r for r in goldens if "no_empty" not in r["id"]]
    assert skipped and all(r["status"] == "unsupported" and "seq_len" in r["message"] for r in skipped), skipped
    ran = {r["op"] for r in goldens if "no_empty" in r["id"] and r["status"] == "pass"}
    assert ran == set(ops.split(",")) - {"page_table_step"}, [(r["id"], r["status"]) for r in goldens]
