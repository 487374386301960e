"""The errors layer has teeth: malformed input must be rejected by the family the reference raises, with a
message naming the argument; accepting it, a vague message or the wrong family fails, with a reproducer
that `kvconform replay` re-checks. The numpy backend (the reference) passes every error test."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvconform.conformance.report import coverage
from kvconform.conformance.engine.case import Case, load, save
from kvconform.conformance.engine.rejection import Rejection, judge, names_argument


#: A few write_kv rules of both families (ValueError: duplicate_slot, scale_missing; TypeError: k_not_float)
#: plus the PA-41 acceptance test: a failing rule costs a Hypothesis shrink, so the fault runs stay small.
SOME_RULES = "rejects and (duplicate_slot or scale_missing or k_not_float or no_negative_slot)"


def _rejects_run(cli, tmp_path, backend, name):
    out = tmp_path / name
    proc = cli("run", "--backend", backend, "--ops", "write_kv", "--profile", "ci", "--out", str(out),
               "--", "-k", SOME_RULES)
    return proc, cli.report(out)["results"]


def _rejection_results(results):
    """The write_kv rejection tests (not the PA-41 acceptance test, which also matches -k rejects)."""
    return [r for r in results if "test_write_kv_rejects[" in r["id"]]


def test_numpy_backend_passes_every_error_test(cli, tmp_path):
    out = tmp_path / "out"
    proc = cli("run", "--backend", "numpy", "--profile", "ci", "--out", str(out), "--", "-k", "rejects")
    # a selection by name: nothing failed, but the run's other tests were not run (NOT CHECKED)
    assert proc.returncode == 3 and "NOT CHECKED -k 'rejects' selected " in proc.stdout, proc.stdout[-3000:]
    results = cli.report(out)["results"]
    assert {r["status"] for r in results} == {"pass"}
    errors = [r for r in results if r["layer"] == "errors"]
    from kvconform.backends.base import OPS
    assert len(errors) >= 150 and {r["op"] for r in errors} == set(OPS)   # every op of every family
    rejecting = [r for r in errors if "_rejects[" in r["id"]]
    assert all(r["examples"] >= 1 and r["rejections"] == r["examples"] for r in rejecting)


def test_accepting_malformed_input_fails_with_a_replayable_reproducer(cli, tmp_path):
    proc, results = _rejects_run(cli, tmp_path, "fault_backends:make_accepts_invalid", "accepts")
    assert proc.returncode == 1, proc.stdout[-3000:]
    rejecting = _rejection_results(results)
    assert len(rejecting) == 3 and {r["status"] for r in rejecting} == {"fail"}
    assert all("accepted invalid input" in r["message"] and r["repro"] for r in rejecting)
    # the PA-41 acceptance test still passes: skipping negative slots is what the backend does right
    assert {r["status"] for r in results if r not in rejecting} == {"pass"}
    dup = next(r for r in rejecting if r["id"].endswith("duplicate_slot]"))
    assert "PA-42" in dup["clauses"] and "slot_mapping" in dup["message"]
    case = json.loads((Path(dup["repro"]) / "case.json").read_text())
    assert case["expected"]["outcome"] == "rejected"
    assert case["expected"]["arguments"] == ["slot_mapping"] and case["expected"]["error"] == "ValueError"
    replay = cli("replay", dup["repro"], "--backend", "fault_backends:make_accepts_invalid")
    assert replay.returncode == 1 and "accepted invalid input" in replay.stdout, replay.stdout
    replay = cli("replay", dup["repro"], "--backend", "numpy")
    assert replay.returncode == 0 and "ok   rejected: ValueError" in replay.stdout, replay.stdout


def test_an_error_not_naming_the_argument_fails(cli, tmp_path):
    proc, results = _rejects_run(cli, tmp_path, "fault_backends:make_vague_errors", "vague")
    assert proc.returncode == 1
    rejecting = _rejection_results(results)
    assert len(rejecting) == 3 and {r["status"] for r in rejecting} == {"fail"}
    assert all("does not name the argument" in r["message"] for r in rejecting)
    replay = cli("replay", rejecting[0]["repro"], "--backend", "fault_backends:make_vague_errors")
    assert replay.returncode == 1 and "does not name the argument" in replay.stdout


def test_the_wrong_error_family_fails_and_a_subclass_passes(cli, tmp_path):
    proc, results = _rejects_run(cli, tmp_path, "fault_backends:make_wrong_family", "family")
    assert proc.returncode == 1
    rejecting = _rejection_results(results)
    assert len(rejecting) == 3 and {r["status"] for r in rejecting} == {"fail"}
    assert any("expected TypeError" in r["message"] for r in rejecting)    # k_not_float
    assert any("expected ValueError" in r["message"] for r in rejecting)   # duplicate_slot
    proc, results = _rejects_run(cli, tmp_path, "fault_backends:make_own_error_class", "subclass")
    # nothing failed; -k SOME_RULES ran 4 of the run's tests: NOT CHECKED
    assert proc.returncode == 3 and "NOT CHECKED -k 'rejects and (duplicate_slot" in proc.stdout, proc.stdout[-3000:]
    assert {r["status"] for r in results} == {"pass"}


def test_a_crash_on_malformed_input_stays_a_crash(cli, tmp_path):
    out = tmp_path / "out"
    proc = cli("run", "--backend", "fault_backends:make_aborts", "--ops", "write_kv", "--profile", "ci",
               "--out", str(out), "--", "-k", "rejects and duplicate_slot")
    assert proc.returncode == 1
    (result,) = cli.report(out)["results"]
    assert result["status"] == "crash" and result["repro"]
    case = json.loads((Path(result["repro"]) / "case.json").read_text())
    assert case["expected"]["outcome"] == "rejected" and case["expected"]["arguments"] == ["slot_mapping"]
    replay = cli("replay", result["repro"], "--backend", "fault_backends:make_aborts")
    assert replay.returncode == 1 and "CRASH" in replay.stdout


BOGUS_SUITE = '''
import numpy as np
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness import conformance_test

@conformance_test(op="write_kv", layer="errors", clauses=("PA-42",))
def test_write_kv_rejects_a_valid_call(kvc):
    kvc.claims()
    pool = np.zeros((1, 2, 1, 1), np.float32)
    case = Case("write_kv", dict(k_pages=pool, v_pages=pool, k=np.zeros((1, 1, 1), np.float32),
                                 v=np.zeros((1, 1, 1), np.float32), slot_mapping=np.array([0], np.int32)))
    kvc.expect_rejected(case, argument="slot_mapping", clause="PA-42", rule="slots must be distinct")
'''


def test_an_error_case_the_reference_accepts_is_a_suite_error_not_a_failure(cli, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_bogus.py").write_text(BOGUS_SUITE)
    out = tmp_path / "out"
    proc = cli("run", "--backend", "numpy", "--suite", str(suite), "--profile", "ci", "--out", str(out))
    assert proc.returncode == 3   # NOT CHECKED (gate.py): an error of the suite is never the backend's failure
    (result,) = cli.report(out)["results"]
    assert result["status"] == "error"
    assert "reference accepts this input" in result["message"]
    assert "1 test(s) ended in an error of the engine or the suite" in proc.stdout


def test_coverage_counts_error_clauses():
    table = coverage.coverage_table(coverage.defined_clauses(), coverage.suite_tests())
    for clause in ("PA-26", "PA-27", "PA-28", "PA-29", "PA-30", "PA-42", "PA-46", "RO-12", "EV-17", "RS-2",
                   "RS-4", "RS-6"):
        assert table[clause]["errors"], clause


def test_coverage_marked_clauses_are_counted_apart():
    """A clause marked in the spec as not testable on a backend is listed with its reason, not as
    uncovered; a covered clause carrying the mark would be a contradiction."""
    texts = {"x.md": "- **XX-1 (a).** Rule.\n  *Not testable on a backend: reason one.*\n- **XX-2 (b).** Other.\n"}
    assert coverage.marked_clauses(texts) == {"XX-1": "reason one"}
    clauses = coverage.defined_clauses(texts)
    table = coverage.coverage_table(clauses, [])
    lines = coverage.render(table, clauses, (), coverage.marked_clauses(texts))
    assert "1/2 clauses covered (1 of them marked not testable on a backend)" in lines
    assert lines[-1] == "uncovered: XX-2"
    real = coverage.coverage_table(coverage.defined_clauses(), coverage.suite_tests())
    assert not [c for c in coverage.marked_clauses() if any(real[c].values())]


# --- the verdict itself (rejection.py) -------------------------------------------------------------

REJECTION = Rejection(("PA-42",), ("slot_mapping",), "slots must be distinct", "ValueError")


@pytest.mark.parametrize("type_name, mro, message, verdict", [
    ("ValueError", ("ValueError", "Exception"), "slot_mapping must not contain duplicates", None),
    ("KernelError", ("KernelError", "ValueError", "Exception"), "duplicate in `slot_mapping`", None),
    ("ValueError", ("ValueError",), "invalid input", "does not name the argument"),
    ("ValueError", ("ValueError",), "slot_mappings are odd", "does not name the argument"),
    ("TypeError", ("TypeError",), "slot_mapping must be distinct", "expected ValueError"),
    ("RuntimeError", ("RuntimeError",), "slot_mapping: CUDA error", "expected ValueError"),
])
def test_judge(type_name, mro, message, verdict):
    problem = judge(REJECTION, type_name, mro, message)
    assert (problem is None) if verdict is None else (verdict in problem)


def test_shape_text_does_not_name_an_argument():
    # "[B, N]" lists dimension names; B is also an argument of selective_state_update
    assert not names_argument("C must have shape [B, N] = (2, 3), got (2, 4)", ("B",))
    assert names_argument("C must have shape [B, N] = (2, 3), got (2, 4)", ("C",))
    assert names_argument("cu_q_lens[3]=7 < cu_q_lens[2]=9", ("cu_q_lens",))
    assert not names_argument("k_pages must have rank 4", ("k",))


def test_case_json_round_trips_the_expected_rejection(tmp_path):
    case = Case("write_kv", {"slot_mapping": np.array([1, 1], np.int32)}, {"dtype": "float32"}, 7,
                REJECTION)
    save(case, tmp_path / "r")
    loaded, meta = load(tmp_path / "r")
    assert meta["expected"]["outcome"] == "rejected" and loaded.rejection == REJECTION
    save(Case("write_kv", {"slot_mapping": np.array([1], np.int32)}), tmp_path / "ok")
    loaded, meta = load(tmp_path / "ok")
    assert meta["expected"] == {"outcome": "result"} and loaded.rejection is None


def test_reports_show_backends_by_layer():
    from kvconform.conformance.report import build, html, markdown
    records = [{"id": f"t{i}", "backend": "b", "op": "write_kv", "layer": layer, "clauses": [], "status": status}
               for i, (layer, status) in enumerate([("golden", "pass"), ("errors", "pass"), ("errors", "fail")])]
    report = build.assemble(records, backends={}, run={"profile": "ci"})
    assert report["layers"] == [{"backend": "b", "layer": "golden", "counts": {"pass": 1}},
                                {"backend": "b", "layer": "errors", "counts": {"pass": 1, "fail": 1}}]
    assert "| errors | ❌ 1 fail, 1 pass |" in markdown.render(report)   # layer rows, a column per backend
    assert '<table id="layers">' in html.render(report)
