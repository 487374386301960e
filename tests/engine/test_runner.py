"""Runner behaviour: crash isolation, shards + merge, resume, expectations, JUnit, bad CLI input."""
from __future__ import annotations

import json

import numpy as np
import pytest


def test_abort_and_hang_are_crashes_and_the_run_continues(cli, tmp_path):
    for factory, extra in (("fault_backends:make_aborts", []), ("fault_backends:make_hangs", ["--timeout", "2"])):
        out = tmp_path / factory.split(":")[1]
        # the errors layer is left out: a hang costs the full timeout per test (crashes on malformed input
        # are checked in test_error_inputs.py)
        proc = cli("run", "--backend", factory, "--ops", "write_kv,ragged_paged_attention", "--out", str(out), *extra,
                   "--", "-k", "not rejects")
        assert proc.returncode == 1, proc.stdout[-2000:]
        results = cli.report(out)["results"]
        crashed = [r for r in results if r["status"] == "crash"]
        # every write_kv test is recorded (the worker restarted after each crash); attention is unsupported
        assert {r["status"] for r in results if r["op"] == "write_kv"} <= {"crash", "not run", "unsupported"}
        assert {r["status"] for r in results if r["op"] == "ragged_paged_attention"} == {"unsupported"}
        # three crashes in a row ran (the default --max-crashes); the rest are `not run`, counted apart from
        # the crashes (issue 31: they inflated the crash count), and the crashes alone fail the run (rc 1)
        ran = crashed
        skipped = [r for r in results if r["status"] == "not run"]
        assert len(ran) == 3 and len(skipped) >= 3, [r["status"] for r in results]
        assert all("not run: write_kv crashed 3 times in a row" in r["message"] for r in skipped)
        assert not any("not run:" in r["message"] for r in ran)
        assert all(r["repro"] for r in ran)
        summary = cli.report(out)["summary"]
        assert summary["crash"] == 3 and summary["not run"] == len(skipped)
        assert f"NOT RUN {skipped[0]['backend']} write_kv: {len(skipped)} tests not run" in proc.stdout
        junit = (out / "junit.xml").read_text()
        assert junit.count("<skipped message=\"[write_kv] not run: write_kv crashed 3 times") == len(skipped)
        if factory.endswith("aborts"):  # the fatal signal's Python stack names where the backend died
            assert all("crashed in write_kv (fault_backends.py:" in r["message"] for r in ran), ran[0]
        text = (out / "results.jsonl").read_text().splitlines()
        assert len(text) == len(results)


def test_max_crashes_zero_runs_every_test_of_a_crashing_op(cli, tmp_path):
    out = tmp_path / "out"
    proc = cli("run", "--backend", "fault_backends:make_aborts", "--ops", "write_kv", "--out", str(out),
               "--max-crashes", "0", "--", "-k", "differential")
    assert proc.returncode == 1
    results = cli.report(out)["results"]
    crashed = [r for r in results if r["status"] == "crash"]
    assert len(crashed) == len(results) > 3 and not any("not run:" in r["message"] for r in crashed)
    assert cli("run", "--max-crashes", "-1").returncode == 2


