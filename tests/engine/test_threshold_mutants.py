"""Reach is proved, not listed: every threshold mutant generated from the dimension registry
(conformance/mutants/thresholds.py) is killed on numpy's claims, and those from a dimension's small_max on
are killed by reach tests alone (spec/numerics.md "Reach by dimension").

One `kvconform run --profile ci` per op with that op's generated mutants as backends, in process
(conftest.IN_PROCESS; the start-up of a run per mutant would be most of the cost): by default the hardest of each dimension (the largest tile and
the 16-bit narrowing), every one with KVCONFORM_ALL_THRESHOLD_MUTANTS=1; every mutant at every tile is
checked in process against the same reach draws (test_every_generated_mutant_differs_on_a_reach_draw).
The run selects the reach tests (REACH_TESTS; pytest's -k also matches the checkout's folder name, so a
checkout named after one of the words runs every test: slower, same verdict) and leaves out the errors
layer: a mutant wraps the reference's validation unchanged, so it cannot change what is rejected.
That no other test can catch a reach-only mutant is checked without a run: such a mutant acts only past a
tile T >= its dimension's small_max, and on every ordinary column's draws it returns numpy's result bit for
bit (test_reach_only_mutants_are_invisible_to_ordinary_draws; test_dimensions.py checks that ordinary
columns never draw past small_max).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import IN_PROCESS
from dimension_columns import columns, draw

from kvconform import reference
from kvconform.backends.numpy import make_backend
from kvconform.conformance.mutants import all_mutants
from kvconform.conformance.mutants.thresholds import REACH_TESTS, generated, hardest

GENERATED = all_mutants(generated=True)
OPS = sorted({m.op for m in GENERATED})
#: the kvconform runs take every generated mutant with this set (the whole proof, 456 mutants: 6 min 30 s
#: wall, 11.7 CPU min under `-n 2` on the 2-core CI machine, docs/performance.md); by default the hardest
#: of each dimension (thresholds.hardest: the largest tile, the narrowing, 124 of them), and the in-process
#: test below checks every mutant against the same reach columns' draws
EVERY_MUTANT = bool(os.environ.get("KVCONFORM_ALL_THRESHOLD_MUTANTS"))
#: generated mutants the suite does not kill yet, each with the reason (spec/numerics.md "Reach by
#: dimension", "Known gaps"); an entry that gets killed fails this test, so the list only shrinks
NOT_KILLED: dict[str, str] = {}


def _test_part(result: dict) -> str:
    """The test id without its backend parameter (mutant class names must not match REACH_TESTS)."""
    test_id = result["id"]
    name = result["backend_spec"].split(":")[-1]
    return test_id.replace(f"{name}-", "").replace(f"-{name}", "").replace(f"[{name}]", "")


@pytest.mark.parametrize("op", OPS)
def test_generated_threshold_mutants_are_killed_by_reach_tests(cli, tmp_path, op):
    chosen = {c.mutant_info.spec for c in (generated(op) if EVERY_MUTANT else hardest(op))}
    mutants = [m for m in GENERATED if m.spec in chosen]
    out = tmp_path / "out"
    args = [a for m in mutants for a in ("--backend", m.spec)]
    select = f"({' or '.join(REACH_TESTS.split('|'))}) and not rejects"
    proc = cli("run", *args, "--ops", op, "--profile", "ci", "--out", str(out), "--", "-k", select, *IN_PROCESS,
               timeout=1800)
    assert proc.returncode in (1, 3), proc.stdout   # -k picks the reach tests: never green[-3000:] + proc.stderr[-3000:]
    results = cli.report(out)["results"]
    catching = REACH_TESTS.split("|")
    problems = []
    for m in mutants:
        mine = [r for r in results if r["backend_spec"] == m.spec and r["op"] == op]
        failed = [r for r in mine if r["status"] not in ("pass", "unsupported")]
        name = m.spec.split(":")[1]
        if not failed:
            if name not in NOT_KILLED:
                problems.append(f"{name}: not killed ({m.description})")
            continue
        if name in NOT_KILLED:
            problems.append(f"{name}: killed now: remove it from NOT_KILLED")
        if m.only_caught_by:
            wrong = [_test_part(r) for r in failed if not any(c in _test_part(r) for c in catching)]
            if wrong:
                problems.append(f"{name}: killed by tests other than the reach ones: {wrong}")
    assert not problems, "\n".join(problems)


def _same(a, b) -> bool:
    """Bitwise equal results (NaN equal to NaN), field by field."""
    if hasattr(a, "_asdict"):
        return type(a) is type(b) and all(_same(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is b
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


@pytest.mark.parametrize("op", OPS)
def test_reach_only_mutants_are_invisible_to_ordinary_draws(op):
    """A threshold mutant from its dimension's small_max on acts only past T >= small_max, where no ordinary
    column draws (test_dimensions.py): on every ordinary column's derandomized examples it returns what
    numpy returns, bit for bit. This is why they are caught by reach tests alone (the kvconform run above
    selects only those)."""
    claims = make_backend().capabilities()[op]
    reach_only = [c for c in generated(op) if c.mutant_info.only_caught_by]
    seen = []
    for name, reach, strategy in columns(op):
        if reach:
            continue
        try:
            cases = draw(strategy(claims), 2)
        except pytest.skip.Exception:
            continue
        for case in cases:
            expected = getattr(reference, op)(**case.inputs)
            seen.append(name)
            for cls in reach_only:
                got = getattr(cls(), op)(**case.inputs)
                assert _same(got, expected), f"{cls.__name__} differs from numpy on the ordinary column {name}"
    assert seen, f"no ordinary column of {op} drew a case"


@pytest.mark.parametrize("op", OPS)
def test_every_generated_mutant_differs_on_a_reach_draw(op):
    """Every generated mutant of `op` (every tile, not only the hardest) returns something else than numpy
    on some reach column's first (ci) example: the draws the kvconform run above judges. A mutant that no
    reach draw can tell from numpy would pass every reach test."""
    claims = make_backend().capabilities()[op]
    left = {c.__name__: c for c in generated(op)}
    for name, reach, strategy in columns(op):
        if not reach or not left:
            continue
        try:
            cases = draw(strategy(claims), 1)
        except pytest.skip.Exception:
            continue
        for case in cases:
            expected = getattr(reference, op)(**case.inputs)
            for mutant_name, cls in list(left.items()):
                try:
                    got = getattr(cls(), op)(**case.inputs)
                except (ValueError, TypeError, IndexError):
                    left.pop(mutant_name)       # a valid call it cannot take: caught as well
                    continue
                if not _same(got, expected):
                    left.pop(mutant_name)
    assert not left, f"no reach draw of {op} tells these from numpy: {sorted(left)}"
