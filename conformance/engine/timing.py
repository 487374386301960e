"""Where a conformance test's seconds go: the engine-throughput shares of results.jsonl's `timing`.

Phases (seconds, summed over every example of a test, shrinking and diagnosis included):
- reference: the NumPy oracle (`Harness.reference`);
- backend: inside the backend's method, timed in its worker (first calls of a JIT backend compile here);
- guard: the engine's purity checks around the call in the worker (input copies, aliasing, conversion);
- transport: the rest of each worker round trip (pickling arrays both ways, the pipe);
- compare: the suite's checks (`Harness.expect`);
- other: the remainder of the test's duration (drawing cases with Hypothesis, shrinking, a failure's
  diagnosis re-runs, reproducers).
`benchmarks/engine_throughput.py` sums them per op.
"""
from __future__ import annotations

import contextlib
import time

PHASES = ("reference", "backend", "guard", "transport", "compare", "other")


class PhaseClock:
    """Accumulates seconds per phase; `other` is what `record(total)` leaves unexplained."""

    def __init__(self):
        self.seconds = {p: 0.0 for p in PHASES if p != "other"}

    @contextlib.contextmanager
    def timed(self, phase: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - started

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] += seconds

    def record(self, total: float) -> dict[str, float]:
        """Seconds per phase (3 decimals), `other` = total minus the timed phases (never negative)."""
        out = {p: round(s, 3) for p, s in self.seconds.items()}
        out["other"] = round(max(0.0, total - sum(self.seconds.values())), 3)
        return out
