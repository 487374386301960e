"""The errors layer of a suite test: malformed input must be rejected the way the reference rejects it
(engine/rejection.py). `RejectionChecks` is a part of `Harness` (core.py)."""
from __future__ import annotations

import dataclasses
from typing import Iterable

from kvconform import reference
from kvconform.conformance.engine.call_errors import BackendDeclined, BackendError, BackendProtocolError
from kvconform.conformance.engine.case import Case
from kvconform.conformance.engine.flaky import Replay
from kvconform.conformance.engine.rejection import (InvalidErrorCase, Rejection, accepted, as_arguments, judge,
                                                    run_reference)


class RejectionChecks:
    """`kvc.expect_rejected`: the part of `Harness` for the errors layer (its attributes: Harness.__init__)."""

    def expect_rejected(self, case: Case, *, argument: str | Iterable[str] | None = None,
                        clause: str | Iterable[str] | None = None, rule: str | None = None) -> None:
        """Errors layer: `case` breaks one rule, so the backend must reject it.

        The rule comes from `case.rejection`, or from `argument` (the argument(s) an error must name),
        `clause` (the clause(s) stating the rule) and `rule` (the rule in words), which override it.
        The reference runs first and must itself raise ValueError/TypeError naming the argument, else the
        case is a bug of the test (`InvalidErrorCase`, status `error`). The backend then runs in its worker
        and passes only if it raises the reference's family (subclasses included) with a message naming
        the argument; a returned result fails as "accepted invalid input", a crash stays a crash."""
        base = case.rejection or Rejection((), (), "")
        rejection = Rejection(
            as_arguments(clause) if clause is not None else base.clauses,
            as_arguments(argument) if argument is not None else base.arguments,
            rule if rule is not None else base.rule)
        if not rejection.arguments or not rejection.clauses or not rejection.rule:
            raise InvalidErrorCase(f"[{case.op}] expect_rejected needs the argument, the clause and the rule "
                                   f"(from case.rejection or as keywords)")
        if self.clauses and not set(rejection.clauses) & set(self.clauses):
            raise InvalidErrorCase(f"[{case.op}] error case breaks {', '.join(rejection.clauses)}, which the "
                                   f"test does not cite ({', '.join(self.clauses)})")
        # the reference's verdict fills in the error family the backend must match
        checked = run_reference(getattr(reference, case.op), dataclasses.replace(case, rejection=rejection))
        case = dataclasses.replace(case, rejection=checked)
        self._stop_if_not_run()
        self._note(case)
        self.last_case = case   # a crash on malformed input leaves this case (with its rejection) behind
        try:
            try:
                result, _ = self.worker.call(case.op, case.inputs, timeout=self.call_timeout)
            finally:
                self._clock_call()
        except BackendError as exc:
            problem = judge(case.rejection, exc.type_name, exc.mro, exc.message)
            if problem is not None:
                self._fail(case, [], problem, traceback=exc.tb, detail=[exc.site], replay=_rejection_replay(case))
            self.rejections += 1
            return
        except BackendDeclined as exc:
            self._declined(case, str(exc))
        except BackendProtocolError as exc:   # it returned (no rejection), and not even arrays
            self._fail(case, [], str(exc), replay=_rejection_replay(case))
        self._fail(case, [], accepted(case.rejection, result), replay=_rejection_replay(case))


def _rejection_replay(case: Case) -> Replay:
    """A replay of an errors-layer case: it fails again unless the backend rejects it properly."""
    return Replay(case, fails_raise=lambda exc: judge(case.rejection, exc.type_name, exc.mro, exc.message) is not None)


