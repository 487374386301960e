"""`kvc`, the object every suite test receives: claims, example loop, backend calls and comparison.

A suite test reads like this (see conformance/README.md, "How to add an op family"):

    @conformance_test(op="write_kv", clauses=("PA-43", "PA-45"), layer="differential")
    def test_write_kv_matches_reference(kvc):
        claims = kvc.claims("write_kv")                 # skips as `unsupported` if not claimed
        kvc.for_all(write_kv_cases(claims), kvc.check)  # Hypothesis loop, differential check

`check(case)` runs the reference in this process and the backend in its worker subprocess, compares
every output field with the family's `CHECKS[op]` (tolerance and specified region), records metrics,
and raises `ConformanceFailure` naming op, clauses, worst element, error / allowed and reproducer.

`expect_rejected(case)` is the "errors" layer: `case` is malformed (it carries a `Rejection`), the
reference must reject it, and the backend must raise the same family (ValueError / TypeError) with a
message naming the offending argument:

    @conformance_test(op="write_kv", clauses=("PA-42",), layer="errors")
    def test_write_kv_rejects_duplicate_slots(kvc):
        kvc.for_all(duplicate_slot_cases(kvc.claims()), kvc.expect_rejected, budget=0.12)
"""
from __future__ import annotations

import math
import re
import time
from typing import Any, Callable, Iterable

import hypothesis
import pytest

from kvconform import reference
from kvconform.backends.base import OPS, OpClaims
from kvconform.conformance.engine.call_errors import BackendDeclined, BackendError, BackendProtocolError
from kvconform.conformance.engine.case import Case
from kvconform.conformance.engine.flaky import Replay
from kvconform.conformance.engine.protocol import ALIAS
from kvconform.conformance.engine.records import LAYERS
from kvconform.conformance.engine.strided import layouts_of
from kvconform.conformance.engine.timing import PhaseClock
from kvconform.conformance.harness import profiles
from kvconform.conformance.harness.outputs import compare_outputs, poison_expectation, raised_lines

from .failures import _GROUPS, ConformanceFailure, FailureRecords
from .rejections import RejectionChecks


class Unclaimed(Exception):
    pass


