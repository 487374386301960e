"""Text that breaks the reports (hostile backends, round two, item 5): a lone surrogate, Markdown markup and
HTML in a backend's name and message, and a float infinity in its claims, through the CLI, `kvconform
report DIR` and the plugin route (tests/engine/text_backends.py). Every report is written, report.md shows
the markup as typed, and report.json is JSON that strict parsers read."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from text_backends import HOSTILE

HERE = Path(__file__).resolve().parent
REPORTS = ("report.json", "report.md", "report.html", "junit.xml")


def _strict_json(path: Path):
    """report.json as JSON.parse reads it: no bare Infinity / NaN."""
    def refuse(word):
        raise AssertionError(f"{path.name} holds a bare {word}, which JSON.parse rejects")
    return json.loads(path.read_text(), parse_constant=refuse)


def _check_reports(out: Path) -> None:
    for name in REPORTS:
        assert (out / name).exists(), f"{name} was not written"
    _strict_json(out / "report.json")
    md = (out / "report.md").read_text()
    assert " *bold*" not in md and " `tick`" not in md and " [link](" not in md and "<b>" not in md
    assert r"\*bold\*" in md and r"\`tick\`" in md and "\\\\ud800" in md
    assert "\\ud800" in (out / "junit.xml").read_text() and "\\ud800" in (out / "report.html").read_text()


def test_hostile_text_reaches_every_report_escaped_through_the_cli_and_report_rebuilds(cli, tmp_path):
    out = tmp_path / "out"
    proc = cli("run", "--backend", "text_backends:make", "--ops", "write_kv", "--out", str(out), "--", "-k",
               "differential and base")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "report generation failed" not in proc.stdout + proc.stderr
    _check_reports(out)

    # a results.jsonl of an older kvconform: its record holds the lone surrogate itself and an infinite
    # error measure, written by Python's json as a bare Infinity
    results = out / "results.jsonl"
    record = json.loads(results.read_text().splitlines()[0])
    record["message"] = "failed" + HOSTILE
    record["metrics"] = {"k_pages": {"max_abs": float("inf"), "max_ulp": None, "error_ratio": float("inf")}}
    results.write_text(json.dumps(record) + "\n")
    assert "Infinity" in results.read_text()
    for name in REPORTS:
        (out / name).unlink()
    rebuilt = cli("report", str(out))
    assert rebuilt.returncode == 1 and "Traceback" not in rebuilt.stdout + rebuilt.stderr, rebuilt.stderr[-3000:]
    _check_reports(out)
    (rebuilt_record,) = _strict_json(out / "report.json")["results"]
    assert rebuilt_record["metrics"]["k_pages"]["max_abs"] == "inf"


def test_hostile_text_through_the_plugin_route(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
                           "kvconform.conformance.suite", "--kvc-backend", "text_backends:make", "--kvc-ops",
                           "write_kv", "--kvc-out", str(out), "-k", "differential and base"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    _check_reports(out)
