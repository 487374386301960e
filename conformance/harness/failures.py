"""A failing test's account: the failure message, its diagnosis, the test's record.

`FailureRecords` is a part of `Harness` (core.py): `_fail` writes the message (what failed, the worst
element, the case, the tolerance, the replay line) and raises `ConformanceFailure`; `diagnose_failure` adds
what the diagnosis's variations show (diagnosis.py); `record` is the test's line of results.jsonl.
"""
from __future__ import annotations

import time
from typing import Iterable

from kvconform.backends.base import OPS
from kvconform.conformance.engine import backend_text
from kvconform.conformance.engine.artifacts import repro_dir_for
from kvconform.conformance.engine.call_errors import BackendCrash
from kvconform.conformance.engine.case import Case
from kvconform.conformance.engine.compare import FieldResult
from kvconform.conformance.engine.flaky import Replay
from kvconform.conformance.harness.diagnosis import diagnose
from kvconform.conformance.harness.outputs import checks_tolerance_reason

try:   # Hypothesis reports several distinct failures of one test as an exception group (Python >= 3.11)
    _GROUPS: tuple = (BaseExceptionGroup,)
except NameError:  # pragma: no cover - Python 3.10
    _GROUPS = ()



class ConformanceFailure(AssertionError):
    """A backend output disagrees with the spec (outside tolerance, wrong shape, or an error raised)."""


class FailureRecords:
    """The failure-recording part of `Harness` (its attributes: see Harness.__init__)."""

    # --- diagnosis ------------------------------------------------------------------------------
    def diagnose_failure(self, exc: BaseException) -> None:
        """Once the test body has raised (after Hypothesis shrank the failure; a golden's single call),
        re-run the failing case with variations (diagnosis.py) and append what they show to the failure's
        message; never changes the verdict. Symptoms: a wrong result (`fail`), a call that raised
        (`raises`), a crashed or hung worker (`crash`, the case of the call that crashed). An errors-layer
        case (malformed on purpose) and a test not run are not diagnosed; a hang is not re-run."""
        if self.not_run or self.unclaimed:
            return
        if isinstance(exc, BackendCrash):
            symptom, case = "crash", self.last_case
        elif isinstance(exc, (ConformanceFailure, *_GROUPS)) and self.failure is not None:
            symptom, case = self.failure.get("symptom", "fail"), self.failure["case"]
        else:
            return
        if case is None or case.rejection is not None:
            return
        kind = self._check_kind or ("differential", case)   # a golden: the reference equals its hand-worked value
        try:
            if symptom == "crash" and str(exc).startswith("hang"):
                found = {"summary": f"not diagnosed: it hung, and each variation could cost the "
                                    f"{self.call_timeout:g} s call timeout again", "variations": []}
            else:
                found = diagnose(self, kind, symptom)
        except BaseException as err:  # a crash while diagnosing must not lose the failure itself
            found = {"summary": f"diagnosis not available ({type(err).__name__}: {str(err)[:200]})",
                     "variations": []}
        if not found:
            return
        found["summary"] = backend_text.visible(found["summary"])
        line = "\n  diagnosis: " + found["summary"]
        if symptom == "crash":
            self.crash_diagnosis = found
            exc.args = (f"{exc}{line}",)
            return
        self.failure["diagnosis"] = found
        self.failure["message"] += line
        self.failure["full_message"] += line
        if isinstance(exc, ConformanceFailure):
            exc.args = (self.failure["message"],)

    def _fail(self, case: Case, fields: list[FieldResult], headline: str, traceback: str = "",
              detail: Iterable[str] = (), replay: Replay | None = None, symptom: str = "fail"):
        """Record the failure of `case` and raise it: headline, `detail` lines (where a backend exception
        was raised), per-field metrics, case, expectation, tolerance, replay line; `traceback` (a backend
        exception's, whole) goes to the record apart from the message; `replay`: how to repeat the failing
        call (flaky.py); `symptom`: "raises" when the backend's call raised (the diagnosis words it so).
        Text from the backend is bounded and its control characters escaped (backend_text.py): the message
        keeps its head and tail, the whole text is `full_message`, which the plugin writes to the
        reproducer's failure.txt, with the traceback and what the backend printed during the failing call
        (`output`)."""
        lines = [f"[{case.op}] clauses {', '.join(self.clauses) or '-'}: {self.backend_name} {headline}"]
        lines += [f"  {line}" for line in detail if line]
        lines += [f"  {r.summary()}" for r in fields]
        lines.append(f"  case: {case.shape_summary()}")
        if case.rejection is not None:
            lines.append(f"  expected: a {case.rejection.describe()}")
            lines.append(f"  the reference raises: {case.rejection.error}: {case.rejection.reference_message}")
        if fields:
            lines.append(f"  tolerance: {checks_tolerance_reason(case, fields)}")
        replay_line = f"  replay: kvconform replay {self.repro_dir()} --backend {self.backend_spec}"
        full = backend_text.visible("\n".join(lines + [replay_line]))
        # the replay line stays whole at the end whatever is cut from the middle
        message = full if len(full) <= backend_text.MESSAGE_CAP else (
            backend_text.cap(backend_text.visible("\n".join(lines)),
                             backend_text.MESSAGE_CAP - len(replay_line) - 1, "failure.txt in the reproducer directory")
            + "\n" + backend_text.visible(replay_line))
        if self.failure is not None and self.failure.get("output") is not None:
            self.failure["output"].discard()   # an earlier failure's (Hypothesis shrinks through several)
        self.failure = {"case": case, "message": message, "full_message": full, "fields": [r.to_json() for r in fields],
                        "traceback": traceback, "before": list(self._before), "replay": replay, "symptom": symptom,
                        "output": self.worker.output() if hasattr(self.worker, "output") else None}
        raise ConformanceFailure(message)

    def repro_dir(self):
        return repro_dir_for(self.out_dir, self.node.nodeid)

    def record(self) -> dict:
        duration = time.monotonic() - self.started
        error_ratio = max((m["error_ratio"] for m in self.metrics.values()), default=None)
        return {
            "backend": self.backend_name,
            "backend_spec": self.backend_spec,
            "op": self.op,
            "family": OPS.get(self.op, ""),
            "layer": self.layer,
            "clauses": list(self.clauses),
            "features": list(self.features) or ["base"],
            "examples": self.examples,
            "rejections": self.rejections,
            "metrics": self.metrics,
            "error_ratio": error_ratio,     # worst error / allowed error (<= 1 passes)
            "dtypes": sorted(self.dtypes_seen),
            "unclaimed": self.unclaimed,
            "duration": round(duration, 3),
            "timing": self.clock.record(duration),
        }