def conformance_test(*, op: str, clauses: Iterable[str], layer: str):
    """Mark a suite test: the op it exercises, the spec clauses it checks, and its layer."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; ops are listed in kvconform.backends.base.OPS")
    if layer not in LAYERS:
        raise ValueError(f"layer must be one of {LAYERS}, got {layer!r}")
    clauses = tuple(clauses)
    bad = [c for c in clauses if not re.fullmatch(r"[A-Z]{2}-[A-Z]*\d+[a-z]?", c)]
    if bad:
        raise ValueError(f"malformed clause ids {bad}: expected e.g. 'PA-7'")

    def decorate(fn):
        fn.kvconform = {"op": op, "clauses": clauses, "layer": layer}
        return pytest.mark.kvconform(op=op, clauses=clauses, layer=layer)(fn)
    return decorate


class Harness(FailureRecords, RejectionChecks):
    def __init__(self, *, backend_spec: str, worker, description: dict, profile: profiles.Profile,
                 out_dir, node, run_unclaimed: bool = False, call_timeout: float | None = None,
                 shrink_seconds: float | None = None):
        self.backend_spec = backend_spec
        self.backend_name = description.get("name", backend_spec)
        self.worker = worker
        self.description = description
        self.profile = profile
        self.out_dir = out_dir
        self.node = node
        self.run_unclaimed = run_unclaimed
        self.call_timeout = call_timeout or profile.call_timeout
        self.shrink_seconds = shrink_seconds or profile.shrink_seconds   # profiles.py, "Shrink budget"
        marker = node.get_closest_marker("kvconform")
        meta = marker.kwargs if marker else {"op": "", "clauses": (), "layer": ""}
        self.op: str = meta["op"]
        self.clauses: tuple[str, ...] = tuple(meta["clauses"])
        self.layer: str = meta["layer"]
        self.features: tuple[str, ...] = ()
        self.unclaimed = False
        self.examples = 0
        self._example_error: float | None = None  # worst error / allowed of the current example (target)
        self.rejections = 0          # malformed cases the backend rightly rejected (errors layer)
        self.metrics: dict[str, dict] = {}
        self.dtypes_seen: set[str] = set()
        self.failure: dict | None = None
        self.last_case: Case | None = None
        self._check_kind: tuple | None = None   # how the last compared case was judged (for the diagnosis)
        self._before: list[Case] = []           # calls a failure depends on (call history), replayed first
        self._expected: tuple | None = None     # (case, reference result) while check() calls the backend
        self.not_run = ""                       # set when the op kept crashing: `not run`, call nothing
        self.crash_diagnosis: dict | None = None  # the diagnosis of a crash (no failure record holds it)
        self.started = time.monotonic()
        self.clock = PhaseClock()               # engine-throughput shares (conformance/timing.py)

    # --- claims -------------------------------------------------------------------------------
    def claims(self, op: str | None = None, *, features: Iterable[str] = ()) -> OpClaims:
        """The backend's claims for `op`; skips the test as `unsupported` when the op or a feature is
        not claimed (with --run-unclaimed it runs anyway: a pass is `unclaimed-pass`)."""
        op = op or self.op
        self.features = tuple(features)
        # the claims were checked as data when the backend was loaded (loading.py, base.claims_problems):
        # a backend with invalid claims never reaches a test
        raw = self.description.get("capabilities", {}).get(op)
        missing = []
        if raw is None:
            missing.append(f"op {op}")
        else:
            missing += [f"feature {f}" for f in self.features if f not in raw.get("features", [])]
        if missing:
            if not self.run_unclaimed or raw is None:
                pytest.skip(f"unsupported: {self.backend_name} does not claim {', '.join(missing)}")
            self.unclaimed = True
            raw = dict(raw, features=list(raw.get("features", [])) + list(self.features))
        self._stop_if_not_run()
        return OpClaims.from_json(raw)

    def _stop_if_not_run(self) -> None:
        """After --max-crashes crashes in a row of the op: the test is `not run` (a skip with the reason,
        counted apart from crashes; the crashes themselves fail the run)."""
        if self.not_run:
            pytest.skip(self.not_run)

    def require(self, claims: OpClaims, **space) -> None:
        """Skip as `unsupported` unless every given dimension lies within `claims`: dtype, kv_dtype,
        page_size, head_dim (the claimed sets, None = any) and any constraint claim of
        strategies/constraints.py (q_len, num_q_heads, num_kv_heads, group_size, kv_len, ...; a list
        value must satisfy it element by element)."""
        from kvconform.conformance.strategies.constraints import outside
        if self.unclaimed:
            return
        reasons = outside(claims, space)
        if reasons:
            pytest.skip(f"unsupported: {self.backend_name} {reasons[0]}")

    def cite(self, *clauses: str) -> None:
        """Narrow the clauses of this test item (e.g. one golden case among several)."""
        self.clauses = tuple(clauses)

    # --- the example loop ---------------------------------------------------------------------
    def for_all(self, strategy, body: Callable[[Any], None], *, budget: float = 1.0) -> None:
        """Run `body(value)` for values drawn from `strategy` under the profile's settings."""
        chosen = profiles.hypothesis_settings(self.profile, budget=budget, out_dir=self.out_dir)

        @chosen
        @hypothesis.given(strategy)
        def run(value):
            self._example_error = None
            # what the diagnosis re-runs is the failing example's own check: a kind left by an earlier,
            # passing example (e.g. a call with no tokens that a backend returns early from) would be
            # diagnosed instead of the failure (issue 31: "depends on the calls before them")
            self._check_kind = None
            body(value)
            # Hypothesis allows one observation per label per example; a body may compare several times.
            worst = self._example_error
            if self.profile.target and worst is not None and math.isfinite(worst):
                # the label is part of what the derandomized ci search follows: renaming it (issue 28) lost three
                # mutants the ci profile finds along today's path (WriteKvE5m2OverflowToInf,
                # LutRoundedToCacheDtype, HeadBlockStraddlesKvHeads), so it keeps its old name
                hypothesis.target(worst, label="headroom")

        # Hypothesis keys its example database on the function: make it unique per test item.
        run.hypothesis.inner_test.__qualname__ = re.sub(r"\W", "_", self.node.nodeid)
        if self.unclaimed:
            try:
                run()
            except (ConformanceFailure, BackendError, Exception) as exc:
                pytest.skip(f"unsupported (unclaimed and failing: {str(exc).splitlines()[0][:200]})")
        else:
            self._shrink_capped(run)   # a failure is diagnosed once the body has raised (plugin: diagnose_failure)

    def _shrink_capped(self, run: Callable[[], None]) -> None:
        """`run()` (a Hypothesis test) with its shrinking capped at the profile's budget (profiles.py,
        "Shrink budget"); a failure whose shrinking the cap ended says so in its message."""
        if not self.profile.shrink:
            run()
            return
        budget = profiles.ShrinkBudget(self.shrink_seconds)
        try:
            with budget:
                run()
        except (ConformanceFailure, *_GROUPS) as exc:
            if budget.stopped and self.failure is not None:
                line = "\n  " + budget.note(self.profile.name)
                self.failure["message"] += line
                self.failure["full_message"] += line
                if isinstance(exc, ConformanceFailure):
                    exc.args = (self.failure["message"],)
            raise

    def run_state_machine(self, machine_cls, *, budget: float = 1.0, steps: int = 12) -> None:
        """Run a hypothesis `RuleBasedStateMachine` under the profile (its rules call `self.call`).

        A run that never called the backend checked nothing: with few runs (quick profile: 4) every one can
        draw only rules that call nothing (stale rows, a refused step), which then passed with 0 examples
        (found with `--seed 1` in issue 16). So the machine runs again with 4x the runs, up to twice more
        (a derandomized profile replays the earlier runs first, so fewer of them are new), and a test that
        still made no call is `unsupported`, never a pass."""
        from hypothesis.stateful import run_state_machine_as_test
        before, runs = self.examples, 0
        for _ in range(3):
            chosen = hypothesis.settings(profiles.hypothesis_settings(self.profile, budget=budget,
                                                                      out_dir=self.out_dir),
                                         stateful_step_count=steps)
            self._shrink_capped(lambda: run_state_machine_as_test(machine_cls, settings=chosen))
            runs += chosen.max_examples
            if self.examples > before:
                return
            budget *= 4
        pytest.skip(f"unsupported: {runs} runs of {machine_cls.__name__} (in 3 attempts) made no backend call")

    # --- calls ----------------------------------------------------------------------------------
    def reference(self, case: Case):
        with self.clock.timed("reference"):
            return getattr(reference, case.op)(**case.inputs)

    def call(self, case: Case):
        """Run the backend on `case` in its worker; a backend exception is a failure of this case."""
        self._stop_if_not_run()
        self._note(case)
        self.last_case = case
        try:
            try:
                result, mutated = self.worker.call(case.op, case.inputs, timeout=self.call_timeout,
                                                   layouts=layouts_of(case))
            finally:
                self._clock_call()
        except BackendError as exc:
            error, detail = raised_lines(exc)
            self._fail(case, [], f"backend raised {exc.type_name}: {error}", traceback=exc.tb, detail=detail,
                       replay=self._call_replay(case), symptom="raises")
        except BackendDeclined as exc:
            self._declined(case, str(exc))
        except BackendProtocolError as exc:
            self._fail(case, [], str(exc), replay=self._call_replay(case), symptom="raises")
        aliased = [m for m in mutated if ALIAS in m]
        mutated = [m for m in mutated if ALIAS not in m]
        if mutated:
            self._fail(case, [], f"backend modified its input arrays {mutated} (ops must be pure)",
                       replay=self._call_replay(case))
        if aliased:
            self._fail(case, [], f"backend returned outputs that share memory with its inputs ({'; '.join(aliased)}): "
                                 f"outputs must be fresh arrays (backends/base.py)", replay=self._call_replay(case))
        return result

    def _call_replay(self, case: Case) -> Replay:
        """A replay of a call that raised or broke the protocol: it fails again unless it returns, and,
        under check(), returns what the reference does."""
        fails = None
        if self._expected is not None and self._expected[0] is case:
            expected = self._expected[1]
            fails = lambda result: any(not r.ok for r in compare_outputs(case, expected, result))  # noqa: E731
        return Replay(case, tuple(self._before), fails)

    def _clock_call(self) -> None:
        """Add the last worker call's backend / guard / transport seconds to this test's clock."""
        timing = getattr(self.worker, "last_timing", None)
        if timing is not None:
            for phase, seconds in timing._asdict().items():
                self.clock.add(phase, seconds)

    def _declined(self, case: Case, reason: str) -> None:
        """The backend raised kvconform.Unsupported(reason) on `case` (backends/base.py:Unsupported): the
        test is `unsupported` if the case lies outside the backend's claims, else a failure."""
        outside = self.outside_claims(case)
        if outside:
            pytest.skip(f"unsupported: {self.backend_name} declined a case outside its claims "
                        f"({'; '.join(outside)}): {reason}")
        self._fail(case, [], f"claims more than it supports: raised kvconform.Unsupported({reason!r}) for a "
                             f"case inside its claims (state the limit in its OpClaims instead)")

    def outside_claims(self, case: Case) -> list[str]:
        """Why `case` lies outside the backend's claims for its op (empty: inside): the op or a feature of
        this test not claimed (a --run-unclaimed run), or a dimension of the case outside the claimed
        dtypes, sizes and limits (strategies/constraints.py)."""
        from kvconform.conformance.strategies.constraints import case_space, outside
        raw = self.description.get("capabilities", {}).get(case.op)
        if raw is None:
            return [f"does not claim op {case.op}"]
        reasons = [f"does not claim feature {f}" for f in self.features if f not in raw.get("features", [])]
        return reasons + outside(OpClaims.from_json(raw), case_space(case.params))

    def check(self, case: Case) -> Any:
        """Differential check of one case against the reference; returns the backend result."""
        expected = self.reference(case)
        self._expected = (case, expected)
        self._check_kind = ("differential", case)   # before the call: a raise or crash is diagnosed too
        try:
            actual = self.call(case)
        finally:
            self._expected = None
        self.expect(case, actual, expected)
        return actual

    def check_poison(self, case: Case, names=None) -> None:
        """Poison property (PA-24, PA-25, PA-41, PA-45, RO-1, RS-3 .. RS-5): filling the declared don't-care
        locations of a clean `case` with poison must not change the backend's result.

        The expectation is the backend's own result on the clean case wherever the reference's result is
        unchanged by the poison, and the reference's poisoned result where it changes (copied-through
        locations, e.g. unwritten pool slots that must come back bit for bit). So a numeric error of the
        backend is not this property's finding (the differential tests report it); only poison that moves
        the result is."""
        hypothesis.assume(bool(case.poison_names()))   # a case without don't-care locations tests nothing
        self._check_kind = ("differential", case)
        clean_actual = self.call(case)
        poisoned = case.with_poison(names)
        expected = poison_expectation(self.reference(case), self.reference(poisoned), clean_actual)
        self._check_kind = ("poison", case, clean_actual)
        actual = self.call(poisoned)
        self.expect(poisoned, actual, expected, what="result of the same case without poison (poison in "
                                                     "don't-care locations changed it)")

    def check_history(self, case: Case, other: Case) -> None:
        """Anti-gaming property: results must not depend on call history. `case`, then `other` (same
        shapes, other values: a backend that caches by shape or address returns `case`'s answer), then
        `case` again, which must give the first answer (a backend carrying state between calls does not).
        """
        self._check_kind = ("differential", case)
        first = self.call(case)
        expected_other = self.reference(other)
        self._before = [case]
        try:
            self._check_kind = ("history", other)
            between = self.call(other)
            self.expect(other, between, expected_other,
                        what="reference for a case of the same shapes as the previous call (a result that "
                             "depends on call history: cached by shape or address?)")
            self._before = [case, other]
            self._check_kind = ("history", case)
            again = self.call(case)
            self.expect(case, again, first, what="result of the identical earlier call (results must not depend "
                                                 "on call history)")
        finally:
            self._before = []

    def expect(self, case: Case, actual: Any, expected: Any, *, what: str = "reference",
               exact: bool = False, checks: Callable | None = None) -> None:
        """Compare `actual` with `expected` under the op's checks (`exact`: bit for bit over the same
        regions; `checks`: a composed property's own contract, see compare_outputs); `what` names the
        expectation ("reference", "hand-worked value", "the unpermuted run")."""
        with self.clock.timed("compare"):
            results = compare_outputs(case, expected, actual, exact=exact, checks=checks)
        worst = 0.0
        for res in results:
            slot = self.metrics.setdefault(res.name, {"max_abs": 0.0, "max_ulp": None, "error_ratio": 0.0})
            slot["max_abs"] = max(slot["max_abs"], res.max_abs)
            slot["error_ratio"] = max(slot["error_ratio"], res.error_ratio)
            if res.max_ulp is not None:
                slot["max_ulp"] = max(slot["max_ulp"] or 0.0, res.max_ulp)
            worst = max(worst, res.error_ratio)
        # for_all steers Hypothesis (profile.target) towards the worst error / allowed of each example
        self._example_error = max(worst, self._example_error or 0.0)
        bad = [r for r in results if not r.ok]
        if bad:
            def fails(result) -> bool:
                return any(not r.ok for r in compare_outputs(case, expected, result, exact=exact, checks=checks))
            if bad[0].kind == "structure":   # nothing was compared: the fields do not match (protocol.py)
                self._fail(case, [], bad[0].problem, replay=Replay(case, tuple(self._before), fails))
            self._fail(case, bad, f"differs from the {what}", replay=Replay(case, tuple(self._before), fails))

    def _note(self, case: Case) -> None:
        self.examples += 1
        for key in ("dtype", "kv_dtype"):
            if key in case.params:
                self.dtypes_seen.add(f"{key}={case.params[key]}")
