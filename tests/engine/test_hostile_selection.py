"""pytest options that change what runs (hostile backends, round two, item 3), on the plugin route and
through `kvconform run`: collect-only judges nothing and leaves the output folder alone; tests picked by
pytest's cache (`--lf`) or a session stopped early (`-x`) are NOT CHECKED naming the option;
pytest-timeout does not end a conformance test (the engine bounds each call)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = ["--pyargs", "kvconform.conformance.suite", "--kvc-ops", "write_kv"]


def _pytest(tmp_path, *args, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    env.pop("KVCONFORM_PROFILE", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=tmp_path)


def _earlier_run(out: Path) -> dict:
    """An output folder holding an earlier run's files; {name: text} to compare after."""
    out.mkdir()
    files = {"results.jsonl": '{"id": "earlier", "status": "pass"}\n', "report.json": '{"earlier": true}\n'}
    for name, text in files.items():
        (out / name).write_text(text)
    return files


def test_collect_only_judges_nothing_and_leaves_the_folder(tmp_path, cli):
    out = tmp_path / "out"
    files = _earlier_run(out)
    proc = _pytest(tmp_path, *SUITE, "--kvc-backend", "numpy", "--kvc-out", str(out), "--co")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "kvconform gate" not in proc.stdout
    assert {p.name: p.read_text() for p in out.iterdir()} == files
    run = cli("run", "--backend", "numpy", "--ops", "write_kv", "--out", str(out), "--", "--co")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "collect only (--co): nothing was run or judged" in run.stdout
    assert {p.name: p.read_text() for p in out.iterdir()} == files


def test_tests_picked_by_pytests_cache_or_a_stop_are_not_checked(tmp_path):
    listed = _pytest(tmp_path, *SUITE, "--kvc-backend", "numpy", "--co")
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    assert len(ids) > 5, listed.stdout[-2000:]
    cache = tmp_path / ".pytest_cache" / "v" / "cache"
    cache.mkdir(parents=True)
    (cache / "lastfailed").write_text(json.dumps({ids[0]: True}))   # "the earlier run failed one test"
    out = tmp_path / "out"
    proc = _pytest(tmp_path, *SUITE, "--kvc-backend", "numpy", "--kvc-out", str(out), "--lf")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    reasons = [r for r in json.loads((out / "report.json").read_text())["gate"]["not_checked"]
               if r["kind"] == "selection"]
    assert len(reasons) == 1 and f"--lf (pytest's cache) selected 1 of the run's {len(ids)} tests" in \
        reasons[0]["message"], reasons
    assert "--lf (pytest's cache) selected 1" in proc.stdout

    stopped = _pytest(tmp_path, *SUITE, "--kvc-backend", "text_backends:make", "--kvc-out", str(out), "-x")
    assert stopped.returncode == 1, stopped.stdout[-3000:]
    gate = json.loads((out / "report.json").read_text())["gate"]
    assert gate["failures"] == 1 and any("-x stopped the run after 1 of its" in r["message"]
                                         for r in gate["not_checked"]), gate


def test_pytest_timeout_does_not_end_a_conformance_test(tmp_path):
    """pytest-timeout at 1 s; the backend's first call takes 2 s, far within the engine's call timeout."""
    out = tmp_path / "out"
    proc = _pytest(tmp_path, *SUITE, "--kvc-backend", "selection_backends:make_slow_first_call", "--kvc-out",
                   str(out), "-k", "differential and base", "--timeout", "1")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]   # not failed; -k: NOT CHECKED
    assert "NOT CHECKED -k 'differential and base' selected 1 of the run's " in proc.stdout
    assert "INTERNALERROR" not in proc.stdout + proc.stderr and "Timeout" not in proc.stdout
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "pass"

