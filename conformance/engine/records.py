"""The vocabulary of result records: test layers, statuses and their order, counts that do not flatter.

Every record of results.jsonl has a `layer` (LAYERS) and a `status` (STATUS_ORDER); the harness writes
them, the gate judges them (run/gate.py), the reports count them.
"""
from __future__ import annotations

from collections import Counter, defaultdict

#: Test layers (DESIGN.md section 4); "errors": malformed input must be rejected (rejection.py).
LAYERS = ("golden", "differential", "property", "stateful", "errors")
STATUS_ORDER = ("fail", "crash", "flaky", "error", "xpass", "xfail", "pass", "unclaimed-pass", "unsupported",
                "not run", "skip")
#: statuses that fail a run (`not run`, a test skipped after --max-crashes crashes in a row of its op, is not
#: one: the crashes before it are)
FAILED = ("fail", "crash", "flaky", "error")
#: statuses every report lists under its failures (an xpass: an expectations entry to remove)
LISTED = FAILED + ("xpass",)


#: layers that compare numbers (or exact results) with the spec; "errors" checks rejections of malformed input
NUMERICAL_LAYERS = ("golden", "differential", "property", "stateful")


def layer_group(record: dict) -> str:
    return "errors" if record.get("layer") == "errors" else "numerical"


def split_counts(records: list[dict]) -> dict:
    """{backend: {"numerical": {status: n}, "errors": {status: n}}}: counts that do not flatter (a run of
    rejection tests is never reported as numerical conformance)."""
    out: dict = defaultdict(lambda: {"numerical": Counter(), "errors": Counter()})
    for r in records:
        out[r.get("backend", "?")][layer_group(r)][r["status"]] += 1
    return {b: {g: dict(c) for g, c in groups.items()} for b, groups in sorted(out.items())}


def counts_text(counts: dict) -> str:
    return ", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts.get(s)) or "none"


def cell_status(counts: dict) -> str:
    """Worst status of a cell (fail > crash > error > xpass > xfail > pass > unsupported)."""
    for status in STATUS_ORDER:
        if counts.get(status):
            return status
    return "skip"
