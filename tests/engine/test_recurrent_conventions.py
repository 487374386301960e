"""Convention claims of the recurrent family (spec/recurrent.md RS-36 … RS-41, issue 31), end to end through
`kvconform run` with fake kernels (convention_backends.py): a backend claiming the conventions its kernels
have passes; the same kernels without the claims fail; claiming them does not excuse what is still checked.
Also: a backend claiming only real sizes gets every column (and goldens) at those sizes, and a backend that
raises on every call with tokens is never diagnosed with call history (issue 31).
"""
from __future__ import annotations

from convention_backends import LIMITS

OPS = ",".join(LIMITS)
PICK = "differential or golden or poison"   # the numerical layers the conventions change


def _results(cli, out):
    return cli.report(out)["results"]


def test_conventions_claimed_pass(cli, tmp_path):
    out = tmp_path / "out"
    proc = cli("run", "--backend", "convention_backends:make_conventional", "--ops", OPS, "--profile", "ci",
               "--out", str(out), "--", "-k", PICK)
    assert proc.returncode == 0, proc.stdout[-4000:]
    results = _results(cli, out)
    ran = {r["op"] for r in results if r["status"] == "pass" and r["layer"] == "differential"}
    assert ran == set(LIMITS)
    # padding rows were drawn and their outputs not compared; goldens restated without the declined options
    # (none fails as "claims more than it supports"); the ones with an empty sequence are outside seq_len
    assert any(r["status"] == "pass" and "padding_slots" in r["id"] for r in results if r["op"] == "causal_conv1d_update")
    golden = {r["id"].split("-")[-1].rstrip("]"): r["status"] for r in results
              if r["layer"] == "golden" and r["op"] == "ssd_chunked_scan"}
    assert golden == {"ssd_chunk1": "unsupported", "ssd_chunk64": "unsupported", "ssd_chunk64_real": "unsupported",
                      "ssd_fresh_snapshots": "pass"}, golden


def test_same_kernels_without_the_claims_fail(cli, tmp_path):
    out = tmp_path / "out"
    proc = cli("run", "--backend", "convention_backends:make_unconventional", "--ops", OPS, "--profile", "ci",
               "--out", str(out), "--", "-k", PICK)
    assert proc.returncode == 1
    failed = {r["op"] for r in _results(cli, out) if r["status"] in ("fail", "crash")}
    assert failed == set(LIMITS), failed


def test_claims_do_not_excuse_what_is_still_checked(cli, tmp_path):
    """Padding outputs unspecified, yet a padding row written into the pool fails (RS-36: the pool is
    still checked); softplus "always" and D required, yet a kernel that applies neither fails."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "convention_backends:make_violating", "--ops",
               "causal_conv1d_update,selective_state_update", "--profile", "ci", "--out", str(out),
               "--", "-k", "differential")
    assert proc.returncode == 1
    failed = [r for r in _results(cli, out) if r["status"] == "fail"]
    conv = [r for r in failed if r["op"] == "causal_conv1d_update"]
    assert conv and all("padding_slots" in r["id"] for r in conv), [r["id"] for r in conv]
    assert any("conv_state" in r["message"] for r in conv)
    assert any(r["op"] == "selective_state_update" for r in failed)


def test_real_sizes_claimed_widen_every_draw(cli, tmp_path):
    """head_dim {64} and state_size {128} claimed: every column draws them (none of the default 1 … 3), and
    the real-size golden runs (issue 31: goldens at head dim 2 ran on no such backend)."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "convention_backends:make_real_sizes_only", "--ops", "selective_state_update",
               "--profile", "ci", "--out", str(out), "--", "-k", PICK)
    assert proc.returncode == 0, proc.stdout[-4000:]
    results = _results(cli, out)
    golden = [r for r in results if r["layer"] == "golden" and r["status"] == "pass"]
    assert [r["id"] for r in golden] and all("_real" in r["id"] for r in golden)
    assert {"long", "range", "mamba1", "mamba2"} <= {r["id"].split("-")[-1].rstrip("]") for r in results
                                                     if r["status"] == "pass" and r["layer"] == "differential"}


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
