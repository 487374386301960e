"""Is a failure reproducible? Replays of the failing call, after the test failed.

A backend that is wrong on some calls only (a race, uninitialised memory, a nondeterministic reduction
order beyond tolerance) fails a test at random: Hypothesis then mostly says its failure "produces
unreliable results" (the shrunk example passed on a later call), or the failure happens to reproduce
once and looks like a plain bug. Either way the record must say what it is: after a test fails, the
plugin replays its final failing call `REPLAYS` times (the same inputs, after the same earlier calls of
a call-history case, judged by the same expectation) and a failure that does not fail every replay is
`flaky`, with its rate ("failed 3 of 10 replays"). A `flaky` result is a failure for the exit code.

Replays run only after a failure, so a passing run costs nothing; a failure whose first `DECISIVE`
replays all fail is reproducible and replays no more ("failed 3 of 3 replays": a deterministic bug, the
common case, costs 3 calls, not 10). A replay that crashes counts as failed and ends the replays (each
crash costs a worker restart, a hang its timeout).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from kvconform.conformance.engine.case import Case
from kvconform.conformance.engine.strided import layouts_of
from kvconform.conformance.engine.call_errors import (BackendCrash, BackendDeclined, BackendError, BackendProtocolError, EngineError)

#: how often a failing call is replayed at most
REPLAYS = 10
#: replays that, all failing from the first, show the failure reproducible (the rest are not run)
DECISIVE = 3


@dataclass
class Replay:
    """How to repeat one failing call: `before` (a call-history case's earlier calls, made first), then
    `case`, judged by `fails(result)` -> True when the result is still wrong (None: any result will do);
    modified or aliased inputs always fail; a raise is a
    failure unless `rejection` (an errors-layer case, which must raise: `fails_raise(exc)` judges it)."""
    case: Case
    before: tuple[Case, ...] = ()
    fails: Callable[[Any], bool] | None = None
    fails_raise: Callable[[BackendError], bool] | None = None


@dataclass
class Rate:
    failed: int
    replays: int
    crashed: bool = False
    seconds: float = 0.0   # what the replays took (a failure's cost, in its record)

    def text(self) -> str:
        end = ", the last one crashed" if self.crashed else ""
        return f"failed {self.failed} of {self.replays} replays{end}"

    def to_json(self) -> dict:
        return {"failed": self.failed, "replays": self.replays, "crashed": self.crashed,
                "seconds": round(self.seconds, 3)}


def replay_fails(worker, replay: Replay, timeout: float | None) -> bool:
    """One replay: True when the call fails again (a wrong result, a raise, a protocol error, modified or
    aliased inputs; for an errors-layer case: no proper rejection). Raises BackendCrash."""
    for earlier in replay.before:
        try:
            worker.call(earlier.op, earlier.inputs, timeout=timeout, layouts=layouts_of(earlier))
        except (BackendError, BackendDeclined, BackendProtocolError, EngineError):
            return True
    try:
        # a strided case replays strided (NU-14): its views are what the backend failed on
        result, mutated = worker.call(replay.case.op, replay.case.inputs, timeout=timeout,
                                      layouts=layouts_of(replay.case))
    except BackendError as exc:
        return replay.fails_raise(exc) if replay.fails_raise is not None else True
    except (BackendDeclined, BackendProtocolError, EngineError):
        return True
    if replay.fails_raise is not None:   # an errors-layer case that returned: accepted invalid input
        return True
    if mutated:
        return True
    return bool(replay.fails(result)) if replay.fails is not None else False


def reproduction_rate(worker, replay: Replay, timeout: float | None, replays: int = REPLAYS,
                      decisive: int = DECISIVE) -> Rate:
    """Replay the failing call up to `replays` times: how many of them failed. Stops at a crash, and after
    `decisive` replays that all failed (the failure reproduces: `failed == replays` in the Rate)."""
    failed = done = 0
    started = time.perf_counter()
    for _ in range(replays):
        done += 1
        try:
            failed += replay_fails(worker, replay, timeout)
        except BackendCrash:
            return Rate(failed + 1, done, crashed=True, seconds=time.perf_counter() - started)
        if failed == done == decisive:
            break
    return Rate(failed, done, seconds=time.perf_counter() - started)
