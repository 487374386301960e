"""The exit code tells the truth (issue 26, part 1): one rule for every command and route (gate.py), each
fault class of conformance/README.md's table "What the exit code means" checked here or in the test the
table names, with hostile backends (import_faults/, fault_backends.py) through the CLI and the pytest
plugin route. Several faults share one CLI call to keep the project tests fast."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvconform.backends.base import claims_problems, description_problems
from kvconform.conformance import cli as cli_module
from kvconform.conformance.cli import run as run_command
from kvconform.conformance.run import expectations, gate
from kvconform.conformance.report import build

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

#: backends that cannot be loaded -> the words of the one line each gets
LOAD_FAULTS = {
    "import_faults.exits:make": "importing import_faults.exits called sys.exit(0)",
    "import_faults.os_exits:make": "its process ended while loading (exit code 0; os._exit()",
    "import_faults.hangs:make": "did not finish loading (import, factory, availability() and capabilities() "
                                "share the call timeout, --timeout) within 3 s; worker killed",
    "import_faults.segfaults:make": "killed by signal SIGSEGV; a crash in native code); crashed in string_at",
    "import_faults.skips:make": "called pytest.skip / pytest.importorskip at load time (could not import "
                                "'kvconform_no_such_dependency'",
    "fault_backends:make_factory_raises": "fault_backends:make_factory_raises() raised RuntimeError: no device found",
    "fault_backends:make_factory_hangs": "did not finish loading",
    "fault_backends:make_availability_raises": "its claims cannot be used: describe() raised RuntimeError: "
                                               "driver not initialised",
    "fault_backends:make_name_not_text": "its claims cannot be used: name must be a non-empty str, got int 12345",
}
#: fault_backends.BadClaims: one problem of each kind, each named with its close match
CLAIMS_FAULTS = (
    "unknown op 'ragged_paged_atention' (did you mean 'ragged_paged_attention'?)",
    "write_kv: unknown dtype 'fp32' (did you mean 'float32'?)",
    "write_kv: unknown feature 'quantised_kv' (did you mean 'quantized_kv'?)",
    "write_kv: page_sizes must be integers >= 1, got -3, 0",
    "write_kv: limit page_size='sixteen': must be an int (upper bound) or a dict",
    "write_kv: limit num_kv_heads={'value': [1]}: unknown constraint key 'value' (did you mean 'values'?)",
    "write_kv: limit max_pages={'values': 1}: 'values' must be a non-empty list of integers >= 0, got 1",
    "write_kv: unknown limit 'max_kvlen' (did you mean 'max_pages'?)",
    "rotate_keys: unknown layout 'interleave' (did you mean 'interleaved'?)",
)


def _backend_args(specs) -> list[str]:
    return [arg for spec in specs for arg in ("--backend", spec)]


# --- loading is isolated like calling: one line each, exit 3, never a silent 0, a hang or a traceback --

def test_list_names_each_backend_that_cannot_load(cli):
    """Before: sys.exit / os._exit at import ended `list` with exit 0 and no output, a hang hung it, a
    segfault killed it (139), pytest.skip and availability() raising gave tracebacks."""
    proc = cli("list", "--timeout", "3", *_backend_args([*LOAD_FAULTS, "fault_backends:make_bad_claims", "numpy"]),
               timeout=120)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for spec, words in LOAD_FAULTS.items():
        (line,) = [line for line in lines if line.startswith(spec + " ")]
        assert words in line, line
    (bad,) = [line for line in lines if line.startswith("fault_backends:make_bad_claims ")]
    assert all(words in bad for words in CLAIMS_FAULTS), bad
    assert any(line.startswith("numpy ") and "cpu" in line for line in lines)   # the others are listed


def test_run_judges_every_backend_and_reports_the_verdict_everywhere(cli, tmp_path):
    """One run: a correct backend named twice (once by its spec: it runs once), five that cannot be
    checked, and expectations matched by the backend's name, its factory and its spec, one of them strict.
    The strict xpass is a failure (exit 1, which takes precedence over NOT CHECKED); every reason is in
    the console, report.json, report.md, report.html and junit.xml (an error each)."""
    exp = tmp_path / "exp.toml"
    exp.write_text('[[xfail]]\ntest = "*test_append_slot_mapping_golden*"\nbackend = "numpy"\nreason = "name"\n\n'
                   '[[xfail]]\ntest = "*test_append_slot_mapping_differential*"\nbackend = "make_backend"\n'
                   'reason = "factory"\nstrict = true\n\n'
                   '[[xfail]]\ntest = "*_rejects*negative_page*"\nbackend = "kvconform.backends.numpy:*"\n'
                   'reason = "spec"\n\n'
                   '[[xfail]]\ntest = "*"\nbackend = "nobody"\nreason = "matches no backend of the run"\n')
    broken = ["import_faults.exits:make", "import_faults.segfaults:make", "fault_backends:make_bad_claims",
              "fault_backends:make_availability_raises", "fault_backends:make_name_not_text"]
    out = tmp_path / "out"
    proc = cli("run", "--profile", "ci", "--timeout", "20", "--ops", "append_slot_mapping",
               *_backend_args(["kvconform.backends.numpy:make_backend", "numpy", *broken]),
               "--expectations", str(exp), "--out", str(out), timeout=300)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "--backend numpy names the same backend as kvconform.backends.numpy:make_backend" in proc.stdout
    report = cli.report(out)
    results = report["results"]
    assert {r["backend"] for r in results} == {"numpy"} and len({r["id"] for r in results}) == len(results)
    assert len(results) == report["gate"]["selected"] == 19   # counted once, not twice (18 tests + strided)
    verdict = report["gate"]
    assert verdict["exit_code"] == 1 and verdict["verdict"] == "FAIL" and verdict["failures"] == 1
    strict = [r for r in results if r.get("strict")]
    assert [r["status"] for r in strict] == ["xpass"] and "differential" in strict[0]["id"]
    reasons = {r["backend"]: r["message"] for r in verdict["not_checked"]}
    assert set(reasons) == {"bad-claims", "import_faults.exits:make", "import_faults.segfaults:make",
                            "fault_backends:make_availability_raises", "fault_backends:make_name_not_text"}
    for spec in broken[:2] + broken[3:]:
        assert LOAD_FAULTS.get(spec, "") in reasons[spec], reasons[spec]
    assert all(words in reasons["bad-claims"] for words in CLAIMS_FAULTS)
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "**Gate: FAIL (exit 1)**" in md and "Gate: FAIL (exit 1)" in page
    for message in reasons.values():
        assert f"NOT CHECKED {message}" in proc.stdout
        assert md.count("NOT CHECKED ") >= 5 and message.split(":")[0] in md
    assert page.count("<li>NOT CHECKED ") == 5
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    gate_cases = [c for c in suite.iter("testcase") if c.get("classname") == "kvconform.gate"]
    assert len(gate_cases) == 5 and all(c.find("error") is not None for c in gate_cases)
    assert suite.get("errors") == "5" and suite.get("failures") == "1"
    # the expectations' backend key matches the backend's name, its factory and its spec alike
    assert [e["backend"] for e in report["expectations"]["unmatched"]] == ["nobody"]
    assert {r["status"] for r in results if "golden" in r["id"] or "negative_page" in r["id"]} == {"xpass"}


def test_plugin_route_exit_status_carries_not_checked(tmp_path):
    """pytest's own exit status is the gate's (3 for NOT CHECKED, as `kvconform run`): before, a backend
    that could not load left a pytest session green; also without --kvc-out (the verdict from the
    session's records)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    env.pop("KVCONFORM_PROFILE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "kvconform.conformance.suite", "-p", "no:cacheprovider", "-q",
         "--kvc-backend", "import_faults.os_exits:make", "--kvc-backend", "numpy", "--kvc-ops", "append_slot_mapping",
         "--kvc-profile", "ci"], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "kvconform gate: NOT CHECKED (exit 3)" in proc.stdout
    assert "NOT CHECKED import_faults.os_exits:make: could not be loaded: its process ended while loading" in proc.stdout
    assert "19 passed" in proc.stdout   # numpy's tests ran (18 + strided); the broken backend's were left out


