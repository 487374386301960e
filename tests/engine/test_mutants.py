"""The suite has teeth: every registered mutant fails on its op and clause with a small counterexample.

Each op's selected mutants run as the backends of ONE `kvconform run` of that op (conftest `run_many`,
shared by the op's tests and across pytest-xdist workers), in process (conftest.IN_PROCESS); every check
reads only its own mutant's records (`backend_spec`), so it means what it meant when each mutant had a run
of its own in its worker, which test_a_run_of_several_backends_keeps_each_ones_records_apart checks against
a run of one."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvconform.conformance.cli import main as kvconform_main
from kvconform.conformance.mutants import all_mutants
from kvconform.conformance.strategies.recurrent.reach import smallest_size

MUTANTS = sorted(all_mutants(), key=lambda m: (m.op, m.spec))   # an op's tests side by side
#: The long recurrent cases (strategies/recurrent.py) shrink to one sequence of 9 tokens, one past an
#: 8-token chunk: 10, with one of slack, is their smallest counterexample whatever the bug.
LONG_MAX_SIZE = 11


def _size(params: dict) -> int:
    """A size measure of a drawn case: tokens plus sequences plus heads."""
    return sum(params.get("q_lens", [])) + params.get("num_seqs", 0) + params.get("tokens", 0) + params.get("hq", 0)


def _mutant_specs(session, op: str) -> list[str]:
    """The specs of the mutants of `op` whose test this session runs (after -k / deselection; the same in
    every xdist worker, which all collect the same tests), so a selection runs only what it needs."""
    chosen = [item.callspec.params["m"] for item in session.items
              if item.originalname == "test_mutant_is_caught_on_its_op_and_clause" and hasattr(item, "callspec")]
    return [m.spec for m in chosen if m.op == op]


@pytest.mark.parametrize("m", MUTANTS, ids=lambda m: m.spec.split(":")[1])
def test_mutant_is_caught_on_its_op_and_clause(run_many, request, m):
    run = run_many(m.op, _mutant_specs(request.session, m.op), "ci")
    # the run fails (exit 1: alone, each mutant's run did), this mutant has records and no reason of NOT
    # CHECKED is its own (exit 1 takes precedence over 3, so its own verdict would not show one)
    assert run.returncode == 1 and run.report is not None, run.output
    records = run.records(m.spec)
    assert records, f"no records of {m.spec} in the run of {m.op}: {run.output}"
    labels = {m.spec} | {r["backend"] for r in records}
    assert not [n for n in run.report["gate"]["not_checked"] if n.get("backend") in labels], \
        run.report["gate"]["not_checked"]
    failed = [r for r in records if r["status"] == "fail"]
    assert failed, "the mutant passed every test"
    right = [r for r in failed if r["op"] == m.op and m.clause in r["clauses"]]
    assert right, f"no failure names op {m.op} and clause {m.clause}: {[(r['op'], r['clauses']) for r in failed]}"
    assert all(m.op in r["message"] and r["repro"] for r in right)
    drawn = [r for r in right if r["layer"] in ("differential", "property")]
    for r in drawn:
        case = json.loads((Path(r["repro"]) / "case.json").read_text())
        assert case["op"] == r["op"] and case["backend"] == m.spec
        if str(case["params"].get("variant", "")).startswith(("long_", "reach_")):
            continue   # a size-reach column's shape is its threshold (spec PA-51, NU-15): minimal within it by design
        if case["params"].get("reach") and not m.only_caught_by:
            continue   # a reach column's shapes are the thresholds it crosses, not shrunk (spec "Reach" sections)
        bound = max(m.max_size, LONG_MAX_SIZE) if case["params"].get("variant") == "long" else m.max_size
        # a recurrent reach tier or range regime shrinks no further than its own smallest draw
        bound = max(bound, smallest_size(case["op"], case["params"]))
        size = _size(case["params"])
        if case["params"].get("variant") == "many_kv_heads":
            size -= case["params"]["hq"]   # that column's head counts are large by design (8 .. 32 KV heads)
        assert size <= bound, f"counterexample not minimal: {case['params']}"
    if m.only_caught_by:
        # Only those tests can see this bug: every other test of the op passes the mutant (e.g. a
        # chunk-carry bug is invisible in sequences of at most 4 tokens, so only the long tests fail).
        catching = m.only_caught_by.split("|")
        wrong = [r["id"] for r in failed if not any(c in r["id"] for c in catching)]
        assert not wrong, f"tests other than the {m.only_caught_by!r} ones failed: {wrong}"
        others = [r for r in records if r["op"] == m.op and not any(c in r["id"] for c in catching)]
        assert others and all(r["status"] in ("pass", "unsupported") for r in others), \
            [(r["id"], r["status"]) for r in others if r["status"] not in ("pass", "unsupported")]
        assert any(r["layer"] == "differential" and r["status"] == "pass" for r in others)
    if m.diagnosis:
        # the failure says why: its diagnosis (or message) names what the mutant gets wrong
        told = [r for r in failed if r["op"] == m.op and m.diagnosis in r["message"]]
        assert told, f"no failure of {m.op} mentions {m.diagnosis!r}: {[r['message'][-300:] for r in failed]}"
    # the reproducer replays to the same failure, and passes on the reference (a bug that depends on call
    # history replays from the history property's reproducer, which records the calls before it)
    chosen = [r for r in right if m.replay_from in r["id"]] if m.replay_from else right
    assert chosen, f"no failing test id contains {m.replay_from!r}"
    # `kvconform replay`'s own function in this process, the backend in process as in the run (conftest
    # IN_PROCESS): the interpreter, pytest and hypothesis are loaded already, which a fresh `kvconform
    # replay` pays ~1 s for, and a worker's start ~0.4 s (replays in a worker: test_replay_verdict.py)
    repro = chosen[0]["repro"]
    assert kvconform_main(["replay", repro, "--backend", chosen[0]["backend_spec"], "--no-isolation"]) == 1
    assert kvconform_main(["replay", repro, "--backend", "numpy", "--no-isolation"]) == 0


def test_every_family_mutant_names_a_known_op():
    from kvconform.backends.base import OPS
    assert MUTANTS
    for m in MUTANTS:
        assert m.op in OPS and m.clause and m.description


def _unparametrized(record: dict, spec: str) -> str:
    """A record's test id without its backend's part (`test_x[WriteKvFoo-base]` -> `test_x[base]`)."""
    name = spec.split(":")[-1]
    return record["id"].replace(f"[{name}-", "[").replace(f"[{name}]", "")


def test_a_run_of_several_backends_keeps_each_ones_records_apart(cli, run_many, tmp_path):
    """What the grouped mutant runs rely on: in one run of several backends, in process, each record,
    verdict, counterexample and reproducer is its backend's own, and a backend's results are those it gets
    alone, in a worker subprocess (the isolation of a user's run)."""
    a = "kvconform.conformance.mutants.kv_write:WriteKvInt8ThroughInt32"
    b = "kvconform.conformance.mutants.kv_write:WriteKvGridFollowsKeys"
    specs = ("numpy", a, b)
    group = run_many("write_kv", specs, "ci")
    assert group.returncode == 1, group.output
    assert {r["backend_spec"] for r in group.report["results"]} == set(specs)
    tests = {spec: sorted(_unparametrized(r, spec) for r in group.records(spec)) for spec in specs}
    assert tests[a] == tests[b] == tests["numpy"] and len(set(tests["numpy"])) == len(tests["numpy"]) > 0
    # the reference passes beside two failing backends: no failure leaks into another backend's records
    assert all(r["status"] in ("pass", "unsupported") for r in group.records("numpy"))
    for spec in (a, b):
        failed = [r for r in group.records(spec) if r["status"] == "fail"]
        assert failed and all(spec.split(":")[1] in r["id"] for r in failed)
        for r in failed:
            assert json.loads((Path(r["repro"]) / "case.json").read_text())["backend"] == spec
    repros = [r["repro"] for r in group.report["results"] if r.get("repro")]
    assert len(repros) == len(set(repros))
    # alone, `a` gets the same verdict on every test, with the same counterexample
    out = tmp_path / "alone"
    assert cli("run", "--backend", a, "--ops", "write_kv", "--profile", "ci", "--out", str(out)).returncode == 1
    alone = {_unparametrized(r, a): r for r in cli.report(out)["results"]}
    grouped = {_unparametrized(r, a): r for r in group.records(a)}
    assert set(alone) == set(grouped)
    for test, r in grouped.items():
        assert (r["status"], r.get("counterexample")) == (alone[test]["status"], alone[test].get("counterexample")), test
        if r.get("repro"):
            params = [json.loads((Path(x["repro"]) / "case.json").read_text())["params"] for x in (r, alone[test])]
            assert params[0] == params[1], test
