"""Convention claims of the recurrent family (spec/recurrent.md RS-36 … RS-41, issue 31), end to end through
`kvconform run` with fake kernels (convention_backends.py): a backend claiming the conventions its kernels
have passes; the same kernels without the claims fail; claiming them does not excuse what is still checked.
Also: a backend claiming only real sizes gets every column (and goldens) at those sizes, and a backend that
raises on every call with tokens is never diagnosed with call history (issue 31).
"""
from __future__ import annotations

from convention_backends import LIMITS

OPS = ",".join(LIMITS)
PICK = "differential or golden or (poison and conv1d)"   # the layers the conventions change


def _results(cli, out):
    return cli.report(out)["results"]


def test_conventions_claimed_pass_and_real_sizes_widen_every_draw(cli, tmp_path):
    """The kernels with their conventions claimed pass. A kernel claiming only head_dim {64} and
    state_size {128} gets every column at those sizes (none of the default 1 … 3) and runs the real-size
    golden (issue 31: goldens at head dim 2 ran on no such backend)."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "convention_backends:make_conventional",
               "--backend", "convention_backends:make_real_sizes_only", "--ops", OPS, "--profile", "ci",
               "--out", str(out), "--", "-k", PICK)
    assert proc.returncode == 3, proc.stdout[-4000:]   # nothing failed; -k left the run's other tests out
    assert f"NOT CHECKED -k {PICK!r} selected " in proc.stdout
    results = _results(cli, out)
    conventional = [r for r in results if r["backend"] == "conventional"]
    ran = {r["op"] for r in conventional if r["status"] == "pass" and r["layer"] == "differential"}
    assert ran == set(LIMITS)
    # padding rows were drawn and their outputs not compared; goldens restated without the declined options
    # (none fails as "claims more than it supports"); the ones with an empty sequence are outside seq_len
    assert any(r["status"] == "pass" and "padding_slots" in r["id"] for r in conventional
               if r["op"] == "causal_conv1d_update")
    golden = {r["id"].split("-")[-1].rstrip("]"): r["status"] for r in conventional
              if r["layer"] == "golden" and r["op"] == "ssd_chunked_scan"}
    assert golden == {"ssd_chunk1": "unsupported", "ssd_chunk64": "unsupported", "ssd_chunk64_real": "unsupported",
                      "ssd_fresh_snapshots": "pass"}, golden
    real = [r for r in results if r["backend"] == "real-sizes-only"]
    golden = [r["id"] for r in real if r["layer"] == "golden" and r["status"] == "pass"]
    assert golden and all("_real" in g for g in golden), golden
    assert {"long", "range", "mamba1", "mamba2"} <= {r["id"].split("-")[-1].rstrip("]") for r in real
                                                     if r["status"] == "pass" and r["layer"] == "differential"}


def test_same_kernels_without_the_claims_fail_and_claims_excuse_nothing_else(cli, tmp_path):
    """Without the claims each op fails. With them, what is still checked still fails: padding outputs
    unspecified, yet a padding row written into the pool (RS-36: the pool is still checked); softplus
    "always" and D required, yet a kernel that applies neither."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "convention_backends:make_unconventional",
               "--backend", "convention_backends:make_violating", "--ops", OPS, "--profile", "ci",
               "--out", str(out), "--", "-k", "differential and (base or mamba1 or padding_slots)")
    assert proc.returncode == 1
    failed = [r for r in _results(cli, out) if r["status"] in ("fail", "crash")]
    assert {r["op"] for r in failed if r["backend"] == "unconventional"} == set(LIMITS)
    violating = [r for r in failed if r["backend"] == "violating"]
    conv = [r for r in violating if r["op"] == "causal_conv1d_update"]
    assert conv and all("padding_slots" in r["id"] for r in conv), [r["id"] for r in conv]
    assert any("conv_state" in r["message"] for r in conv)
    assert {r["op"] for r in violating} == {"causal_conv1d_update", "selective_state_update"}


def test_raising_on_every_call_is_not_call_history(cli, tmp_path):
    """A backend raising on every call that has tokens (and passing the rare call with none) failed the
    chunked gated delta rule's history test diagnosed as "depends on the calls before them": the
    diagnosis re-ran an earlier, passing example (issue 31). The conv1d test, never drawn empty, did not."""
    out = tmp_path / "out"
    cli("run", "--backend", "convention_backends:make_raises_unless_empty", "--ops",
        "causal_conv1d_update,gated_delta_rule_chunked", "--profile", "ci", "--out", str(out), "--", "-k", "call_history")
    results = [r for r in _results(cli, out) if "call_history" in r["id"]]
    assert {r["op"] for r in results} == {"causal_conv1d_update", "gated_delta_rule_chunked"}
    for result in results:
        assert result["status"] == "fail" and "compile error" in result["message"]
        assert "calls before them" not in result["message"], result["message"]
