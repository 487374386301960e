"""Platform canaries and failures grouped by cause: a correct kernel whose only failures come from the Triton
interpreter's bfloat16 `tl.dot` (interpreter_dot_backend.py) gets failures whose diagnosis names the canary,
and every report shows them as one entry; run.json and the reports record the canaries."""
from __future__ import annotations

import json

import pytest

from kvconform.conformance.engine import canaries
from kvconform.conformance.report import causes

DOT = "the platform's bfloat16 tl.dot is wrong on this machine"


def test_platforms_come_from_the_environment_and_the_device():
    assert canaries.platforms_of({"device": "cpu"}, {}) == []
    assert canaries.platforms_of({"device": "cpu"}, {"TRITON_INTERPRET": "1"}) == ["triton-interpreter"]
    assert canaries.platforms_of({"device": "cpu (Triton interpreter)"}, {}) == ["triton-interpreter"]
    assert canaries.platforms_of({"device": "cpu (Pallas TPU interpret mode)"}, {}) == ["pallas-interpret"]
    assert canaries.platforms_of({"device": "NVIDIA H100"}, {}) == []


def test_a_note_only_for_a_case_that_needs_what_is_wrong():
    results = [{"platform": "triton-interpreter", "name": "bf16_dot", "what": "bfloat16 tl.dot", "ok": False,
                "detail": "wrong by up to 1e10"},
               {"platform": "triton-interpreter", "name": "fp16_dot", "what": "float16 tl.dot", "ok": True, "detail": ""},
               {"platform": "triton-interpreter", "name": "log1p", "what": "libdevice log1p", "ok": False,
                "detail": "missing"}]
    assert [n.split(" (")[0] for n in canaries.failure_notes(results, {"bfloat16", "float32"})] == [DOT]
    assert canaries.failure_notes(results, {"float16", "float32"}) == []          # float16's dot is fine
    assert "libdevice log1p" in canaries.failure_notes(results, {"float32"}, "AttributeError: no log1p")[0]
    assert canaries.summary(results) == ("Triton interpreter canaries: 2 of 3 wrong (bfloat16 tl.dot, "
                                         "libdevice log1p)")


def _record(test, counterexample, diagnosis, status="fail"):
    return {"id": f"suite.py::{test}", "status": status, "backend": "b", "op": "ragged_paged_attention",
            "counterexample": counterexample, "diagnosis": diagnosis, "message": "m", "repro": f"/out/{test}",
            "backend_spec": "b"}


def test_causes_group_by_diagnosis_and_fingerprint_largest_last():
    canary = {"summary": "x", "canaries": [DOT], "canary_dtypes": ["bfloat16"], "variations": []}
    cap = {"summary": "passes with soft_cap off", "variations": [{"name": "soft_cap off", "outcome": "pass"}]}
    records = [_record("t1", "q: bfloat16[4, 2, 8], k_pages: float32[2, 2, 1, 8]", canary),
               _record("t2", "q: bfloat16[1, 1, 4], k_pages: bfloat16[2, 2, 1, 4]", canary),
               _record("t3", "q: bfloat16[2, 1, 4], k_pages: float32[2, 2, 1, 4]", canary),
               _record("t4", "q: float32[1, 1, 4], k_pages: float32[2, 2, 1, 4]", cap)]
    groups = causes.group({"results": records})
    assert [g.count for g in groups] == [1, 3]                 # distinct causes first, the largest group last
    assert groups[0].fingerprint == "float32; soft_cap"
    assert groups[1].fingerprint == "bfloat16" and groups[1].smallest["id"] == "suite.py::t2"   # fewest elements
    lines = causes.listed_lines({"results": records})
    assert lines[2].startswith(f"  3 FAIL b ragged_paged_attention, one cause: {DOT}")
    assert lines[-1] == "    replay: kvconform replay /out/t2 --backend b"


def test_the_interpreters_bf16_dot_is_named_and_its_failures_are_one_entry(cli, tmp_path, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "out"
    proc = cli("run", "--backend", "interpreter_dot_backend:make_backend", "--profile", "quick", "--ops",
               "ragged_paged_attention", "--seed", "1", "--out", str(out), "--", "-k", "differential or golden",
               timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = cli.report(out)
    failed = [r for r in report["results"] if r["status"] == "fail"]
    assert len(failed) >= 2
    for r in failed:   # only the interpreter's bf16 dot: each failing case holds bfloat16 and names the canary
        assert "bfloat16" in r["counterexample"], r["counterexample"]
        assert r["diagnosis"]["summary"].startswith(DOT), r["diagnosis"]["summary"]
    assert any(r["status"] == "pass" and r["layer"] == "differential" for r in report["results"])  # float32 passes
    assert any(v["name"] == "every input widened to float32 (dtype changed)" and v["outcome"] == "pass"
               for r in failed for v in r["diagnosis"]["variations"])
    found = report["backends"]["interpreter-dot"]["canaries"]
    assert {r["name"]: r["ok"] for r in found}["bf16_dot"] is False
    run = json.loads((out / "run.json").read_text())
    assert run["canaries"]["interpreter_dot_backend:make_backend"] == found
    # one entry in every report
    md = (out / "report.md").read_text()
    failures = md.split("## Failures", 1)[1].split("\n## ", 1)[0]
    assert failures.count("\n1. ") == 1 and "\n2. " not in failures and f"**{len(failed)} × fail**" in failures
    assert "## Platform canaries" in md and "WRONG bfloat16 tl.dot" in md
    html = (out / "report.html").read_text()
    assert html.split("<table class=causes>", 1)[1].split("</table>", 1)[0].count("<tr data-status") == 1
    assert f"  {len(failed)} FAIL interpreter-dot ragged_paged_attention, one cause: {DOT}" in proc.stdout
