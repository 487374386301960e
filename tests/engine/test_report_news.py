"""Reports lead with the news (issue 28 item 3): the verdict and the failures first, one cell per backend x op,
unclaimed ops in one line per backend, a legend; "error / allowed" where "headroom" was (old results.jsonl
files still read); no sentinel numbers. Built from synthetic results (a run of five backends takes minutes)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kvconform.backends.base import FEATURES, OPS
from kvconform.conformance.report import build, html, markdown

LAYERS = ("golden", "differential", "property", "stateful", "errors")
#: the ops each shipped backend claims (as `kvconform list` shows them; the exact sets do not matter here)
FIVE = {
    "numpy": list(OPS),
    "triton": [op for op in OPS if op not in ("block_table_to_csr", "csr_to_block_table", "arena_layout",
                                              "page_table_step")],
    "pallas": [op for op in OPS if op not in ("block_table_to_csr", "csr_to_block_table", "arena_layout",
                                              "page_table_step", "accumulate_scores", "plan_eviction")],
    "jax-ragged-paged-attention": ["ragged_paged_attention"],
    "jax-paged-attention": ["ragged_paged_attention"],
}


def _records(backend: str, claimed: list[str], bad: dict | None = None, *, features: bool = True) -> list[dict]:
    """A run's records: per op, layer and feature one test; those of claimed ops pass (with `features`
    False only the base ones), the rest are unsupported (as every suite test of every backend is
    recorded); `bad`: {(op, layer, feature): record overrides}."""
    out = []
    for op in OPS:
        for layer in LAYERS:
            for feature in ("base",) + FEATURES.get(op, ()):
                status = "pass" if op in claimed and (features or feature == "base") else "unsupported"
                rec = {"id": f"conformance/suite/test_x.py::test_{op}_{layer}[{backend}-{feature}]",
                       "backend": backend, "backend_spec": backend, "op": op, "layer": layer,
                       "features": [feature], "clauses": ["PA-1"], "status": status, "examples": 5,
                       "error_ratio": 0.25 if status == "pass" and layer != "errors" else None,
                       "message": "" if status == "pass" else f"unsupported: {backend} does not claim op {op}"}
                rec.update((bad or {}).get((op, layer, feature), {}))
                out.append(rec)
    return out


def _report(records: list[dict], claims: dict) -> dict:
    backends = {b: {"name": b, "version": "1", "device": "cpu", "available": True,
                    "capabilities": {op: {"dtypes": ["float32"]} for op in ops}} for b, ops in claims.items()}
    return build.assemble(records, backends=backends, run={"profile": "ci", "status": "complete"})


def test_report_md_of_the_five_shipped_backends_all_passing_is_short():
    records = [r for b, ops in FIVE.items() for r in _records(b, ops)]
    page = markdown.render(_report(records, FIVE))
    lines = page.splitlines()
    assert len(lines) < 120, len(lines)
    # every claimed op has its row, each backend its totals, and the unclaimed ops are folded
    for op in FIVE["numpy"]:
        assert any(line.startswith(f"| {op} |") for line in lines), op
    assert sum(line.startswith("| jax-") for line in lines) == 2
    folded = [line for line in lines if "does not claim" in line]
    assert len(folded) == 4 and any(line.startswith("- jax-paged-attention does not claim 20 op(s)") for line in folded)
    assert "headroom" not in page and "e+300" not in page
    assert "error / allowed" in page      # the legend says what the figure is


def _two_failures() -> dict:
    """A one-op backend with two failures, each with a long message, a diagnosis and a reproducer."""
    message = ("[ragged_paged_attention] clauses PA-5, PA-24: mykernel differs from the result of the same case "
               "without poison\n  out: 4/4 elements out of tolerance, worst at [0,0,0]: got nan, expected 0.5, "
               "error/allowed inf\n" + "  detail line\n" * 40)
    fail = {"status": "fail", "message": message, "counterexample": "q: float32[1, 1, 4], k_pages: float32[2, 2, 1, 4]",
            "diagnosis": {"summary": "fails only when K slots past kv_len (k_tail) hold NaN",
                          "variations": [{"name": f"poison {i}", "outcome": "pass", "detail": "x"} for i in range(12)]},
            "error_ratio": "inf", "repro": "out/repro/test_case-1", "failure_text": "out/repro/test_case-1/failure.txt",
            "fields": [{"name": "out", "profile": [0.1, "inf", 3.0] * 20, "compared": 60}]}
    bad = {("ragged_paged_attention", "property", "base"): fail,
           ("ragged_paged_attention", "golden", "base"): dict(fail, repro="out/repro/test_case-2",
                                                              diagnosis={"summary": "passes with soft_cap off"})}
    return _report(_records("mykernel", ["ragged_paged_attention"], bad, features=False),
                   {"mykernel": ["ragged_paged_attention"]})


def test_reports_open_with_the_failures_linked_from_the_totals():
    report = _two_failures()
    page = markdown.render(report)
    assert page.index("## Failures") < page.index("## Ops")
    assert "[2 fail](#failures)" in page
    assert page.count("replay: <code>kvconform replay out/repro/test_case-") == 2
    assert "   - diagnosis: fails only when K slots past kv_len (k_tail) hold NaN" in page
    assert "mykernel does not claim 20 op(s)" in page
    assert "| ragged_paged_attention | ❌ 2 fail" in page and "· inf |" in page
    assert "by feature: base ❌ 2 fail" in page      # the features of a cell that did not all pass
    page = html.render(report)
    assert '<a href="#failure-1">' in page and page.index('id="failure-1"') < page.index('id="ops"')
    assert "headroom" not in page and "e+300" not in page


def test_old_results_with_headroom_are_read(tmp_path):
    """results.jsonl written before the rename (key `headroom`) still gives each cell its error / allowed."""
    records = _records("old", ["write_kv"])
    for r in records:
        r["headroom"] = r.pop("error_ratio")
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    read = build.read_results(tmp_path / "results.jsonl")
    assert all("headroom" not in r for r in read)
    assert {r["error_ratio"] for r in read if r["status"] == "pass" and r["layer"] != "errors"} == {0.25}
    page = markdown.render(_report(read, {"old": ["write_kv"]}))
    assert "| write_kv | ✅ " in page and "· 0.25 |" in page


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


FOLD_PROBE = """<script>
const r = document.getElementById('failure-1').getBoundingClientRect();
const replay = document.querySelector('#failure-1 .replay').getBoundingClientRect();
document.body.setAttribute('data-probe', JSON.stringify({top: r.top, replay_bottom: replay.bottom,
  height: window.innerHeight, width: window.innerWidth}));
