"""report.json (schema `kvconform.report/1`), report.md, report.html and junit.xml from results.jsonl, and merging.

report.json keys: schema, suite_version, spec_version, created, platform, profile, seed, shard,
partial (null, or why the run did not run every test: interrupted, cut short by a full disk, or never
finished), backends {name: description with claims}, expectations {entries, unmatched}, summary
{status: n}, matrix [{backend, op, feature, counts, headroom}], layers [{backend, layer, counts}] (golden,
differential, property, stateful, errors: harness.LAYERS), results [one record per test, see plugin.py].

All four files are rendered from results.jsonl and run.json alone (`write_all`, `kvconform report DIR`),
each written whole or not at all (outdir.write_atomic).
"""
from __future__ import annotations

import datetime as _dt
import json
import platform
import sys
from collections import Counter, defaultdict
from pathlib import Path

from kvconform import SPEC_VERSION, __version__

from .. import expectations as expectations_mod
from .. import outdir
from ..backend_text import visible

SCHEMA = "kvconform.report/1"
STATUS_ORDER = ("fail", "crash", "flaky", "error", "xpass", "xfail", "pass", "unclaimed-pass", "unsupported",
                "not run", "skip")
#: statuses that fail a run (`not run`, a test skipped after --max-crashes crashes in a row of its op, is not
#: one: the crashes before it are)
FAILED = ("fail", "crash", "flaky", "error")
#: statuses every report lists under its failures (an xpass: an expectations entry to remove)
LISTED = FAILED + ("xpass",)


class ReportError(ValueError):
    """A report file that cannot be read or merged; one-line message."""


def _platform() -> dict:
    info = {"python": sys.version.split()[0], "machine": platform.machine(), "system": platform.system()}
    for mod in ("numpy", "hypothesis", "pytest", "ml_dtypes"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # pragma: no cover - optional
            pass
    return info


def read_results(path: Path) -> list[dict]:
    records = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue          # a line cut short by a killed run
        if isinstance(rec, dict) and "id" in rec and "status" in rec:
            records[rec["id"]] = rec   # a resumed test replaces its earlier line
    return list(records.values())


def partial(run: dict, recorded: int) -> str | None:
    """Why the run's reports do not cover every test it was to run (run.json's status), or None."""
    status = run.get("status")
    if status in (None, "complete"):   # None: a run.json of an older kvconform, or a merged report
        return None
    if status == "running":
        return (f"the run did not finish (killed, or still running): {recorded} results recorded; "
                f"`kvconform run --resume` continues it")
    return f"{run.get('stopped') or status}: {recorded} results recorded; `kvconform run --resume` continues it"


def assemble(records: list[dict], *, backends: dict, run: dict) -> dict:
    entries = [expectations_mod.Expectation(**{k: e[k] for k in ("test", "reason", "backend", "issue", "source")})
               for e in run.get("expectations", [])]
    return {
        "schema": SCHEMA,
        "suite_version": __version__,
        "spec_version": SPEC_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": _platform(),
        "profile": run.get("profile"),
        "seed": run.get("seed"),
        "shard": run.get("shard"),
        "partial": partial(run, len(records)),
        "backends": backends,
        "expectations": {"entries": run.get("expectations", []),
                         "unmatched": [e.to_json() for e in expectations_mod.unmatched(entries, records)]},
        "summary": dict(Counter(r["status"] for r in records)),
        "counts": split_counts(records),
        "matrix": matrix(records),
        "layers": layers(records),
        "results": sorted(records, key=lambda r: (r.get("backend", ""), r.get("op", ""), r["id"])),
    }


def matrix(records: list[dict]) -> list[dict]:
    cells: dict = defaultdict(lambda: {"counts": Counter(), "headroom": None})
    for r in records:
        for feature in r.get("features") or ["base"]:
            cell = cells[(r.get("backend", "?"), r.get("op", "?"), feature)]
            cell["counts"][r["status"]] += 1
            h = r.get("headroom")
            if isinstance(h, (int, float)) and r["status"] in ("pass", "fail", "xfail", "xpass", "unclaimed-pass"):
                cell["headroom"] = h if cell["headroom"] is None else max(cell["headroom"], h)
    return [{"backend": b, "op": o, "feature": f, "counts": dict(c["counts"]), "headroom": c["headroom"]}
            for (b, o, f), c in sorted(cells.items())]


def layers(records: list[dict]) -> list[dict]:
    """Status counts per (backend, test layer), layers in the order of harness.LAYERS: e.g. how a backend
    fares on malformed input ("errors") apart from its numerics."""
    from ..harness import LAYERS
    cells: dict = defaultdict(Counter)
    for r in records:
        cells[(r.get("backend", "?"), r.get("layer") or "?")][r["status"]] += 1
    order = {layer: i for i, layer in enumerate(LAYERS)}
    return [{"backend": b, "layer": layer, "counts": dict(c)}
            for (b, layer), c in sorted(cells.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99), kv[0][1]))]


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