def test_shards_merge_to_the_full_run_and_resume_skips_done_tests(cli, tmp_path):
    ids = []
    for i in (1, 2):
        out = tmp_path / f"shard{i}"
        assert cli("run", "--backend", "numpy", "--ops", "write_kv", "--shard", f"{i}/2",
                   "--out", str(out)).returncode == 0
        ids.append({r["id"] for r in cli.report(out)["results"]})
    assert not ids[0] & ids[1]
    merged = tmp_path / "merged"
    proc = cli("report", "merge", str(tmp_path / "shard1" / "report.json"), str(tmp_path / "shard2"),
               "--out", str(merged))
    assert proc.returncode == 0, proc.stderr
    report = cli.report(merged)
    assert {r["id"] for r in report["results"]} == ids[0] | ids[1]
    assert (merged / "report.html").exists() and (merged / "report.md").exists()
    assert report["gate"]["exit_code"] == 0 and cli.report(tmp_path / "shard1")["shard"] == "1/2"
    # one shard alone is not the run: NOT CHECKED, naming the missing shard (was exit 0, no word about it)
    proc = cli("report", "merge", str(tmp_path / "shard1"), "--out", str(tmp_path / "half"))
    assert proc.returncode == 3 and "shard(s) 2/2 missing from the merge" in proc.stdout, proc.stdout
    # a shard judges its own slice: unreadable claims fail it (was exit 0); and it is a foreign shard
    foreign = tmp_path / "foreign"
    proc = cli("run", "--backend", "fault_backends:make_broken_capabilities", "--ops", "write_kv", "--shard", "2/2",
               "--out", str(foreign))
    assert proc.returncode == 3 and "NOT CHECKED fault_backends:make_broken_capabilities" in proc.stdout
    proc = cli("report", "merge", str(tmp_path / "shard1"), str(foreign), "--out", str(tmp_path / "mixed"))
    assert proc.returncode == 3 and proc.stdout.count("missing from the merge") == 2, proc.stdout
    proc = cli("report", "merge", str(tmp_path / "shard1"), str(tmp_path / "shard1"), "--out", str(tmp_path / "twice"))
    assert proc.returncode == 2 and "are both shard 1/2 of run" in proc.stderr
    # resume the first shard's directory as a full run: only the other shard's tests run
    proc = cli("run", "--backend", "numpy", "--ops", "write_kv", "--resume", "--out", str(tmp_path / "shard1"))
    assert proc.returncode == 0
    lines = (tmp_path / "shard1" / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(ids[0] | ids[1])


def test_expectations_xfail_and_unmatched(cli, tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text('[[xfail]]\ntest = "*test_write_kv_*"\nreason = "known: negative slots wrap"\n\n'
                   '[[xfail]]\ntest = "*no_such_test*"\nreason = "stale"\n')
    out = tmp_path / "out"
    proc = cli("run", "--backend", "kvconform.conformance.mutants.kv_write:WriteKvNegativeSlotWraps",
               "--ops", "write_kv", "--expectations", str(exp), "--out", str(out))
    report = cli.report(out)
    statuses = {r["status"] for r in report["results"]}
    assert "xfail" in statuses and "fail" not in statuses, statuses
    assert [e["test"] for e in report["expectations"]["unmatched"]] == ["*no_such_test*"]
    assert proc.returncode == 0, proc.stdout[-2000:]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[xfail]]\ntest = "*"\n')
    proc = cli("run", "--backend", "numpy", "--expectations", str(bad), "--out", str(out))
    assert proc.returncode == 2 and "reason" in proc.stderr and "Traceback" not in proc.stderr


def test_an_expectation_naming_a_diagnosis_covers_only_that_failure(cli, tmp_path):
    """A broad glob narrowed by `diagnosis` must not hide another bug: the mutant's write_kv failures are not
    diagnosed 'k_tail', so under an entry that names it they are plain failures and the run exits 1."""
    from kvconform.conformance.run.expectations import Expectation
    known = Expectation("*", "known", diagnosis="sequences without query rows dropped")
    assert known.covers({"summary": "passes with soft_cap off, sequences without query rows dropped",
                         "variations": [{"name": "sequences without query rows dropped", "outcome": "pass"}]})
    assert not known.covers({"summary": "still fails with sequences without query rows dropped",
                             "variations": [{"name": "sequences without query rows dropped", "outcome": "fail"}]})
    assert not known.covers(None) and Expectation("*", "any").covers(None)
    exp = tmp_path / "exp.toml"
    exp.write_text('[[xfail]]\ntest = "*test_write_kv_*"\nreason = "known: NaN in k_tail"\ndiagnosis = "k_tail"\n')
    out = tmp_path / "out"
    proc = cli("run", "--backend", "kvconform.conformance.mutants.kv_write:WriteKvNegativeSlotWraps",
               "--ops", "write_kv", "--expectations", str(exp), "--out", str(out), "--", "-k", "golden")
    failed = [r for r in cli.report(out)["results"] if r["status"] == "fail"]
    assert failed and all("not the known failure" in r["message"] for r in failed), failed[:1]
    assert proc.returncode == 1, proc.stdout[-2000:]


def test_junit_and_markdown(cli, tmp_path):
    out = tmp_path / "out"
    assert cli("run", "--backend", "numpy", "--ops", "write_kv", "--out", str(out)).returncode == 0
    junit = (out / "junit.xml").read_text()
    assert 'name="kvc_op" value="write_kv"' in junit and "kvc_clauses" in junit
    md = (out / "report.md").read_text()
    assert "| op | numpy |" in md and "| write_kv | ✅ " in md    # one cell per backend x op
    report = cli.report(out)
    assert report["schema"] == "kvconform.report/1"
    assert report["backends"]["numpy"]["capabilities"]["write_kv"]["kv_dtypes"]


def test_generated_repro_py_runs(cli, tmp_path):
    """Every failure's repro.py must run as a script: the backend's worker is spawned, which re-imports
    the script as __mp_main__, so its body must sit under a `__main__` guard."""
    import subprocess
    import sys
    out = tmp_path / "out"
    proc = cli("run", "--backend", "kvconform.conformance.mutants.kv_write:WriteKvNegativeSlotWraps",
               "--ops", "write_kv", "--out", str(out), "--", "-k", "golden")
    assert proc.returncode == 1, proc.stdout[-2000:]
    script = next((out / "repro").glob("*/repro.py"))
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert "bootstrapping phase" not in ran.stderr, ran.stderr[-2000:]
    assert ran.returncode == 1, (ran.stdout, ran.stderr[-2000:])   # the mutant still fails: a diff, no crash
    assert ran.stdout.startswith(f"replay {script.parent}: op write_kv") and "FAIL" in ran.stdout, ran.stdout


def test_backends_sharing_a_name_stay_apart(cli, tmp_path):
    """Two builds of one library (same `name`) are two report entries, labelled by their spec."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "fault_backends:make_twin_a", "--backend", "fault_backends:make_twin_b",
               "--ops", "write_kv", "--out", str(out), "--", "-k", "golden")
    assert proc.returncode == 3 and "NOT CHECKED -k 'golden' selected " in proc.stdout, proc.stdout[-2000:]
    report = cli.report(out)
    labels = {"twin (fault_backends:make_twin_a)", "twin (fault_backends:make_twin_b)"}
    assert set(report["backends"]) == labels
    assert {d["version"] for d in report["backends"].values()} == {"1.0", "2.0"}
    assert set(report["counts"]) == labels and {c["backend"] for c in report["matrix"]} == labels
    for label in labels:
        assert {r["backend"] for r in report["results"] if label.endswith(r["backend_spec"] + ")")} == {label}
    md = (out / "report.md").read_text()
    assert "| twin (fault_backends:make_twin_a) | ✅ " in md and "| twin (fault_backends:make_twin_b) | ✅ " in md
    assert "| op | twin (fault_backends:make_twin_a) | twin (fault_backends:make_twin_b) |" in md


def test_junit_after_resume_holds_every_result(cli, tmp_path):
    """junit.xml is rendered from all results, as report.json is: a resumed run's holds the earlier tests."""
    import xml.etree.ElementTree as ET
    out = tmp_path / "out"
    assert cli("run", "--backend", "numpy", "--ops", "write_kv", "--out", str(out),
               "--", "-k", "golden and slots").returncode == 3   # -k: NOT CHECKED
    resumed = cli("run", "--backend", "numpy", "--ops", "write_kv", "--out", str(out), "--resume", "--", "-k", "golden")
    assert resumed.returncode == 3 and "NOT CHECKED -k 'golden' selected " in resumed.stdout, resumed.stdout[-2000:]
    ids = {r["id"] for r in cli.report(out)["results"]}
    assert len(ids) >= 2
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    gate = [c for c in suite.iter("testcase") if c.get("classname") == "kvconform.gate"]   # NOT CHECKED reasons
    cases = {f"{c.get('classname').replace('.', '/')}.py::{c.get('name')}" for c in suite.iter("testcase")
             if c not in gate}
    assert cases == ids and suite.get("tests") == str(len(ids) + len(gate))
    assert [c.get("name") for c in gate] == ["not checked: selection"]


def test_backend_text_is_escaped_in_report_md(cli, tmp_path):
    """report.md goes into CI step summaries: a backend's name and messages are escaped HTML, and table
    cells keep their columns."""
    import re
    out = tmp_path / "out"
    # ci: derandomized, so which failure leads each group of causes in report.md is the same every run
    proc = cli("run", "--backend", "fault_backends:make_markup_in_text", "--ops", "write_kv", "--profile", "ci",
               "--out", str(out), "--", "-k", "golden")
    assert proc.returncode == 1, proc.stdout[-2000:]
    md = (out / "report.md").read_text()
    for raw in ("<!--", "<script>", "<b>"):
        assert raw not in md, raw
    assert "&lt;!-- the rest is hidden &lt;script&gt;alert(1)&lt;/script&gt; \\| a &amp; b" in md
    assert "| markup&lt;b&gt;name&lt;/b&gt;\\|pipe | ❌ " in md          # the totals row
    assert "| op | markup&lt;b&gt;name&lt;/b&gt;\\|pipe |" in md          # the ops table's column
    for line in md.splitlines():
        if line.startswith("|"):
            assert len(re.findall(r"(?<!\\)\|", line)) in (3, 4), line   # 2 or 3 columns, none split
    assert "<script>" not in (out / "report.html").read_text()


def test_reports_show_where_a_backend_exception_was_raised(cli, tmp_path):
    """report.md/html show a backend exception's real error and its innermost frames, not the head of a
    traceback; the whole traceback stays in results.jsonl."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "fault_backends:make_raises_nested", "--backend", "fault_backends:make_raises_remote",
               "--ops", "write_kv", "--out", str(out), "--", "-k", "golden and slots")
    assert proc.returncode == 1, proc.stdout[-2000:]
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    md = md.replace("\\_", "_")    # report.md escapes Markdown's emphasis marks (a `_` opening a word)
    site = "raised in _check_grid (fault_backends.py:"
    for text in (md, page):
        assert "backend raised RuntimeError: grid of 3 tokens exceeds the launch limit" in text
        assert site in text and "&lt;- _launch (fault_backends.py:" in text and "&lt;- write_kv (fault_backends.py:" in text
        assert "backend raised RuntimeError: ValueError: tile 96 is not a power of two" in text
    assert "spawn_main" not in md and "Traceback" not in md
    records = {r["backend"]: r for r in cli.report(out)["results"]}
    nested = records["raises-nested"]
    assert nested["message"].splitlines()[1].strip().startswith(site)
    assert nested["traceback"].startswith("Traceback (most recent call last)")
    assert "in _launch" in nested["traceback"] and "RuntimeError: grid of 3 tokens" in nested["traceback"]
    assert "spawn_main" in records["raises-remote"]["traceback"]
    replayed = cli("replay", nested["repro"], "--backend", "fault_backends:make_raises_nested").stdout
    assert "FAIL: backend raised RuntimeError: grid of 3 tokens" in replayed and site in replayed, replayed


@pytest.mark.parametrize("args, needle", [
    (["run", "--backend", "nope"], "unknown backend"),
    (["run", "--backend", "not a spec:x"], "malformed backend"),
    (["run", "--backend", "no_such_module_xyz:f"], "cannot load backend"),
    (["run", "--ops", "attention"], "unknown op"),
    (["run", "--profile", "fast"], "unknown profile"),
    (["run", "--shard", "3/2"], "--shard"),
    (["run", "--backend", "numpy", "--ops", "write_kv", "--timeout", "-5"],
     "argument --timeout: must be a finite number of seconds > 0 and at most 86400 (a day), got '-5'"),
    (["run", "--backend", "numpy", "--ops", "write_kv", "--timeout", "0"], "argument --timeout: must be"),
    (["run", "--backend", "numpy", "--ops", "write_kv", "--timeout", "soon"], "argument --timeout: must be"),
    (["run", "--jobs", "many"], "argument --jobs/-j: invalid int value"),
    (["run", "--out", "/proc/forbidden/out"], "not writable"),
    (["replay", "/nonexistent/dir"], "kvconform: error: no reproducer at /nonexistent/dir"),
    (["coverage", "--suite", "/nonexistent/dir"], "--suite /nonexistent/dir: no such directory"),
    (["report", "merge", "/nonexistent.json", "--out", "x"], "does not exist"),
])
def test_bad_cli_input_is_one_line(cli, args, needle):
    proc = cli(*args)
    assert proc.returncode == 2
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_run_prints_no_assert_rewrite_warning(cli, tmp_path):
    """pytest cannot rewrite a hypothesis imported before it starts; `run` no longer imports it that early."""
    proc = cli("run", "--backend", "numpy", "--ops", "write_kv", "--out", str(tmp_path / "out"), "--", "-k", "golden")
    assert proc.returncode == 3 and "NOT CHECKED -k 'golden' selected " in proc.stdout, proc.stdout[-2000:]
    assert "PytestAssertRewriteWarning" not in proc.stdout + proc.stderr, proc.stdout[-2000:]


def test_coverage_of_another_suite_directory(cli, tmp_path):
    """`kvconform coverage --suite DIR` reads the clauses cited by the test modules in DIR."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_mine.py").write_text(
        "from kvconform.conformance.harness import conformance_test\n\n\n"
        "@conformance_test(op='write_kv', layer='golden', clauses=('PA-41',))\n"
        "def test_skipped_slot(kvc):\n    pass\n")
    proc = cli("coverage", "--suite", str(suite), "--json")
    assert proc.returncode == 0, proc.stderr
    table = json.loads(proc.stdout)["coverage"]
    assert table["PA-41"]["golden"] == ["test_skipped_slot"] and not any(table["PA-7"].values())


