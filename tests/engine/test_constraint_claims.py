"""Constraint claims (issue 12): a kernel with real limits is checked inside them and never outside.

Each fake backend (constraint_backends.py) raises if called outside its claimed limits; the suite must
give it zero failures and still run numerical cases, and a limit name outside the vocabulary is an error."""
from __future__ import annotations

import pytest

from kvconform.backends.base import OpClaims
from kvconform.conformance.strategies import constraints

NUMERICAL = ("golden", "differential", "property", "stateful")


@pytest.mark.parametrize("factory", ["DecodeOnly", "FewKvHeads", "HeadDim128"])
def test_limited_kernel_is_never_called_outside_its_claims(cli, tmp_path, factory):
    out = tmp_path / "out"
    proc = cli("run", "--backend", f"constraint_backends:{factory}", "--ops", "ragged_paged_attention",
               "--profile", "ci", "--out", str(out), timeout=900)
    results = cli.report(out)["results"]
    bad = [(r["id"], r["message"][:300]) for r in results if r["status"] not in ("pass", "unsupported")]
    assert proc.returncode == 0 and not bad, bad
    ran = [r for r in results if r["status"] == "pass" and r["layer"] in NUMERICAL]
    assert any(r["layer"] == "differential" for r in ran) and any(r["layer"] == "property" for r in ran)


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