def summary_lines(report: dict) -> list[str]:
    lines = []
    for backend, groups in (report.get("counts") or split_counts(report["results"])).items():
        lines.append(f"{backend}: numerical tests {counts_text(groups.get('numerical', {}))}; "
                     f"errors layer (rejection tests) {counts_text(groups.get('errors', {}))}")
    not_run: dict = defaultdict(list)
    for r in report["results"]:
        if r["status"] == "not run":
            not_run[(r.get("backend"), r.get("op"))].append(r)
        elif r["status"] in LISTED:
            rate = r.get("replays") if r["status"] == "flaky" else None
            lines.append(f"  {r['status'].upper()} {r.get('backend')} {r.get('op')} "
                         f"[{' '.join(r.get('clauses', []))}] {r['id']}"
                         + (f" (failed {rate['failed']} of {rate['replays']} replays)" if rate else ""))
            if r.get("repro"):
                lines.append(f"    replay: kvconform replay {r['repro']} --backend {r.get('backend_spec')}")
    for (backend, op), records in not_run.items():
        reason = (records[0].get("message") or "").partition("not run: ")[2]
        lines.append(f"  NOT RUN {backend} {op}: {len(records)} tests not run ({reason})")
    for e in report["expectations"]["unmatched"]:
        lines.append(f"  unmatched expectation ({e['source']}): {e['test']} [{e['backend']}]")
    for problem in unchecked(report):
        lines.append(f"  NOT CHECKED {problem}")
    if report.get("partial"):
        lines.append(f"  PARTIAL RUN: {report['partial']}")
    return [visible(line) for line in lines]


def unchecked(report: dict, ops: list[str] | None = None) -> list[str]:
    """Why a green run would claim more than it checked: a backend whose claims could not be read, or a
    claimed op (among `ops`, default: every op of the run) of which no numerical test ran."""
    problems = []
    ran: dict = defaultdict(set)
    seen_ops = set()
    for r in report["results"]:
        seen_ops.add(r.get("op"))
        if layer_group(r) == "numerical" and r["status"] not in ("unsupported", "skip", "not run"):
            ran[r.get("backend")].add(r.get("op"))
    wanted = set(ops) if ops else seen_ops
    for name, desc in sorted(report.get("backends", {}).items()):
        if desc.get("claims_error"):
            problems.append(f"{name}: its claims cannot be read ({desc['claims_error']}); nothing was checked")
            continue
        if not desc.get("available", True):
            continue
        claimed = set(desc.get("capabilities", {})) & wanted
        if not claimed:
            problems.append(f"{name}: claims none of the requested ops ({', '.join(sorted(wanted)) or '-'})")
        for op in sorted(claimed - ran[name]):
            problems.append(f"{name}: claims {op}, but no numerical test of it ran")
    return problems


def _load_backends(out: Path) -> list[dict]:
    """The description of every backend of the run (backends/<spec>.json, each with its `spec`)."""
    found = []
    for path in sorted((out / "backends").glob("*.json")) if (out / "backends").is_dir() else []:
        try:
            desc = json.loads(path.read_text())
        except (OSError, ValueError):   # half-written by a run cut short: its results keep their label
            continue
        if not isinstance(desc, dict):
            continue
        desc.setdefault("name", desc.get("spec") or path.stem)
        found.append(desc)
    return found


def distinct_backends(records: list[dict], descriptions: list[dict]) -> tuple[list[dict], dict]:
    """(records, {label: description}) where every backend spec of the run has its own label: the backend's
    name, or `name (spec)` when two specs share one (two builds of one library), whose results would
    otherwise be counted as one backend's."""
    uses = Counter(d["name"] for d in descriptions)
    label = {d.get("spec"): d["name"] if uses[d["name"]] == 1 else f"{d['name']} ({d.get('spec')})"
             for d in descriptions}
    backends = {label[d.get("spec")]: d for d in descriptions}
    relabelled = [dict(r, backend=label[r["backend_spec"]]) if r.get("backend_spec") in label else r
                  for r in records]
    return relabelled, backends


def write_all(out: Path, report: dict | None = None, run: dict | None = None) -> dict:
    """Render report.json, report.md, report.html and junit.xml in `out` (from results.jsonl, run.json
    unless `run` is given, and backends/, unless `report` is given). Raises OSError (e.g. a full disk)
    with every file either whole or as it was."""
    out = Path(out)
    if report is None:
        run = run if run is not None else (outdir.read_run(out) or {})
        records, backends = distinct_backends(read_results(out / outdir.RESULTS), _load_backends(out))
        report = assemble(records, backends=backends, run=run)
    from . import html, junit, markdown
    outdir.write_atomic(out / "report.json", json.dumps(report, indent=1, default=str) + "\n")
    outdir.write_atomic(out / "report.md", markdown.render(report))
    outdir.write_atomic(out / "report.html", html.render(report))
    outdir.write_atomic(out / "junit.xml", junit.render(report))
    return report


def load_report(path) -> dict:
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        raise ReportError(f"{path} is not a {SCHEMA} report (schema={report.get('schema') if isinstance(report, dict) else None!r})")
    return report


def merge(reports: list[dict]) -> dict:
    """Join shard reports: results keyed by (backend, test id), later files win; one header."""
    if not reports:
        raise ReportError("nothing to merge")
    results: dict = {}
    backends: dict = {}
    entries: dict = {}
    profiles = {r.get("profile") for r in reports}
    for rep in reports:
        backends.update(rep.get("backends", {}))
        for e in rep.get("expectations", {}).get("entries", []):
            entries[(e["test"], e["backend"], e["source"])] = e
        for rec in rep["results"]:
            results[(rec.get("backend"), rec["id"])] = rec
    run = {"profile": "+".join(sorted(p for p in profiles if p)) or None, "seed": reports[0].get("seed"),
           "shard": "merged " + ", ".join(str(r.get("shard")) for r in reports),
           "expectations": list(entries.values())}
    merged = assemble(list(results.values()), backends=backends, run=run)
    partial = [f"shard {r.get('shard')}: {r['partial']}" for r in reports if r.get("partial")]
    merged["partial"] = "; ".join(partial) or None   # a partial shard leaves the whole partial
    return merged
