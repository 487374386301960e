"""Failures grouped by cause: the failures every report lists (overview.failures), as one entry per cause.

Two failures share a cause when they have the same status, backend and op, the same diagnosis and the
same dtype/feature fingerprint:
- the diagnosis, as what it concludes: the platform canaries it names (engine/canaries.py: "the platform's
  bfloat16 tl.dot is wrong on this machine"), else the variations that make the failure pass ("passes with
  soft_cap off"), else its summary with the numbers taken out, else the message's first line so;
- the fingerprint: the dtypes of the failing counterexample (read from its shape summary, "q: bfloat16[1,
  1, 4], ..."), only those the named canaries concern when the diagnosis names any, and the features the
  passing variations turn off.
Flaky failures are never grouped (each keeps its own replay rate).
An entry holds the count, the tests, the smallest counterexample (fewest elements) and one replay command,
its own; entries with distinct causes come first, the largest group last (a cause behind many failures is
usually one platform or dtype artifact; the rarer ones are where a kernel's own bug hides).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kvconform.conformance.engine.records import STATUS_ORDER
from .overview import failures

_ARRAY = re.compile(r"(\w+): (\w+)\[([\d, ]*)\]")
_NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?")


@dataclass
class Cause:
    """One entry: `records` (the failures, smallest counterexample first) that share `key`."""
    status: str
    backend: str
    op: str
    cause: str                  # what the diagnosis concludes, in words
    fingerprint: str            # "bfloat16" or "bfloat16, float32; soft_cap"
    records: list = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.records)

    @property
    def smallest(self) -> dict:
        return self.records[0]


def case_dtypes(record: dict) -> list[str]:
    """The dtypes of a failure's counterexample ("q: bfloat16[1, 1, 4], kv_lens: int32[1]" -> bfloat16, int32)."""
    return sorted({m.group(2) for m in _ARRAY.finditer(record.get("counterexample") or "")})


def case_size(record: dict) -> int:
    """Elements of a counterexample's arrays (its size, for "smallest")."""
    total = 0
    for m in _ARRAY.finditer(record.get("counterexample") or ""):
        n = 1
        for dim in (d for d in m.group(3).split(",") if d.strip()):
            n *= int(dim)
        total += n
    return total if total else 1 << 62


def _passing(diagnosis: dict) -> list[str]:
    return [v.get("name", "") for v in diagnosis.get("variations") or () if v.get("outcome") == "pass"]


def cause_of(record: dict) -> tuple[str, str]:
    """(cause, fingerprint) of one failure (see the module docstring)."""
    diagnosis = record.get("diagnosis") or {}
    dtypes = case_dtypes(record)
    notes = diagnosis.get("canaries") or []
    if notes:
        return "; ".join(notes), ", ".join(diagnosis.get("canary_dtypes") or dtypes)
    passing = _passing(diagnosis)
    if passing:
        features = sorted({name[:-len(" off")] for name in passing if name.endswith(" off")})
        floats = [d for d in dtypes if not d.startswith(("int", "uint", "bool"))]
        return "passes with " + ", ".join(passing), ", ".join(floats) + (f"; {', '.join(features)}" if features else "")
    text = diagnosis.get("summary") or (record.get("message") or "").split("\n", 1)[0]
    floats = [d for d in dtypes if not d.startswith(("int", "uint", "bool"))]
    return _NUMBER.sub("#", text)[:300], ", ".join(floats)


def group(report: dict) -> list[Cause]:
    """The listed failures of `report` grouped by cause: distinct causes first, the largest group last."""
    found: dict[tuple, Cause] = {}
    for r in failures(report):
        cause, fingerprint = cause_of(r)
        key = (r["status"], r.get("backend", ""), r.get("op", ""), cause, fingerprint)
        if r["status"] == "flaky":   # each has its own replay rate: a flaky failure is never a shared cause
            key += (r["id"],)
        if key not in found:
            found[key] = Cause(r["status"], r.get("backend", ""), r.get("op", ""), cause, fingerprint)
        found[key].records.append(r)
    rank = {s: i for i, s in enumerate(STATUS_ORDER)}
    for entry in found.values():
        entry.records.sort(key=lambda r: (case_size(r), r["id"]))
    return sorted(found.values(), key=lambda c: (c.count, rank.get(c.status, 99), c.backend, c.op, c.smallest["id"]))


def short_id(record: dict) -> str:
    return record["id"].split("::")[-1]


def listed_lines(report: dict) -> list[str]:
    """The console's failure lines: a cause with one failure as one line and its replay (build.summary_lines'
    own form), a cause with several as its count, cause, tests and the smallest one's replay."""
    lines = []
    for c in group(report):
        r = c.smallest
        if c.count == 1:
            rate = r.get("replays") if r["status"] == "flaky" else None
            lines.append(f"  {r['status'].upper()} {r.get('backend')} {r.get('op')} [{' '.join(r.get('clauses', []))}] "
                         f"{r['id']}" + (f" (failed {rate['failed']} of {rate['replays']} replays)" if rate else ""))
        else:
            names = [short_id(x) for x in c.records]
            lines.append(f"  {c.count} {c.status.upper()} {c.backend} {c.op}, one cause: {c.cause[:300]}"
                         + (f" ({c.fingerprint})" if c.fingerprint else ""))
            lines.append("    tests: " + ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else ""))
            lines.append(f"    smallest: {r['id']}: {r.get('counterexample', '')[:200]}")
        if r.get("repro"):
            lines.append(f"    replay: kvconform replay {r['repro']} --backend {r.get('backend_spec')}")
    return lines
