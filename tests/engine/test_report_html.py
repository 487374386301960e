"""report.html renders in a real headless Chromium, shows the ops table, and escapes backend text."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from kvconform.conformance.report import build

INJECT = '<img id="pwned" src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'


def _report():
    records = [
        {"id": "suite::test_a[evil-base]", "backend": "evil<b>", "op": "ragged_paged_attention", "layer": "differential",
         "clauses": ["PA-7"], "features": ["base"], "status": "fail", "error_ratio": 12.5, "examples": 3,
         "message": "backend raised ValueError: " + INJECT, "counterexample": INJECT, "repro": "/tmp/r" + INJECT},
        {"id": "suite::test_b[evil-soft_cap]", "backend": "evil<b>", "op": "ragged_paged_attention",
         "layer": "differential", "clauses": ["PA-16"], "features": ["soft_cap"], "status": "pass",
         "error_ratio": 0.01, "examples": 8, "message": ""},
        {"id": "suite::test_c[numpy-base]", "backend": "numpy", "op": "write_kv", "layer": "golden",
         "clauses": ["PA-43"], "features": ["base"], "status": "unsupported", "error_ratio": None, "examples": 0,
         "message": "unsupported: x"},
    ]
    return build.assemble(records, backends={"evil<b>": {"name": "evil<b>", "version": INJECT,
                                                         "device": INJECT, "capabilities": {}}},
                          run={"profile": "quick"})


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_report_html_renders_the_ops_and_escapes_backend_text(tmp_path):
    from kvconform.conformance.report import html
    page = html.render(_report())
    assert "<script>" not in page and 'id="pwned"' not in page.replace("&quot;", "")
    chromium = _chromium()
    if chromium is None:
        pytest.skip("chromium not found (apt-get install -y chromium): the browser check cannot run")
    path = tmp_path / "report.html"
    path.write_text(page)
    profile = tmp_path / "profile"
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}", "--dump-dom", path.as_uri()],
                          capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert "<table id=\"ops\">" in dom, proc.stderr[-2000:]
    assert "<title>kvconform report</title>" in dom            # no script changed the title
    assert '<img id="pwned"' not in dom and "<script>" not in dom   # nothing injected became markup
    assert "&lt;img id=\"pwned\"" in dom                          # the text is shown, escaped
    assert 'data-status="fail"' in dom and 'id="failure-1"' in dom
    assert "<svg id=\"error-plot\"" in dom


def test_report_html_plots_error_ratios_and_each_failures_error_profile(cli, tmp_path):
    """A real failing run (a mutant): the error / allowed plot labels every bar with backend and test, and each
    failed field gets its error / allowed profile; the page renders in headless Chromium, and its
    screenshot is kept in the tests' artifacts (KVCONFORM_TEST_ARTIFACTS, default test-artifacts/)."""
    import json
    import os
    from pathlib import Path
    out = tmp_path / "out"
    cli("run", "--backend", "kvconform.conformance.mutants.kv_write:WriteKvReciprocalScale",
        "--ops", "write_kv", "--profile", "ci", "--out", str(out), timeout=600)
    report = json.loads((out / "report.json").read_text())
    failed = [r for r in report["results"] if r["status"] == "fail" and r.get("fields")]
    assert failed and any(f.get("profile") for r in failed for f in r["fields"])
    page = (out / "report.html").read_text()
    with_metric = [r for r in report["results"] if isinstance(r.get("error_ratio"), (int, float)) and r["error_ratio"] > 0]
    assert page.count("<rect", page.index('id="error-plot"'), page.index("</svg>", page.index('id="error-plot"'))) \
        == len(with_metric)
    assert "worst error / allowed error (log scale; dashed: the tolerance)" in page
    assert 'class="profile"' in page and "compared elements (C order, max per bin)" in page
    chromium = _chromium()
    if chromium is None:
        pytest.skip("chromium not found (apt-get install -y chromium): the browser check cannot run")
    artifacts = Path(os.environ.get("KVCONFORM_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "report-html-failures.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", (out / "report.html").as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert 'class="profile"' in dom and 'id="error-plot"' in dom
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1280,2400",
                    (out / "report.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000
