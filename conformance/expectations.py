"""Expectations files: known failures of a backend, each with a mandatory reason.

TOML, one table per entry:

    [[xfail]]
    test = "test_paged_attention.py::test_attention_differential[triton-soft_cap]"   # glob on the test id
    backend = "triton"        # optional: backend name glob (default: every backend)
    reason = "tanh overflow in the interpreter, see issue 12"                     # mandatory
    issue = "https://..."     # optional

A matching test still runs: failing is `xfail`, passing is `xpass` (reported, so stale entries show).
Entries that match no test of the run are listed in the report as unmatched.
"""
from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path


class ExpectationError(ValueError):
    """A malformed expectations file; the message is one line."""


@dataclass(frozen=True)
class Expectation:
    test: str
    reason: str
    backend: str = "*"
    issue: str = ""
    source: str = ""

    def matches(self, test_id: str, backend: str) -> bool:
        # test ids hold their parameters in brackets: `[` is matched literally (a glob character class
        # would make `test_x[triton-base]` match nothing), `*` and `?` stay wildcards
        test = self.test.replace("[", "[[]")
        return fnmatch.fnmatchcase(backend, self.backend) and (
            fnmatch.fnmatchcase(test_id, test) or fnmatch.fnmatchcase(test_id, "*" + test))

    def to_json(self) -> dict:
        return {"test": self.test, "backend": self.backend, "reason": self.reason, "issue": self.issue,
                "source": self.source}


def load(paths) -> list[Expectation]:
    entries = []
    for path in paths:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ExpectationError(f"expectations file {path} does not exist") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ExpectationError(f"expectations file {path} is not valid TOML: {exc}") from None
        unknown = set(data) - {"xfail"}
        if unknown:
            raise ExpectationError(f"{path}: unknown section(s) {sorted(unknown)}; only [[xfail]] is defined")
        for n, raw in enumerate(data.get("xfail", []), 1):
            if not isinstance(raw, dict):
                raise ExpectationError(f"{path}: xfail entry {n} must be a table")
            test, reason = raw.get("test"), raw.get("reason")
            if not isinstance(test, str) or not test.strip():
                raise ExpectationError(f"{path}: xfail entry {n} needs a 'test' glob")
            if not isinstance(reason, str) or not reason.strip():
                raise ExpectationError(f"{path}: xfail entry {n} ({test}) needs a non-empty 'reason'")
            extra = set(raw) - {"test", "reason", "backend", "issue"}
            if extra:
                raise ExpectationError(f"{path}: xfail entry {n} has unknown keys {sorted(extra)}")
            entries.append(Expectation(test, reason.strip(), raw.get("backend", "*"), raw.get("issue", ""),
                                       str(path)))
    return entries


def first_match(entries, test_id: str, backend: str) -> Expectation | None:
    return next((e for e in entries if e.matches(test_id, backend)), None)


def unmatched(entries, records) -> list[Expectation]:
    """Entries that match none of the recorded test results."""
    return [e for e in entries if not any(e.matches(r["id"], r.get("backend", "")) for r in records)]
