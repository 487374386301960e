"""Expectations files: known failures of a backend, each with a mandatory reason.

TOML, one table per entry:

    [[xfail]]
    test = "test_paged_attention.py::test_attention_differential[triton-soft_cap]"   # glob on the test id
    backend = "triton"        # optional: glob on the backend's name or its spec (default: every backend)
    reason = "tanh overflow in the interpreter, see issue 12"                     # mandatory
    issue = "https://..."     # optional
    strict = true             # optional: a pass of this test fails the gate (default: reported only)
    diagnosis = "sequences without query rows dropped"   # optional: only the failure diagnosed so

A `diagnosis` narrows a broad entry to one known bug: the name of a diagnosis variation the failure passes
with (conformance/diagnosis.py), or else text its diagnosis summary contains. A matching test that fails with
another diagnosis, or none, is a plain `fail`, so a glob over many columns never hides a second bug.

A matching test still runs: failing is `xfail`, passing is `xpass` (reported, so stale entries show; with
`strict = true` a failure of the gate). `backend` matches the backend's own name (`describe()["name"]`,
as the reports show it), the spec it was given by (`triton`, `mypkg.kernels:make_backend`) or the
factory's name alone (`make_backend`, the test ids' parameter). Entries that match no test of the run are
listed in the report as unmatched.
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
    strict: bool = False
    diagnosis: str = ""

    def covers(self, failure_diagnosis: dict | None) -> bool:
        """Is a failure with this diagnosis ({"summary", "variations": [{"name", "outcome"}]}) the known one?
        Always, when the entry names no diagnosis."""
        if not self.diagnosis:
            return True
        if not failure_diagnosis:
            return False
        named = [v for v in failure_diagnosis.get("variations", []) if v.get("name") == self.diagnosis]
        if named:   # a variation's name: the failure must go away with it
            return any(v.get("outcome") == "pass" for v in named)
        return self.diagnosis in failure_diagnosis.get("summary", "")

    def matches(self, test_id: str, backend) -> bool:
        """Does the entry match test `test_id` of the backend known by `backend` (one name, or several:
        its name, spec and factory name)?"""
        # test ids hold their parameters in brackets: `[` is matched literally (a glob character class
        # would make `test_x[triton-base]` match nothing), `*` and `?` stay wildcards
        test = self.test.replace("[", "[[]")
        names = [backend] if isinstance(backend, str) else [n for n in backend if n]
        return any(fnmatch.fnmatchcase(name, self.backend) for name in names) and (
            fnmatch.fnmatchcase(test_id, test) or fnmatch.fnmatchcase(test_id, "*" + test))

    def to_json(self) -> dict:
        return {"test": self.test, "backend": self.backend, "reason": self.reason, "issue": self.issue,
                "source": self.source, "strict": self.strict, "diagnosis": self.diagnosis}


def load(paths) -> list[Expectation]:
    entries = []
    for path in paths:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ExpectationError(f"expectations file {path} does not exist") from None
        except IsADirectoryError:
            raise ExpectationError(f"expectations file {path} is a folder, not a TOML file") from None
        except OSError as exc:
            raise ExpectationError(f"expectations file {path} cannot be read: {exc.strerror or exc}") from None
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
            extra = set(raw) - {"test", "reason", "backend", "issue", "strict", "diagnosis"}
            if extra:
                raise ExpectationError(f"{path}: xfail entry {n} has unknown keys {sorted(extra)}")
            backend, issue, strict = raw.get("backend", "*"), raw.get("issue", ""), raw.get("strict", False)
            if not isinstance(backend, str) or not backend.strip():
                raise ExpectationError(f"{path}: xfail entry {n} ({test}): 'backend' must be a non-empty string "
                                       f"(a glob on the backend's name or spec), got {backend!r}")
            if not isinstance(issue, str):
                raise ExpectationError(f"{path}: xfail entry {n} ({test}): 'issue' must be a string, got {issue!r}")
            if not isinstance(strict, bool):
                raise ExpectationError(f"{path}: xfail entry {n} ({test}): 'strict' must be true or false, "
                                       f"got {strict!r}")
            diagnosis = raw.get("diagnosis", "")
            if not isinstance(diagnosis, str):
                raise ExpectationError(f"{path}: xfail entry {n} ({test}): 'diagnosis' must be a string (text the "
                                       f"failure's diagnosis contains), got {diagnosis!r}")
            entries.append(Expectation(test, reason.strip(), backend, issue, str(path), strict, diagnosis.strip()))
    return entries


def first_match(entries, test_id: str, backend) -> Expectation | None:
    return next((e for e in entries if e.matches(test_id, backend)), None)


def record_names(record: dict) -> tuple[str, ...]:
    """The names a recorded result's backend is known by: its report label, its own name, its spec and
    the spec's factory name (`Expectation.matches`)."""
    spec = record.get("backend_spec") or ""
    label = record.get("backend") or ""
    own = label.split(" (", 1)[0] if spec and label.endswith(f" ({spec})") else label
    return tuple(dict.fromkeys(n for n in (label, own, spec, spec.split(":")[-1]) if n))


def unmatched(entries, records) -> list[Expectation]:
    """Entries that match none of the recorded test results."""
    return [e for e in entries if not any(e.matches(r["id"], record_names(r)) for r in records)]
