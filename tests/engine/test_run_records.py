"""Runs own their folder and leave bounded, honest records (issue 26, items 5-8): what hostile backends
(record_backends.py) and interrupted or cut-short runs leave behind, through the CLI and the plugin."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kvconform.conformance.engine import backend_text
from kvconform.conformance.run import outdir
from kvconform.conformance.report import html, junit, markdown

HERE = Path(__file__).resolve().parent

#: a two-test suite on write_kv: one call, and a few drawn cases
RECORDS_SUITE = '''
import numpy as np
from hypothesis import strategies as st
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness import conformance_test


def _case(n):
    pages = np.zeros((2, 2, 1, 1), np.float32)
    k = np.arange(1, n + 2, dtype=np.float32).reshape(n + 1, 1, 1)
    return Case("write_kv", dict(k_pages=pages, v_pages=pages.copy(), k=k, v=-k,
                                 slot_mapping=np.arange(n + 1, dtype=np.int32)),
                {"dtype": "float32", "kv_dtype": "float32", "page_size": 2, "head_dim": 1})


@conformance_test(op="write_kv", layer="golden", clauses=("PA-43",))
def test_one_call(kvc):
    kvc.claims()
    kvc.check(_case(1))


@conformance_test(op="write_kv", layer="differential", clauses=("PA-43",))
def test_drawn(kvc):
    kvc.claims()   # 4 examples under the quick profile, 12 under ci (the second number tells them apart)
    kvc.for_all(st.tuples(st.integers(0, 3), st.integers(0, 99)).map(lambda t: _case(t[0])), kvc.check, budget=0.5)
'''

HOSTILE = ("huge_message", "loud", "control_characters", "wrong_every_third", "wrong_once",
           "returns_unconvertible", "spawns_and_hangs", "spawns_and_passes")


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "test_records.py").write_text(RECORDS_SUITE)
    return suite


def _records(out: Path) -> dict:
    """{(backend spec, test name): record} of results.jsonl."""
    found = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        rec = json.loads(line)
        found[(rec["backend_spec"].split(":")[1].removeprefix("make_"), rec["test"])] = rec
    return found


def _dead(pid: int) -> bool:
    """No such process, or a zombie nobody has reaped yet (its code no longer runs)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_hostile_backends_leave_bounded_escaped_records_and_flaky_is_its_own_status(cli, tmp_path, monkeypatch):
    pids = tmp_path / "child-pids"
    monkeypatch.setenv("KVC_CHILD_PIDS", str(pids))
    out = tmp_path / "out"
    args = ["run", "--suite", str(_suite(tmp_path)), "--out", str(out), "--timeout", "2", "--max-crashes", "1"]
    for name in HOSTILE:
        args += ["--backend", f"record_backends:make_{name}"]
    proc = cli(*args)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = _records(out)

    # bounded: a 5 MB message and a megabyte printed per call reach neither the CLI nor the records whole
    # (before: results.jsonl, report.json and report.html of 130 MB each, 621 MB of CLI output)
    assert len(proc.stdout) + len(proc.stderr) < 300_000, len(proc.stdout)
    for name in ("results.jsonl", "report.json", "report.html", "report.md", "junit.xml"):
        assert (out / name).stat().st_size < 1_000_000, name
    huge = records["huge_message", "test_one_call"]
    assert huge["status"] == "fail" and len(huge["message"]) < 4500 and "characters cut" in huge["message"]
    assert "backend raised RuntimeError: HEAD-OF-MESSAGE" in huge["message"] and "replay: kvconform replay" in huge["message"]
    assert len(huge["traceback"]) < 9000 and "TAIL-OF-MESSAGE" in huge["traceback"]
    # what is kept of each text is capped too (before: failure.txt held the 5 MB message and the 5 MB
    # traceback, repro/ grew with the message, and the run took ~10x as long): head, tail, and its length
    whole = Path(huge["failure_text"]).read_text()
    assert "TAIL-OF-MESSAGE" in whole and "== backend traceback ==" in whole
    assert "of its 5,000,032 characters cut" in whole and len(whole) < 3 * backend_text.KEPT_CAP, len(whole)
    repro = sum(p.stat().st_size for p in (out / "repro").rglob("*") if p.is_file())
    assert repro < 4_000_000, repro
    loud = records["loud", "test_one_call"]
    assert loud["status"] == "fail" and loud["output_bytes"] > 1_000_000
    assert len(loud["output"]) < 4500 and "bytes cut" in loud["output"]
    assert loud["output"].startswith("FIRST-PRINTED-LINE") and "LAST-LINE-ON-STDERR" in loud["output"]
    printed = Path(loud["failure_text"]).read_text()
    assert abs(printed.count("L" * 1000) - backend_text.KEPT_CAP // 1000) <= 1 and "more bytes not kept" in printed
    assert "L" * 5000 not in proc.stdout + proc.stderr

    # control characters from a backend's name and messages never reach a report raw
    for name in ("report.md", "report.html", "junit.xml"):
        text = (out / name).read_text()
        assert not any(c in text for c in "\x1b\x00\x07\u202e"), name
        # report.md backslash-escapes Markdown's markup (the backslash and `[` here): it renders as the others
        shown = "esc\\\\x1b\\[31mred\\\\x00nul" if name == "report.md" else "esc\\x1b[31mred\\x00nul"
        assert shown in text, name
    assert "\x1b" not in proc.stdout

    # flaky: its own status, with the rate of replays of the failing call, in every report
    third = records["wrong_every_third", "test_one_call"]
    assert third["status"] == "flaky" and (third["replays"]["failed"], third["replays"]["replays"]) == (3, 10)
    assert third["message"].splitlines()[1].strip() == "flaky: failed 3 of 10 replays of this counterexample"
    once = records["wrong_once", "test_drawn"]   # Hypothesis: "unreliable results"
    assert once["status"] == "flaky" and "Hypothesis: unreliable results" in once["message"], once["message"]
    assert once["replays"]["failed"] == 0
    assert "flaky" in (out / "report.md").read_text() and 'data-status="flaky"' in (out / "report.html").read_text()
    assert "FLAKY record_backends:make_wrong_every_third" not in proc.stdout   # labelled by name
    assert "FLAKY wrong-every-third write_kv [PA-43]" in proc.stdout and "(failed 3 of 10 replays)" in proc.stdout
    junit_xml = (out / "junit.xml").read_text()
    assert 'message="[write_kv] clauses PA-43: wrong-every-third differs from the reference"' in junit_xml

    # a result the engine cannot convert is never charged as "backend raised"
    unconvertible = records["returns_unconvertible", "test_one_call"]
    assert "returns-unconvertible returned" in unconvertible["message"] and "could not be converted" in \
        unconvertible["message"] and "backend raised" not in unconvertible["message"], unconvertible["message"]

    # children a backend spawns die with its worker: at a timeout, and when the run stops it
    hang = records["spawns_and_hangs", "test_one_call"]
    assert hang["status"] == "crash"
    # a crash prints its words and where, not pytest's traceback through the engine with every argument's
    # repr (before: ~60 lines here, ~200 under Hypothesis); that traceback is in failure.txt
    assert "kwargs = {" not in proc.stdout and "def call(self" not in proc.stdout, proc.stdout[-3000:]
    assert "crash: hang: write_kv did not return within 2 s (worker killed)" in proc.stdout, proc.stdout[-3000:]
    crash_text = Path(hang["failure_text"]).read_text()
    assert "== the crash in the run's process (pytest's traceback) ==" in crash_text and "kwargs = {" in crash_text
    assert records["spawns_and_passes", "test_one_call"]["status"] == "pass"
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 2 and all(_dead(p) for p in children), children

    # replay repeats a flaky reproducer and says so (a fresh worker: calls 0, 3, 6, 9 of 10 are wrong)
    replayed = cli("replay", third["repro"], "--backend", "record_backends:make_wrong_every_third")
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "FLAKY: failed 4 of 10 replays (recorded flaky: failed 3 of 10 replays)" in replayed.stdout, replayed.stdout

    # `kvconform report DIR` rebuilds every report from results.jsonl and run.json
    before = json.loads((out / "report.json").read_text())
    for name in outdir.REPORTS:
        (out / name).unlink()
    rebuilt = cli("report", str(out))
    assert rebuilt.returncode == 1, rebuilt.stdout + rebuilt.stderr
    after = json.loads((out / "report.json").read_text())
    assert after["results"] == before["results"] and after["summary"] == before["summary"]
    assert all((out / name).is_file() for name in outdir.REPORTS)


def test_replay_imports_nothing_a_reproducer_names_and_a_declined_rejection_is_one_line(cli, tmp_path, monkeypatch):
    from kvconform.conformance.engine import case as case_io
    from kvconform.conformance.engine.rejection import Rejection
    marker = tmp_path / "tampered"
    monkeypatch.setenv("KVC_TAMPERED", str(marker))
    pages = np.zeros((2, 2, 1, 1), np.float32)
    k = np.ones((2, 1, 1), np.float32)
    case = case_io.Case("write_kv", dict(k_pages=pages, v_pages=pages.copy(), k=k, v=k,
                                         slot_mapping=np.array([1, 1], np.int32)),
                        {"dtype": "float32", "kv_dtype": "float32", "page_size": 2, "head_dim": 1},
                        rejection=Rejection(("PA-42",), ("slot_mapping",), "slots must be unique"))
    repro = tmp_path / "repro"
    case_io.save(case, repro, {"backend": "record_tamper:make", "features": ["base"]})
    proc = cli("replay", str(repro))
    assert proc.returncode == 2 and not marker.exists(), proc.stdout + proc.stderr
    assert proc.stderr.startswith("kvconform: error: the reproducer names the backend 'record_tamper:make', which "
                                  "is not an installed entry point") and len(proc.stderr.splitlines()) == 1
    proc = cli("replay", str(repro), "--backend", "record_backends:make_declines_malformed")
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["  FAIL: raised kvconform.Unsupported('not a case this kernel handles') "
                                             "instead of rejecting the malformed call",
                                             "  REPRODUCED: failed 3 of 3 replays"]


# --- pieces, without a run ---------------------------------------------------------------------------

def test_cap_keeps_head_and_tail_and_says_how_much_was_cut():
    text = "A" * 100 + "B" * 10_000 + "C" * 300
    capped = backend_text.cap(text, 400, "repro/x/failure.txt")
    assert capped.startswith("A" * 100) and capped.endswith("C" * 300)
    assert "[... 10,000 characters cut; the whole text: repro/x/failure.txt ...]" in capped
    assert backend_text.cap("short", 400) == "short"


def test_visible_escapes_control_characters_but_keeps_newlines_and_tabs():
    assert backend_text.visible("a\x1b[2Jb\x00c\rd\u202ee\x9bf\tg\nh") == "a\\x1b[2Jb\\x00c\\rd\\u202ee\\x9bf\tg\nh"


def test_reports_escape_control_characters_and_mark_a_partial_run():
    record = {"id": "suite/test_x.py::test_y[b\x1bq]", "status": "flaky", "backend": "n\x00me", "op": "write_kv",
              "clauses": ["PA-43"], "message": "bad\x1b[31m\nsecond\x07", "replays": {"failed": 1, "replays": 10},
              "layer": "golden", "features": ["base"]}
    report = {"suite_version": "0", "spec_version": "0", "profile": "ci", "created": "now", "results": [record],
              "matrix": [{"backend": "n\x00me", "op": "write_kv", "feature": "base", "counts": {"flaky": 1},
                          "error_ratio": None}], "layers": [], "backends": {}, "expectations": {"unmatched": []},
              "partial": "interrupted by SIGTERM: 1 results recorded"}
    for text in (markdown.render(report), html.render(report), junit.render(report)):
        assert not any(c in text for c in "\x1b\x00\x07"), text
        assert "\\x1b" in text and "interrupted by SIGTERM" in text
    xml = junit.render(report)
    assert 'name="run"' in xml and 'errors="1"' in xml and 'failures="1"' in xml
    assert "**PARTIAL RUN:**" in markdown.render(report) and 'id="partial"' in html.render(report)


def test_a_torn_last_line_is_dropped_and_a_whole_one_gets_its_newline(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"id": "a", "status": "pass"}\n{"id": "b", "stat')
    assert outdir.repair_results(path) and path.read_text() == '{"id": "a", "status": "pass"}\n'
    path.write_text('{"id": "a", "status": "pass"}')
    assert outdir.repair_results(path) and path.read_text() == '{"id": "a", "status": "pass"}\n'
    assert not outdir.repair_results(path)


def test_a_new_run_clears_only_kvconforms_own_files(tmp_path):
    from kvconform.conformance.engine import case as case_io
    for name in (*outdir.OWNED_FILES, "notes.txt", ".report.json.123.kvconform-tmp"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "old.json").write_text('{"spec": "old:make", "name": "old"}')
    (tmp_path / "backends" / "mine.json").write_text('{"mine": 1}')
    case_io.save(case_io.Case("write_kv", {"slot_mapping": np.zeros(1, np.int32)}), tmp_path / "repro" / "old-1")
    (tmp_path / "repro" / "mine").mkdir()
    (tmp_path / "hypothesis-db").mkdir()
    outdir.clear(tmp_path)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == ["backends", "backends/mine.json", "hypothesis-db", "notes.txt", "repro", "repro/mine"]


def test_processes_writing_one_file_at_once_never_fail(tmp_path):
    """The xdist processes of one run write the same backend description at once: each whole, none
    failing (one shared temporary name made one process's rename fail, which stopped the run)."""
    code = ("import sys; from pathlib import Path; from kvconform.conformance.run.outdir import write_atomic\n"
            "for i in range(300): write_atomic(Path(sys.argv[1]), 'x' * 4096)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "same.json")], stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    assert (tmp_path / "same.json").read_text() == "x" * 4096 and [p.name for p in tmp_path.iterdir()] == ["same.json"]


def test_resume_options_come_from_run_json_and_a_different_one_is_refused(tmp_path):
    options = {"profile": "ci", "backends": ["numpy"], "ops": ["write_kv"], "seed": None, "timeout": 5.0,
               "expectations": [], "run_unclaimed": False, "max_crashes": 3}
    (tmp_path / "run.json").write_text(json.dumps({"options": options}))
    given = dict.fromkeys(outdir.RESUMED)
    assert outdir.resumed_options(tmp_path, given) == options
    assert outdir.resumed_options(tmp_path, dict(given, backends=["numpy"], timeout=5))["timeout"] == 5
    with pytest.raises(outdir.FolderError, match=r"made with --profile ci; quick differs: leave --profile out"):
        outdir.resumed_options(tmp_path, dict(given, profile="quick"))
    with pytest.raises(outdir.FolderError, match=r"--backend numpy; triton differs"):
        outdir.resumed_options(tmp_path, dict(given, backends=["triton"]))
    with pytest.raises(outdir.FolderError, match="holds no run to continue"):
        outdir.resumed_options(tmp_path / "nothing", given)


# --- the output folder: ownership, resume, one run at a time, interrupts, a full disk --------------

def _stale_run_files(out: Path) -> None:
    """What an earlier run of another backend left in `out`: its description (claiming write_kv) and a
    reproducer, and its run.json (a folder with files but no run is refused); plus a user's own file,
    which must survive."""
    from kvconform.conformance.engine import case as case_io
    (out / "backends").mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({"profile": "ci", "backends": ["fault_backends:make_old"]}))
    (out / "backends" / "fault_backends_make_old.json").write_text(json.dumps(
        {"spec": "fault_backends:make_old", "name": "old", "available": True,
         "capabilities": {"write_kv": {"dtypes": ["float32"], "kv_dtypes": ["float32"]}}}))
    case_io.save(case_io.Case("write_kv", {"slot_mapping": np.zeros(1, np.int32)}), out / "repro" / "old-1",
                 {"backend": "fault_backends:make_old"})
    (out / "notes.txt").write_text("mine")


def test_a_reused_folder_is_the_new_runs_and_resume_continues_the_old_one(cli, tmp_path):
    out = tmp_path / "out"
    _stale_run_files(out)
    # a new run replaces the earlier run's files (before: exit 1, "NOT CHECKED old: claims write_kv ...")
    proc = cli("run", "--backend", "numpy", "--ops", "write_kv", "--suite", str(_suite(tmp_path)), "--profile", "ci",
               "--out", str(out))
    assert proc.returncode == 0 and "NOT CHECKED" not in proc.stdout, proc.stdout[-3000:]
    assert not (out / "repro").exists() and (out / "notes.txt").read_text() == "mine"
    assert [json.loads(p.read_text())["spec"] for p in (out / "backends").iterdir()] == ["numpy"]
    lines = (out / "results.jsonl").read_text().splitlines()
    assert {json.loads(line)["backend"] for line in lines} == {"numpy"}

    # a kill cut the last record short; --resume without --profile continues as ci and repairs the line
    # (before: the next record was glued onto the torn one, and the rest ran under quick)
    torn = "\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2]
    (out / "results.jsonl").write_text(torn)
    proc = cli("run", "--resume", "--suite", str(_suite(tmp_path)), "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "backends numpy; profile ci" in proc.stdout and "1 passed" in proc.stdout, proc.stdout[-2000:]
    resumed = (out / "results.jsonl").read_text().splitlines()
    assert len(resumed) == len(lines) and all(json.loads(line) for line in resumed)
    assert json.loads(resumed[-1])["id"] == json.loads(lines[-1])["id"]
    assert json.loads(resumed[-1])["examples"] == json.loads(lines[-1])["examples"] == 12   # ci's count, not quick's
    report = cli.report(out)
    assert report["profile"] == "ci" and len(report["results"]) == len(lines) and report["partial"] is None

    # an option that differs from the resumed run's is refused in one line
    proc = cli("run", "--resume", "--profile", "quick", "--suite", str(_suite(tmp_path)), "--out", str(out))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "made with --profile ci; quick differs" in proc.stderr


def _wait_for(predicate, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.2)


def _start_run(tmp_path: Path, out: Path) -> subprocess.Popen:
    """`kvconform run` of a backend that passes one call and then hangs, on one golden test and one
    differential test of write_kv (the first passes, the second is under way until stopped)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    env.pop("KVCONFORM_PROFILE", None)
    return subprocess.Popen([sys.executable, "-m", "kvconform.conformance.cli", "run", "--backend",
                             "record_backends:make_hangs_after_first", "--suite", str(_suite(tmp_path)),
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)


def test_interrupted_runs_leave_partial_reports_and_hold_their_folder(cli, tmp_path):
    """SIGTERM and SIGINT (two runs at once): exit 143 / 130, the reports marked partial (before: SIGTERM
    left no report, Ctrl-C exited 2 with an unmarked report); a second run into a folder in use is
    refused in one line."""
    runs = {sig: (_start_run(tmp_path, tmp_path / sig.name), tmp_path / sig.name) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for _, out in runs.values():
            _wait_for(lambda: (out / "results.jsonl").exists() and (out / "results.jsonl").read_text().count("\n") >= 1)
        second = cli("run", "--backend", "numpy", "--ops", "write_kv", "--out", str(tmp_path / "SIGTERM"), timeout=60)
        assert second.returncode == 2 and len(second.stderr.splitlines()) == 1, second.stderr
        assert "is in use by another kvconform run (pid" in second.stderr
        for sig, (run, _) in runs.items():
            run.send_signal(sig)
        ended = {sig: run.communicate(timeout=60) for sig, (run, _) in runs.items()}
    finally:
        for run, _ in runs.values():
            run.kill()
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        (run, out), (stdout, stderr) = runs[sig], ended[sig]
        assert run.returncode == code, stdout[-2000:] + stderr[-2000:]
        assert f"kvconform run: interrupted by {sig.name}: the reports in {out} are partial" in stderr, stderr
        report = cli.report(out)
        assert report["partial"].startswith(f"interrupted by {sig.name}: 1 results recorded"), report["partial"]
        assert [r["status"] for r in report["results"]] == ["pass"]
        assert "**PARTIAL RUN:** interrupted by" in (out / "report.md").read_text()
        junit_xml = (out / "junit.xml").read_text()
        assert junit_xml.count('<testcase classname="kvconform" name="run"') == 1   # once, not also as a gate reason
        assert "kvconform.gate" not in junit_xml and "partial run" in " ".join(
            r["message"] for r in report["gate"]["not_checked"])   # the gate is never PASS on a partial run
        assert json.loads((out / "run.json").read_text())["status"] == "interrupted"


def test_a_full_disk_cuts_the_run_short_in_one_line_and_report_rebuilds_it(tmp_path):
    """A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes past it fail with EFBIG) stands for a
    full disk: records stop, exit 3, one line, no truncated report (before: 95 lines of INTERNALERROR)."""
    import resource
    out = tmp_path / "out"

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (8000, 8000))   # > run.json and backends/*.json, < 27 results

    env = dict(os.environ)
    env.pop("KVCONFORM_PROFILE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "kvconform.conformance.cli", "run", "--backend",
                           "record_backends:make_write_kv_only", "--ops", "write_kv", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path, preexec_fn=limited)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "INTERNALERROR" not in proc.stdout + proc.stderr and "Traceback" not in proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"kvconform run: NOT CHECKED: the run was cut short: cannot write {out}/results.jsonl: "
                           f"File too large"), line
    for name in outdir.REPORTS:   # whole or absent, never cut off
        assert not (out / name).exists() or name != "report.json" or json.loads((out / name).read_text())
    recorded = 0
    for text in (out / "results.jsonl").read_text().splitlines():   # the last one may be cut off
        try:
            recorded += bool(json.loads(text))
        except ValueError:
            pass
    assert recorded > 5
    rebuilt = subprocess.run([sys.executable, "-m", "kvconform.conformance.cli", "report", str(out)],
                             capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert rebuilt.returncode == 3, rebuilt.stdout + rebuilt.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["partial"].startswith("cut short: cannot write") and len(report["results"]) == recorded
    assert report["gate"]["exit_code"] == 3 and [r["kind"] for r in report["gate"]["not_checked"]] == ["partial"]


def test_the_plugin_route_owns_its_folder_and_records_flaky(tmp_path):
    """`pytest ... --kvc-out DIR` (the backend author's route): the same folder rules and statuses."""
    out = tmp_path / "out"
    _stale_run_files(out)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    env.pop("KVCONFORM_PROFILE", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", str(_suite(tmp_path)), "-p", "no:cacheprovider", "-q",
                           "--kvc-backend", "record_backends:make_wrong_every_third", "--kvc-out", str(out),
                           "-k", "one_call"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "flaky" and record["replays"]["failed"] == 3
    assert (out / "notes.txt").exists() and not (out / "repro" / "old-1").exists()
    assert [json.loads(p.read_text())["name"] for p in (out / "backends").iterdir()] == ["wrong-every-third"]
    assert "FLAKY wrong-every-third" in proc.stdout


def test_a_merge_of_a_partial_shard_is_partial():
    from kvconform.conformance.report import build
    record = {"id": "t::a", "status": "pass", "backend": "numpy", "op": "write_kv", "layer": "golden"}
    whole = build.assemble([record], backends={}, run={"shard": "1/2", "status": "complete"})
    cut = build.assemble([dict(record, id="t::b")], backends={},
                         run={"shard": "2/2", "status": "interrupted", "stopped": "interrupted by SIGTERM"})
    assert whole["partial"] is None and cut["partial"].startswith("interrupted by SIGTERM: 1 results recorded")
    assert build.merge([whole, cut])["partial"].startswith("shard 2/2: interrupted by SIGTERM")
    rest = build.assemble([dict(record, id="t::b")], backends={}, run={"shard": "2/2", "status": "complete"})
    assert build.merge([whole, rest])["partial"] is None
    # the gate: a partial run, or a merge holding one, is never green (gate.py: NOT CHECKED)
    assert cut["gate"]["exit_code"] == 3 and whole["gate"]["exit_code"] == 0
    assert build.merge([whole, cut])["gate"]["exit_code"] == 3 and build.merge([whole, rest])["gate"]["exit_code"] == 0
