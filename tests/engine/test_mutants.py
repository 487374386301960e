"""The suite has teeth: every registered mutant fails on its op and clause with a small counterexample."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvconform.conformance.mutants import all_mutants
from kvconform.conformance.strategies.recurrent.reach import smallest_size

MUTANTS = all_mutants()
#: The long recurrent cases (strategies/recurrent.py) shrink to one sequence of 9 tokens, one past an
#: 8-token chunk: 10, with one of slack, is their smallest counterexample whatever the bug.
LONG_MAX_SIZE = 11


def _size(params: dict) -> int:
    """A size measure of a drawn case: tokens plus sequences plus heads."""
    return sum(params.get("q_lens", [])) + params.get("num_seqs", 0) + params.get("tokens", 0) + params.get("hq", 0)


@pytest.mark.parametrize("m", MUTANTS, ids=lambda m: m.spec.split(":")[1])
def test_mutant_is_caught_on_its_op_and_clause(cli, tmp_path, m):
    out = tmp_path / "out"
    proc = cli("run", "--backend", m.spec, "--ops", m.op, "--profile", "ci", "--out", str(out))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = cli.report(out)
    failed = [r for r in report["results"] if r["status"] == "fail"]
    assert failed, "the mutant passed every test"
    right = [r for r in failed if r["op"] == m.op and m.clause in r["clauses"]]
    assert right, f"no failure names op {m.op} and clause {m.clause}: {[(r['op'], r['clauses']) for r in failed]}"
    assert all(m.op in r["message"] and r["repro"] for r in right)
    drawn = [r for r in right if r["layer"] in ("differential", "property")]
    for r in drawn:
        case = json.loads((Path(r["repro"]) / "case.json").read_text())
        assert case["op"] == r["op"]
        if str(case["params"].get("variant", "")).startswith("long_"):
            continue   # an attention size-reach column's shape is its threshold (spec PA-51): minimal within it by design
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
        others = [r for r in report["results"] if r["op"] == m.op and not any(c in r["id"] for c in catching)]
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
    repro = chosen[0]["repro"]
    assert cli("replay", repro, "--backend", chosen[0]["backend_spec"]).returncode == 1
    assert cli("replay", repro, "--backend", "numpy").returncode == 0


def test_every_family_mutant_names_a_known_op():
    from kvconform.backends.base import OPS
    assert MUTANTS
    for m in MUTANTS:
        assert m.op in OPS and m.clause and m.description
