"""The gate's verdict and exit code: one rule for `kvconform run`, each `--shard`, `report merge`, the pytest
plugin route, `check-backend` and `list` (conformance/README.md, "What the exit code means").

    0   PASS         every claimed case was checked and none failed (xfail allowed)
    1   FAIL         at least one failure: fail, crash, flaky, or xpass of a strict expectation
    2   bad invocation: command-line input, an unreadable expectations file (nothing was run)
    3   NOT CHECKED  nothing failed, but not everything claimed was checked (the reasons are listed)
    130 / 143        interrupted by SIGINT / SIGTERM

A failure (1) takes precedence over NOT CHECKED (3); both are reported. The verdict is data
(`judge` -> report.json's "gate"), which every report renders and every route turns into its exit code.
"""
from __future__ import annotations

from collections import defaultdict

from kvconform.conformance.engine.loading import backend_problem

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_CHECKED = 3
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
VERDICT = {EXIT_OK: "PASS", EXIT_FAILED: "FAIL", EXIT_NOT_CHECKED: "NOT CHECKED"}

#: statuses that fail the gate (an xpass fails it only when its expectation is strict)
FAILED = ("fail", "crash", "flaky")
#: statuses of a numerical test that ran the backend's op to a verdict
CHECKED = ("pass", "fail", "crash", "flaky", "xfail", "xpass")
#: not-checked reasons a whole (a full run, a merge of shards) decides from all its results; the same reasons
#: of one shard say nothing about the whole and are dropped when shards are merged
WHOLE_ONLY = ("op", "ops", "no-tests")


def is_failure(record: dict) -> bool:
    return record.get("status") in FAILED or (record.get("status") == "xpass" and bool(record.get("strict")))


def reason(kind: str, message: str, backend: str | None = None, op: str | None = None) -> dict:
    """One not-checked reason: `kind` (backend, errors, engine, no-tests, op, ops, shard, report, or one a
    caller adds: interrupted, disk-full), the backend and op it concerns, and the line shown to people."""
    return {"kind": kind, "backend": backend, "op": op, "message": message}


def judge(records: list[dict], backends: dict, *, ops=None, suite_ops=None, selected: int | None = None,
          whole: bool = True, extra=(), profile: str | None = None) -> dict:
    """The verdict over `records` (results.jsonl records, their "backend" the labels of `backends`) and
    `backends` ({label: description}, every backend of the run).

    ops: the requested ops (None: all); suite_ops: the ops the collected suite has tests for (None: all);
    selected: conformance tests selected before sharding (None: unknown, then the number of records);
    whole: a full run or a merge (a shard judges its own slice, and ops that ran in no test of
    the slice are left to `report merge`); extra: reasons found elsewhere (an unwritten report, a
    missing shard, an interruption); profile: the run's profile, named when its suite has no test of a
    requested op."""
    from kvconform.backends.base import OPS
    failures = [r for r in records if is_failure(r)]
    not_checked: list[dict] = []
    usable = {}
    for label, desc in sorted(backends.items()):
        problem = backend_problem(desc)
        if problem:
            not_checked.append(reason("backend", f"{label}: {problem}", backend=label))
        else:
            usable[label] = desc
    errors: dict = defaultdict(list)
    for r in records:
        if r.get("status") == "error":
            errors[r.get("backend")].append(r)
    for label, errs in sorted(errors.items(), key=lambda kv: str(kv[0])):
        first = (errs[0].get("message") or "").splitlines()
        not_checked.append(reason("errors", f"{label}: {len(errs)} test(s) ended in an error of the engine or the "
                                            f"suite, not charged to the backend; first: {errs[0].get('id')}"
                                            + (f": {first[0][:300]}" if first else ""), backend=label))
    count = len(records) if selected is None else selected
    if count == 0 and (usable or not backends):
        not_checked.append(reason("no-tests", _nothing_selected(ops, suite_ops, profile)))
    coverage = _coverage(records, usable, ops, suite_ops, all_usable=len(usable) == len(backends),
                         known_ops=tuple(OPS)) if whole and count else []
    not_checked += coverage
    keys = {_key(r) for r in not_checked}
    for item in extra:
        key = _key(item)
        if key not in keys:
            keys.add(key)
            not_checked.append(dict(item))
    code = EXIT_FAILED if failures else EXIT_NOT_CHECKED if not_checked else EXIT_OK
    return {"exit_code": code, "verdict": VERDICT[code], "failures": len(failures), "not_checked": not_checked,
            "selected": selected,
            "suite_ops": sorted(suite_ops) if suite_ops is not None else None}