def test_corrupted_reproducers_are_rejected(cli, tmp_path):
    from kvconform.conformance.engine import case as case_io
    case = case_io.Case("write_kv", {"k_pages": np.zeros((1, 2, 1, 1), np.float32), "slot_mapping": np.zeros(1, np.int32)})
    good = tmp_path / "good"
    case_io.save(case, good)
    pickled = tmp_path / "pickled"
    case_io.save(case, pickled)
    np.savez(pickled / "inputs.npz", k_pages=np.array([object()], dtype=object), slot_mapping=np.zeros(1))
    truncated = tmp_path / "truncated"
    case_io.save(case, truncated)
    (truncated / "inputs.npz").write_bytes((good / "inputs.npz").read_bytes()[:40])
    wrong_schema = tmp_path / "schema"
    case_io.save(case, wrong_schema)
    (wrong_schema / "case.json").write_text(json.dumps({"schema": "other"}))
    for d in (pickled, truncated, wrong_schema):
        proc = cli("replay", str(d))
        assert proc.returncode == 2 and "corrupted reproducer" in proc.stderr, (d, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_list_reports_every_backend_without_crashing(cli):
    proc = cli("list")
    assert proc.returncode == 0
    assert proc.stdout.startswith("numpy") or "\nnumpy" in proc.stdout


def test_thorough_profile_targets_once_per_example(cli, tmp_path):
    """The thorough profile steers Hypothesis by error / allowed; tests that compare several times per example
    (token by token) and golden tests (no Hypothesis at all) must still run under it."""
    out = tmp_path / "thorough"
    proc = cli("run", "--backend", "numpy", "--profile", "thorough", "--ops", "ssd_chunked_scan",
               "--out", str(out), "--", "-k", "token_by_token or golden")
    assert proc.returncode == 3 and "NOT CHECKED -k 'token_by_token or golden' selected " in proc.stdout, \
        proc.stdout[-2000:]
    results = cli.report(out)["results"]
    assert len(results) >= 4 and {r["status"] for r in results} == {"pass"}


IDLE_MACHINE_SUITE = '''
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule
from kvconform.conformance.harness import conformance_test

@conformance_test(op="write_kv", layer="stateful", clauses=("PA-42",))
def test_machine_that_never_calls(kvc):
    kvc.claims()

    class Idle(RuleBasedStateMachine):
        @rule(x=st.integers(0, 3))
        def nothing(self, x):
            pass

    kvc.run_state_machine(Idle, budget=0.2, steps=2)
'''


def test_a_state_machine_that_never_calls_the_backend_is_not_a_pass(cli, tmp_path):
    """A stateful test whose runs made no backend call checked nothing: after its retries with more runs it
    is `unsupported` (counted apart), never a pass with 0 examples (harness.run_state_machine)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_idle.py").write_text(IDLE_MACHINE_SUITE)
    out = tmp_path / "out"
    cli("run", "--backend", "numpy", "--suite", str(suite), "--profile", "ci", "--out", str(out))
    (result,) = cli.report(out)["results"]
    assert result["status"] == "unsupported" and result["examples"] == 0
    assert "runs of Idle (in 3 attempts) made no backend call" in result["message"]
