"""Expected rejections: the outcome of a malformed input ("errors" layer, DESIGN.md section 4).

Every spec states preconditions whose violation raises `ValueError` (or `TypeError` for a wrong dtype or
argument type) with a message that names the offending argument (PA-26 .. PA-30, PA-46, RO-12, EV-17,
RS-2/RS-4/RS-6/RS-10). An error case is a valid drawn case with exactly one rule broken; it carries a
`Rejection` saying which rule, which clauses state it and which argument an error message must name.

A backend conforms on an error case when it raises an exception of the family the reference raises
(ValueError or TypeError, subclasses included) whose message names the argument. Returning a result is the
worst outcome (a silent answer to a malformed call) and fails as "accepted invalid input"; a crash stays a
crash (the worker reports it). The reference decides the family: the case is run through it first, and a
case the reference accepts is a bug of the test (`InvalidErrorCase`), never a backend failure.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

#: The exception families a precondition violation may raise (spec: "ValueError (TypeError for a wrong
#: dtype or argument type)"). A backend must raise the family the reference raises.
FAMILIES = ("ValueError", "TypeError")


class InvalidErrorCase(Exception):
    """An error case that does not test what it says (the reference accepts it, raises something else,
    or names another argument): a bug of the suite, reported as `error`, never as a backend failure."""


@dataclass(frozen=True)
class Rejection:
    """What must happen to a malformed case.

    clauses:   the spec clauses stating the broken rule (first: the precondition clause)
    arguments: the argument(s) an error message may name; naming any one of them suffices (a rule tying
               two arguments, e.g. `q_len <= kv_len`, may be reported from either side)
    rule:      the broken rule in words, e.g. "cu_q_lens must be non-decreasing"
    error:     the family the reference raises ("ValueError" / "TypeError"); filled in when the case is
               run through the reference, recorded in case.json
    """
    clauses: tuple[str, ...]
    arguments: tuple[str, ...]
    rule: str
    error: str = ""
    reference_message: str = field(default="", compare=False)

    def to_json(self) -> dict:
        return {"outcome": "rejected", "clauses": list(self.clauses), "arguments": list(self.arguments),
                "rule": self.rule, "error": self.error, "reference_message": self.reference_message}

    @classmethod
    def from_json(cls, data: Any) -> "Rejection":
        """From case.json's "expected" entry; raises ValueError on anything malformed."""
        if not isinstance(data, dict) or data.get("outcome") != "rejected":
            raise ValueError("expected.outcome must be 'rejected'")
        clauses, arguments = data.get("clauses"), data.get("arguments")
        if not (isinstance(clauses, list) and isinstance(arguments, list) and arguments
                and all(isinstance(a, str) for a in clauses + arguments)
                and isinstance(data.get("rule"), str)):
            raise ValueError("expected needs clauses (list), arguments (non-empty list of names) and rule")
        error = data.get("error", "")
        if error not in FAMILIES + ("",):
            raise ValueError(f"expected.error must be one of {FAMILIES}, got {error!r}")
        return cls(tuple(clauses), tuple(arguments), data["rule"], error, str(data.get("reference_message", "")))

    def describe(self) -> str:
        names = " or ".join(f"`{a}`" for a in self.arguments)
        return f"{self.error or 'ValueError/TypeError'} naming {names} ({', '.join(self.clauses)}: {self.rule})"


def as_arguments(argument: str | Iterable[str]) -> tuple[str, ...]:
    return (argument,) if isinstance(argument, str) else tuple(argument)


# Shapes in messages ("[B, N]", "x[3]") list dimension names that are also argument names (B, C, D):
# only text outside brackets counts as naming an argument.
_BRACKETS = re.compile(r"\[[^\[\]]*\]")


def names_argument(message: str, arguments: Iterable[str]) -> bool:
    """Whether `message` names one of `arguments` as a whole identifier, outside [...] shape text."""
    text = str(message)
    while True:   # nested brackets: strip innermost first
        stripped = _BRACKETS.sub(" ", text)
        if stripped == text:
            break
        text = stripped
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(a)}(?![A-Za-z0-9_])", text) for a in arguments)


def family_of(exc: BaseException) -> str | None:
    """The precondition family an exception belongs to (None: neither ValueError nor TypeError)."""
    if isinstance(exc, TypeError):
        return "TypeError"
    if isinstance(exc, ValueError):
        return "ValueError"
    return None


def run_reference(op_fn, case) -> Rejection:
    """Run the reference on an error case; return its Rejection with the reference's family filled in.

    Raises InvalidErrorCase when the reference accepts the case, raises outside the two families, or
    raises with a message that names none of the rule's arguments."""
    rejection: Rejection = case.rejection
    try:
        op_fn(**case.inputs)
    except Exception as exc:   # the reference's own verdict on the case
        family = family_of(exc)
        if family is None:
            raise InvalidErrorCase(
                f"[{case.op}] error case '{rejection.rule}': the reference raised {type(exc).__name__}: {exc} "
                f"(not a precondition error; the reference or the case is broken)") from exc
        if not names_argument(str(exc), rejection.arguments):
            raise InvalidErrorCase(
                f"[{case.op}] error case '{rejection.rule}': the reference rejects it, but its message names "
                f"none of {list(rejection.arguments)}: {type(exc).__name__}: {exc}") from exc
        return replace(rejection, error=family, reference_message=str(exc))
    raise InvalidErrorCase(f"[{case.op}] error case '{rejection.rule}' ({', '.join(rejection.clauses)}): the "
                           f"reference accepts this input, so the case breaks no rule (a bug in the test); "
                           f"case: {case.shape_summary()}")


def judge(rejection: Rejection, type_name: str, mro: Iterable[str], message: str) -> str | None:
    """None when a backend exception conforms to `rejection`, else what is wrong (one line).

    `mro`: the names of the exception's classes (the worker sends them, so subclasses are recognised)."""
    classes = tuple(mro) or (type_name,)
    want = rejection.error or "ValueError"
    if want not in classes:
        return (f"rejected invalid input with {type_name}, expected {want} like the reference "
                f"({', '.join(rejection.clauses)}: {rejection.rule}): {type_name}: {_short(message)}")
    if not names_argument(message, rejection.arguments):
        names = " or ".join(f"`{a}`" for a in rejection.arguments)
        return (f"rejected invalid input, but its error does not name the argument {names} "
                f"({', '.join(rejection.clauses)}: {rejection.rule}): {type_name}: {_short(message)}")
    return None


def accepted(rejection: Rejection, result: Any) -> str:
    """The failure headline for a backend that returned a result on malformed input."""
    return (f"accepted invalid input: {rejection.rule} ({', '.join(rejection.clauses)}); it returned "
            f"{_describe(result)} instead of raising {rejection.error or 'ValueError/TypeError'} naming "
            f"{' or '.join(rejection.arguments)}")


def _short(message: str, limit: int = 300) -> str:
    line = " ".join(str(message).split())
    return line if len(line) <= limit else line[:limit] + " ..."


def _describe(result: Any) -> str:
    if isinstance(result, tuple):
        fields = getattr(result, "_fields", None) or [f"output{i}" for i in range(len(result))]
        return "(" + ", ".join(f"{n}: {_describe(r)}" for n, r in zip(fields, result)) + ")"
    shape, dtype = getattr(result, "shape", None), getattr(result, "dtype", None)
    if shape is not None:
        return f"an array {dtype}{list(shape)}"
    return type(result).__name__