def test_zero_selected_tests_are_not_checked(cli, tmp_path):
    """`kvconform run ... -- -k <typo>` selected nothing and exited 0."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "numpy", "--ops", "append_slot_mapping", "--out", str(out), "--",
               "-k", "no_such_test_xyz")
    assert proc.returncode == 3, proc.stdout[-2000:]
    assert "NOT CHECKED no test was selected" in proc.stdout
    assert "NOT CHECKED -k 'no_such_test_xyz' selected 0 of the run's 19 tests" in proc.stdout
    assert "no test was selected" in (out / "junit.xml").read_text()


def test_a_suite_that_cannot_be_collected_is_not_checked(cli, tmp_path):
    """pytest ends a session whose collection failed as "interrupted" (2): `kvconform run` exited 2, the
    code of bad command-line input; it is NOT CHECKED, saying why."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_broken.py").write_text("import kvconform_no_such_module\n")
    proc = cli("run", "--backend", "numpy", "--suite", str(suite), "--out", str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stdout[-2000:]
    assert "NOT CHECKED the suite could not be collected: " in proc.stdout
    assert "ModuleNotFoundError: No module named 'kvconform_no_such_module'" in proc.stdout


def test_check_backend_says_what_it_could_not_check(cli):
    """check-backend exits 3 with one line for a backend that cannot load (was a silent 0 for os._exit)
    and names every claims problem (was "no problem found" for an unknown feature and layout)."""
    proc = cli("check-backend", "import_faults.os_exits:make", timeout=120)
    assert proc.returncode == 3 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "NOT CHECKED import_faults.os_exits:make: could not be loaded: its process ended while loading" in proc.stdout
    proc = cli("check-backend", "fault_backends:make_bad_claims", timeout=120)
    assert proc.returncode == 3, proc.stdout
    for words in CLAIMS_FAULTS:
        assert f"NOT CHECKED fault_backends:make_bad_claims: its claims are invalid: {words}" in proc.stdout


@pytest.mark.parametrize("factory, code, words", [
    ("make_returns_none", 1, "write_kv: returned None, expected an array"),
    ("make_availability_raises", 3, "its claims cannot be used: describe() raised RuntimeError: driver not"),
    ("make_returns_three_fields", 1, "write_kv: returned 3 fields, the reference returns 2 fields (k_pages, v_pages)"),
])
def test_check_backend_findings_are_lines(factory, code, words):
    """A backend returning None or a plain 3-tuple, and availability() raising, gave tracebacks in
    check-backend."""
    from kvconform.conformance.cli.check_backend import check_backend
    check = check_backend(f"fault_backends:{factory}", timeout=60)
    assert check.exit_code == code
    text = "\n".join([f"{f.op}: {f.problem}" for f in check.findings] + check.not_checked)
    assert words in text, text


# --- bad invocation: one line, exit 2, nothing run --------------------------------------------------

@pytest.mark.parametrize("argv, needle", [
    (["run", "--backend", "numpy", "--timeout", "1e9"],   # deadlocked the run: OverflowError in every call
     "argument --timeout: must be a finite number of seconds > 0 and at most 86400 (a day), got '1e9'"),
    (["check-backend", "numpy", "--timeout", "nan"], "argument --timeout: must be a finite number of seconds"),
    (["list", "--timeout", "inf"], "argument --timeout: must be a finite number of seconds"),
    (["run", "--backend", "numpy", "--out", ""], "--out '': must name a folder"),
    (["run", "--backend", "numpy", "--ops", ","], "--ops ',' names no op"),
    (["run", "--backend", "numpy", "--ops", "ragged_paged_atention"],
     "--ops: unknown op 'ragged_paged_atention' (did you mean 'ragged_paged_attention'?)"),
    (["run", "--backend", "numpy", "--profile", "ci", "--seed", "3"], "--seed 3: profile ci is derandomized"),
    (["coverage", "--family", "pax"], "--family 'pax': no spec clause has that prefix (did you mean 'PA'?)"),
    (["run", "--backend", "numpy", "--expectations", "BACKEND7"], "'backend' must be a non-empty string"),
    (["run", "--backend", "numpy", "--expectations", "FOLDER"], "is a folder, not a TOML file"),
    (["run", "--backend", "nopkg_xyz.mod:make"], "cannot load backend 'nopkg_xyz.mod:make': no module named"),
])
def test_bad_invocation_is_one_line_and_exit_2(argv, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "backend7.toml").write_text('[[xfail]]\ntest = "*"\nreason = "r"\nbackend = 7\n')
    (tmp_path / "folder.toml").mkdir()
    argv = [{"BACKEND7": "backend7.toml", "FOLDER": "folder.toml"}.get(a, a) for a in argv]
    assert cli_module.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backend7.toml", "folder.toml"]   # nothing ran


def test_jobs_are_clamped_to_cpus_and_work_units(capsys):
    suite = ROOT / "conformance" / "suite"
    assert run_command._clamp_jobs(24, ["numpy"], None, suite, cpus=2) == 2
    assert "--jobs 24 clamped to 2 (2 CPU(s)" in capsys.readouterr().out
    assert run_command._clamp_jobs(2, ["numpy"], ["accumulate_scores"], suite, cpus=2) == 1   # one module x one backend
    assert run_command._clamp_jobs(2, ["numpy", "triton"], ["write_kv"], suite, cpus=8) == 2
    assert run_command._clamp_jobs(2, ["numpy", "triton", "pallas"], None, suite, cpus=2) == 2   # the CI gate
    assert capsys.readouterr().out.count("clamped") == 1


# --- claims as data --------------------------------------------------------------------------------

@pytest.mark.parametrize("claims, words", [
    ({"write_kv": {"dtypes": ["fp32"]}}, "write_kv: unknown dtype 'fp32' (did you mean 'float32'?)"),
    ({"write_kv": {"kv_dtypes": ["bf16"]}}, "write_kv: unknown KV dtype 'bf16' (did you mean 'bfloat16'?)"),
    ({"write_kv": {"features": "quantized_kv"}}, "write_kv: features must be a list of names"),
    ({"write_kv": {"features": [3]}}, "write_kv: features holds 3, not a name"),
    ({"write_kv": {"head_dims": [0, 64]}}, "write_kv: head_dims must be integers >= 1, got 0"),
    ({"write_kv": {"page_sizes": []}}, "write_kv: page_sizes must be None (any) or a non-empty list"),
    ({"write_kv": {"page_sizes": [True]}}, "write_kv: page_sizes must be integers >= 1, got True"),
    ({"write_kv": {"limits": {"page_size": {"min": 8, "max": 4}}}}, "'min' 8 is above 'max' 4"),
    ({"write_kv": {"limits": {"page_size": 0}}}, "an upper bound must be >= 1, got 0"),
    ({"write_kv": {"limits": {"head_dim": {"multiple_of": 0}}}}, "'multiple_of' must be an integer >= 1"),
    ({"write_kv": {"limits": {"dtype_pairs": [["float32", "fp8"]]}}}, "unknown dtype 'fp8'"),
    ({"write_kv": {"limits": {"dtype_pairs": [["float32"]]}}}, "each entry must be an [activation dtype, KV"),
    ({"ragged_paged_attention": {"limits": {"split_kv_min_keys": "256"}}}, "must be an integer >= 1, got '256'"),
    ({"write_kv": {"limit": {}}}, "write_kv: unknown claims field 'limit' (did you mean 'limits'?)"),
    ({"write_kv": ["float32"]}, "write_kv: claims must be OpClaims, got list"),
    # the issue's own examples (before: engine errors charged to the kernel, or silently ignored)
    ({"write_kv": {"limits": {"page_size": "sixteen"}}}, "must be an int (upper bound) or a dict with values"),
    ({"write_kv": {"limits": {"page_size": {"values": 1}}}}, "'values' must be a non-empty list of integers"),
    ({"write_kv": {"limits": {"page_size": {"value": [1]}}}},
     "unknown constraint key 'value' (did you mean 'values'?)"),
    ({"write_kv": {"page_sizes": [-3, 0]}}, "write_kv: page_sizes must be integers >= 1, got -3, 0"),
    # conventions (spec/recurrent.md RS-36 ... RS-40) are judged by their own values, not as sizes
    ({"selective_state_update": {"limits": {"dt_softplus": "sometimes"}}},
     "limit dt_softplus must be one of ['always'], got 'sometimes'"),
])
def test_each_claims_mistake_is_one_problem(claims, words):
    problems = claims_problems(claims)
    assert len(problems) == 1 and len(next(iter(problems.values()))) == 1, problems
    assert words in next(iter(problems.values()))[0]


def test_our_backends_and_every_registered_name_are_valid_claims():
    from kvconform.backends.base import FEATURES, LAYOUTS, LIMITS, LIMIT_KINDS
    from kvconform.backends.numpy import NumpyBackend
    assert description_problems(NumpyBackend().describe()) == []
    assert not claims_problems({op: {"features": list(FEATURES.get(op, ())), "layouts": list(LAYOUTS.get(op, ()))}
                                for op in FEATURES})
    assert set(LIMIT_KINDS) <= {name for names in LIMITS.values() for name in names}
    assert not claims_problems({"selective_state_update": {"limits": {
        "dt_softplus": "always", "required_inputs": ["D", "dt_bias"], "padding_outputs": "unspecified",
        "num_heads": {"values": [4]}}}, "gated_delta_rule_update": {"limits": {"equal_key_value_dims": True}}})
    assert description_problems({"name": "x", "version": 1, "available": "yes", "capabilities": []}) == [
        "version must be a str, got int 1",
        "availability() must return an Availability (kvconform.backends.base), got available='yes'",
        "capabilities() must return a dict of op name -> OpClaims, got list"]


# --- the verdict itself ----------------------------------------------------------------------------

def _rec(status, op="write_kv", backend="b", layer="differential", **extra):
    return {"id": f"t::{op}-{status}-{layer}-{len(extra)}", "status": status, "op": op, "backend": backend,
            "layer": layer, **extra}


def _desc(*ops, **extra):
    return {"name": "b", "available": True, "capabilities": {op: {} for op in ops}, **extra}


def test_gate_rules():
    ok = gate.judge([_rec("pass")], {"b": _desc("write_kv")}, ops=["write_kv"])
    assert (ok["exit_code"], ok["verdict"], ok["not_checked"]) == (0, "PASS", [])
    assert gate.judge([_rec("xfail"), _rec("xpass", layer="golden")], {"b": _desc("write_kv")})["exit_code"] == 0
    assert gate.judge([_rec("xpass", strict=True)], {"b": _desc("write_kv")})["exit_code"] == 1
    # failures take precedence over NOT CHECKED, and both are reported
    both = gate.judge([_rec("crash"), _rec("error", layer="golden")], {"b": _desc("write_kv", "rotate_keys")})
    assert both["exit_code"] == 1 and {r["kind"] for r in both["not_checked"]} == {"errors", "op"}
    # a claimed op of which only rejection or unsupported tests ran is not checked
    rejected = gate.judge([_rec("pass", layer="errors"), _rec("unsupported")], {"b": _desc("write_kv")})
    assert rejected["exit_code"] == 3 and "claims write_kv, but no numerical test of it ran" in \
        rejected["not_checked"][0]["message"]
    # a shard: left to `report merge`; zero selected: not checked
    assert gate.judge([_rec("pass")], {"b": _desc("write_kv", "rotate_keys")}, whole=False)["exit_code"] == 0
    assert gate.judge([], {"b": _desc("write_kv")}, selected=0, whole=False)["not_checked"][0]["kind"] == "no-tests"
    # a requested op no backend claims
    missing = gate.judge([_rec("pass")], {"b": _desc("write_kv")}, ops=["write_kv", "rotate_keys"])
    assert [r["message"] for r in missing["not_checked"]] == [
        "op rotate_keys was requested (--ops), but no backend of the run claims it"]
    # a backend that did not load: NOT CHECKED, and not also "no test was selected"
    gone = gate.judge([], {"x": {"name": "x", "load_error": "boom", "available": False}}, selected=0)
    assert [r["kind"] for r in gone["not_checked"]] == ["backend"]


def test_combine_keeps_pytests_own_codes_and_never_turns_green():
    verdict = {"exit_code": 0}
    assert gate.combine(0, verdict) == 0 and gate.combine(5, verdict) == 0     # an empty shard slice
    assert gate.combine(1, verdict) == 1                                       # a failure no record explains
    assert gate.combine(0, verdict, foreign_failures=True) == 1
    assert gate.combine(0, {"exit_code": 3}) == 3 and gate.combine(5, {"exit_code": 3}) == 3
    assert gate.combine(2, {"exit_code": 0}) == 2 and gate.combine(4, {"exit_code": 3}) == 4


def _shard_report(i, n, run_id, records=()):
    backends = {"b": _desc("write_kv")}
    return build.assemble(list(records), backends=backends,
                          run={"shard": f"{i}/{n}", "run_id": run_id, "ops": ["write_kv"]},
                          session={"selected": 3, "whole": False})


def test_merge_judges_the_whole_run():
    one = _shard_report(1, 2, "aaa", [_rec("pass", backend="b")])
    two = _shard_report(2, 2, "aaa", [_rec("fail", backend="b", layer="golden")])
    assert one["gate"]["exit_code"] == 0 and one["run_id"] == "aaa"
    assert build.merge([one, two])["gate"]["exit_code"] == 1
    alone = build.merge([one], names=["s1.json"])["gate"]
    assert alone["exit_code"] == 3 and "run aaa: shard(s) 2/2 missing from the merge (given: 1/2 (s1.json))" in \
        alone["not_checked"][0]["message"]
    foreign = build.merge([one, _shard_report(2, 2, "bbb")], names=["s1", "other"])["gate"]
    assert sorted(r["message"].split(":")[0] for r in foreign["not_checked"]) == ["run aaa", "run bbb"]
    with pytest.raises(build.ReportError, match="s1 and again are both shard 1/2 of run aaa"):
        build.merge([one, one], names=["s1", "again"])
    # a backend that could not be loaded in one shard stays not checked in the merge
    broken = _shard_report(2, 2, "aaa")
    broken["backends"]["b"] = {"name": "b", "load_error": "hang", "available": False}
    broken["gate"] = gate.judge([], broken["backends"], selected=3, whole=False)
    merged = build.merge([one, broken])["gate"]
    assert merged["exit_code"] == 3 and merged["not_checked"][0]["message"] == "b: could not be loaded: hang"


def test_expectation_backend_key_matches_name_spec_and_factory():
    entry = expectations.Expectation("*test_x*", "r", backend="mykernels")
    assert entry.matches("t.py::test_x[make_backend]", ("mykernels", "pkg.mod:make_backend", "make_backend"))
    record = {"id": "t.py::test_x[make_backend]", "backend": "mykernels", "backend_spec": "pkg.mod:make_backend"}
    for key in ("mykernels", "make_backend", "pkg.mod:*"):
        assert expectations.unmatched([expectations.Expectation("*test_x*", "r", backend=key)], [record]) == []
    twin = dict(record, backend="mykernels (pkg.mod:make_backend)")
    assert expectations.record_names(twin)[:2] == ("mykernels (pkg.mod:make_backend)", "mykernels")


# --- the table -------------------------------------------------------------------------------------

def test_every_row_of_the_exit_code_table_names_a_test_that_exists():
    """conformance/README.md, "What the exit code means": every fault class names the test that checks it."""
    text = (ROOT / "conformance" / "README.md").read_text()
    table = text.split("## What the exit code means", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| fault")]
    assert len(rows) >= 15
    tests = "".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert re.fullmatch(r"`?(0|1|2|3|130 / 143)`?", cells[3]), row
        names = re.findall(r"`(test_\w+)", cells[4])
        assert names, row
        for name in names:
            assert f"def {name}" in tests, (name, row)


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["report", "--help"]])
def test_help_lists_the_exit_codes(argv, capsys):
    """`kvconform --help` (and run's, report's) list the exit codes of the README's table."""
    assert cli_module.main(argv) == 0
    out = capsys.readouterr().out
    for line in ("0    every claimed case was checked", "1    at least one failure", "2    bad invocation",
                 "3    NOT CHECKED", "130  interrupted by SIGINT", "143  interrupted by SIGTERM"):
        assert line in out, (argv, out)