def _nothing_selected(ops, suite_ops, profile) -> str:
    """Why a run selected no test: the requested ops the profile's suite has no test of (the models
    profile has cases for some ops only), or the options to check."""
    absent = sorted(set(ops or ()) - set(suite_ops)) if suite_ops is not None else []
    if absent and not set(ops) & set(suite_ops):
        return (f"no test was selected: profile {profile or '?'} has no test of {', '.join(absent)} (its suite "
                f"tests {', '.join(sorted(suite_ops)) or 'no op'}): nothing was checked")
    return "no test was selected (check --ops, --shard and the profile): nothing was checked"


def _key(item: dict) -> tuple:
    """What makes two reasons the same: a backend's problem or its errors are one reason per backend (a
    merge recomputes them and carries its parts' only where it has none); others, their words."""
    if item["kind"] in ("backend", "errors"):
        return item["kind"], item.get("backend")
    return item["kind"], item["message"]


def _coverage(records, usable: dict, ops, suite_ops, *, all_usable: bool, known_ops) -> list[dict]:
    """A claimed op (among the requested ops the suite has tests for) of which no numerical test ran;
    a backend claiming none of them; a requested op no backend claims."""
    wanted = set(ops or known_ops) & set(suite_ops if suite_ops is not None else known_ops)
    ran: dict = defaultdict(set)
    for r in records:
        if r.get("layer") != "errors" and r.get("status") in CHECKED:
            ran[r.get("backend")].add(r.get("op"))
    found = []
    claimed_by_any = set()
    for label, desc in usable.items():
        claimed = set(desc.get("capabilities") or {}) & wanted
        claimed_by_any |= claimed
        if not claimed:
            found.append(reason("ops", f"{label}: claims none of the requested ops "
                                       f"({', '.join(sorted(wanted)) or '-'})", backend=label))
        for op in sorted(claimed - ran[label]):
            found.append(reason("op", f"{label}: claims {op}, but no numerical test of it ran", backend=label,
                                op=op))
    if ops and all_usable and usable:
        for op in sorted(set(ops) - claimed_by_any):
            found.append(reason("ops", f"op {op} was requested (--ops), but no backend of the run claims it", op=op))
    return found


def combine(pytest_status: int, gate: dict, *, foreign_failures: bool = False) -> int:
    """The session's exit code from pytest's status and the gate: pytest's interruptions, internal and
    usage errors stand; a failure pytest saw that no record explains (a test outside the suite, a crashed
    xdist worker) is a failure; "no tests ran" (5) is the gate's business."""
    if pytest_status not in (0, 1, 5):
        return pytest_status
    code = gate["exit_code"]
    if foreign_failures or (pytest_status == 1 and code == EXIT_OK):
        return EXIT_FAILED
    return code


def lines(gate: dict) -> list[str]:
    """The verdict as the console shows it: one headline, a line per not-checked reason and warning."""
    code = gate["exit_code"]
    head = f"kvconform gate: {gate['verdict']} (exit {code})"
    if code == EXIT_FAILED:
        head += f": {gate['failures']} failed test(s)" + ("; and not everything claimed was checked"
                                                          if gate["not_checked"] else "")
    elif code == EXIT_NOT_CHECKED:
        head += ": nothing failed, but not everything claimed was checked"
    else:
        head += ": every claimed case checked, none failed"
    out = [head]
    out += [f"  NOT CHECKED {r['message']}" for r in gate["not_checked"]]
    return out