</script>"""


def test_report_html_shows_the_first_failure_above_the_fold(tmp_path):
    """At 1400 px wide, a one-op backend with two failures: the first failure, down to its replay command,
    is on the first screen. Measured in headless Chromium: a copy of the page with a probe script (the
    report's own Content-Security-Policy forbids scripts, so the copy drops it) writes the element's
    position into the DOM; a screenshot is kept in the tests' artifacts."""
    chromium = _chromium()
    if chromium is None:
        pytest.skip("chromium not found (ci/bootstrap.py installs Debian's chromium with apt when it can): "
                    "the above-the-fold check needs a browser")
    page = html.render(_two_failures())
    probe = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace("</body>",
                                                                                          FOLD_PROBE + "</body>")
    path = tmp_path / "probe.html"
    path.write_text(probe)
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'p'}",
             "--window-size=1400,900"]
    proc = subprocess.run(flags + ["--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r"data-probe=\"([^\"]*)\"", proc.stdout)
    assert found, proc.stderr[-2000:]
    probe_values = json.loads(found.group(1).replace("&quot;", '"'))
    assert probe_values["width"] >= 1300, probe_values
    assert 0 <= probe_values["top"] < probe_values["replay_bottom"] <= probe_values["height"], probe_values
    artifacts = Path(os.environ.get("KVCONFORM_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    (tmp_path / "report.html").write_text(page)
    shot = artifacts / "report-html-first-screen.png"
    subprocess.run(flags[:-1] + ["--window-size=1400,900", f"--screenshot={shot}", (tmp_path / "report.html").as_uri()],
                   capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000
