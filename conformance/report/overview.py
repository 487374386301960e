"""What report.md and report.html lead with (issue 28 item 3): the failures, then one cell per backend x op
with the features of each cell on demand, the ops a backend does not claim folded into one line, a legend.

A cell counts each test once (build.matrix counts a test under each of its features). Its worst
error / allowed is the largest `error_ratio` of its tests that compared numbers (<= 1 passes; inf where an
error was not allowed at all or a value was non-finite).
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict

from kvconform.conformance.engine.records import LISTED, STATUS_ORDER, cell_status

#: statuses whose error / allowed was measured against a tolerance
MEASURED = ("pass", "fail", "xfail", "xpass", "unclaimed-pass", "flaky")

ICON = {"pass": "✅", "fail": "❌", "crash": "💥", "flaky": "🎲", "error": "❌", "xfail": "🟡", "xpass": "⚠️",
        "unsupported": "—", "unclaimed-pass": "➕", "not run": "⏭", "skip": "·"}

#: what each status means, for the legends
MEANING = {"pass": "every test passed", "fail": "a test failed", "crash": "the backend crashed or hung",
           "flaky": "failed on some replays only", "error": "the engine or the suite erred",
           "xfail": "an expected failure (expectations file)", "xpass": "passed against an expectation",
           "unsupported": "outside the backend's claims", "unclaimed-pass": "passed outside the claims "
           "(--run-unclaimed)", "not run": "not run after --max-crashes crashes in a row of its op",
           "skip": "skipped"}
RATIO_NOTE = ("counts are tests (a cell shows its worst status first); the figure after a cell is the worst "
              "error / allowed error of its tests (<= 1 passes)")
LEGEND = " · ".join(f"{ICON[s]} {MEANING[s]}" for s in ("pass", "fail", "crash", "flaky", "xfail", "xpass",
                                                          "unsupported")) + "; " + RATIO_NOTE + "."


def error_ratio(record: dict) -> float | None:
    """The record's worst error / allowed as a float (inf kept), None when it has none. Records written
    before the key was renamed (results.jsonl of an older kvconform) carry it as `headroom`."""
    value = record.get("error_ratio", record.get("headroom"))
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        return None
    return ratio if ratio >= 0 and not math.isnan(ratio) else None


def ratio_text(value: float | None) -> str:
    """`0.042`, `12`, `inf`; "" when there is none (never a sentinel number)."""
    if value is None:
        return ""
    return "inf" if math.isinf(value) else f"{value:.2g}"


def _worst(old: float | None, record: dict) -> float | None:
    ratio = error_ratio(record) if record["status"] in MEASURED else None
    if ratio is None:
        return old
    return ratio if old is None else max(old, ratio)


def counts_cell(counts: dict) -> str:
    """`✅ 30 pass`, `❌ 2 fail, 28 pass`: the worst status's icon, then every count, worst first."""
    detail = ", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts.get(s))
    return f"{ICON.get(cell_status(counts), '')} {detail}".strip()


def claimed_ops(report: dict) -> dict[str, set[str] | None]:
    """backend -> the ops it claims (None when its description has no claims to read)."""
    out = {}
    backends = report.get("backends") or {}
    for name in {r.get("backend", "?") for r in report["results"]} | set(backends):
        caps = (backends.get(name) or {}).get("capabilities")
        out[name] = set(caps) if isinstance(caps, dict) and caps else None
    return out


def op_cells(report: dict) -> tuple[list[str], list[str], dict, dict[str, list[str]]]:
    """(backends, ops, cells, unclaimed): cells[(backend, op)] = {counts, error_ratio, features {feature:
    {counts, error_ratio}}} for every op a backend claims (or, without claims to read, one where a test
    did more than decline); ops in the registry's order, those no backend claims left out; unclaimed:
    backend -> the ops of the run it does not claim."""
    from kvconform.backends.base import OPS
    cells: dict = defaultdict(lambda: {"counts": Counter(), "error_ratio": None,
                                       "features": defaultdict(lambda: {"counts": Counter(), "error_ratio": None})})
    for r in report["results"]:
        cell = cells[(r.get("backend", "?"), r.get("op", "?"))]
        cell["counts"][r["status"]] += 1
        cell["error_ratio"] = _worst(cell["error_ratio"], r)
        for feature in r.get("features") or ["base"]:
            f = cell["features"][feature]
            f["counts"][r["status"]] += 1
            f["error_ratio"] = _worst(f["error_ratio"], r)
    claims = claimed_ops(report)
    backends = sorted(claims)
    run_ops = {op for _, op in cells}
    kept, unclaimed = {}, {}
    for b in backends:
        mine = claims[b]
        for op in run_ops:
            cell = cells.get((b, op))
            if mine is not None:
                claimed = op in mine
            else:
                claimed = cell is not None and any(s not in ("unsupported", "skip") for s in cell["counts"])
            if claimed and cell is not None:
                kept[(b, op)] = cell
            elif not claimed:
                unclaimed.setdefault(b, []).append(op)
    order = {op: i for i, op in enumerate(OPS)}
    ops = sorted({op for _, op in kept}, key=lambda op: (order.get(op, len(order)), op))
    unclaimed = {b: sorted(v, key=lambda op: (order.get(op, len(order)), op)) for b, v in unclaimed.items()}
    return backends, ops, kept, unclaimed


def failures(report: dict) -> list[dict]:
    """The results every report lists first: failures, then the xpasses (an expectation to remove)."""
    rank = {s: i for i, s in enumerate(STATUS_ORDER)}
    listed = [r for r in report["results"] if r["status"] in LISTED]
    return sorted(listed, key=lambda r: (rank.get(r["status"], 99), r.get("backend", ""), r.get("op", ""), r["id"]))


def replay_command(record: dict) -> str:
    return f"kvconform replay {record['repro']} --backend {record.get('backend_spec')}"
