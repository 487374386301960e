"""report.json (schema `kvconform.report/1`), report.md, report.html and junit.xml from results.jsonl, and merging.

report.json keys: schema, suite_version, spec_version, created, platform, profile, seed, shard, run_id
(the run's identity, the same in each of its shards), ops (requested; null: all), partial (null, or why the
run did not run every test: interrupted, cut short by a full disk, or never finished), gate {exit_code,
verdict, failures, not_checked [{kind, backend, op, message}], selected, suite_ops}
(gate.py: the verdict every report shows and every route exits with; a partial run is NOT CHECKED), backends
{name: description with claims, or load_error / claims_error}, expectations {entries, unmatched}, summary
{status: n}, matrix [{backend, op, feature, counts, error_ratio}] (worst error / allowed error; "inf"), layers [{backend, layer, counts}] (golden,
differential, property, stateful, errors: harness.LAYERS), results [one record per test, see plugin.py].

All four files are rendered from results.jsonl and run.json alone (`write_all`, `kvconform report DIR`),
each written whole or not at all (outdir.write_atomic).
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import sys
from collections import Counter, defaultdict
from pathlib import Path

from kvconform.version import SPEC_VERSION, __version__

from kvconform.conformance.run import expectations as expectations_mod
from kvconform.conformance.run import gate as gate_mod
from kvconform.conformance.run import outdir
from kvconform.conformance.engine import finite_json
from kvconform.conformance.engine.backend_text import visible
from kvconform.conformance.engine.loading import backend_problem
from kvconform.conformance.engine.records import (LAYERS, LISTED, counts_text, split_counts)

SCHEMA = "kvconform.report/1"


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
            records[rec["id"]] = renamed(rec)   # a resumed test replaces its earlier line
    return list(records.values())


def renamed(record: dict) -> dict:
    """A record of an older kvconform in today's keys: `headroom` (before issue 28) is `error_ratio`, the
    worst error / allowed error, in the record and in each field's metrics."""
    if "headroom" in record and "error_ratio" not in record:
        record = dict(record)
        record["error_ratio"] = record.pop("headroom")
    metrics = record.get("metrics")
    if isinstance(metrics, dict) and any(isinstance(m, dict) and "headroom" in m for m in metrics.values()):
        record = dict(record, metrics={name: ({("error_ratio" if k == "headroom" else k): v for k, v in m.items()}
                                              if isinstance(m, dict) else m) for name, m in metrics.items()})
    return record


def partial(run: dict, recorded: int) -> str | None:
    """Why the run's reports do not cover every test it was to run (run.json's status), or None."""
    status = run.get("status")
    if status in (None, "complete"):   # None: a run.json of an older kvconform, or a merged report
        return None
    if status == "running":
        return (f"the run did not finish (killed, or still running): {recorded} results recorded; "
                f"`kvconform run --resume` continues it")
    return f"{run.get('stopped') or status}: {recorded} results recorded; `kvconform run --resume` continues it"


def assemble(records: list[dict], *, backends: dict, run: dict, session: dict | None = None) -> dict:
    """The report of `records` (labelled by `distinct_backends`), the run's `backends` and `run` (run.json);
    `session`: what the gate knows beyond the files (RunState.session_facts; without it, as rebuilt
    from the files: the records are the selection, a run with a shard judges its slice only). A partial
    run is one more not-checked reason of the gate."""
    entries = [expectations_mod.Expectation(**{k: e[k] for k in ("test", "reason", "backend", "issue", "source")},
                                            strict=bool(e.get("strict")))
               for e in run.get("expectations", [])]
    session = session or {}
    cut = partial(run, len(records))
    extra = list(session.get("extra", ()))
    if cut:
        extra.append(gate_mod.reason("partial", f"partial run: {cut}"))
    verdict = gate_mod.judge(records, backends, ops=run.get("ops"), suite_ops=session.get("suite_ops"),
                             selected=session.get("selected"), profile=run.get("profile"),
                             whole=session.get("whole", not run.get("shard")), extra=extra)
    return {
        "schema": SCHEMA,
        "suite_version": __version__,
        "spec_version": SPEC_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": _platform(),
        "profile": run.get("profile"),
        "seed": run.get("seed"),
        "shard": run.get("shard"),
        "run_id": run.get("run_id"),
        "ops": run.get("ops"),
        "partial": cut,
        "gate": verdict,
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
    from .overview import MEASURED, error_ratio
    cells: dict = defaultdict(lambda: {"counts": Counter(), "error_ratio": None})
    for r in records:
        for feature in r.get("features") or ["base"]:
            cell = cells[(r.get("backend", "?"), r.get("op", "?"), feature)]
            cell["counts"][r["status"]] += 1
            h = error_ratio(r) if r["status"] in MEASURED else None
            if h is not None:
                cell["error_ratio"] = h if cell["error_ratio"] is None else max(cell["error_ratio"], h)
    return [{"backend": b, "op": o, "feature": f, "counts": dict(c["counts"]),
             "error_ratio": None if c["error_ratio"] is None else _json_number(c["error_ratio"])}
            for (b, o, f), c in sorted(cells.items())]


def _json_number(value: float):
    """inf as the string "inf" (the records' own form: JSON has no infinity), never a sentinel number."""
    return value if math.isfinite(value) else str(value)


def layers(records: list[dict]) -> list[dict]:
    """Status counts per (backend, test layer), layers in the order of harness.LAYERS: e.g. how a backend
    fares on malformed input ("errors") apart from its numerics."""
    cells: dict = defaultdict(Counter)
    for r in records:
        cells[(r.get("backend", "?"), r.get("layer") or "?")][r["status"]] += 1
    order = {layer: i for i, layer in enumerate(LAYERS)}
    return [{"backend": b, "layer": layer, "counts": dict(c)}
            for (b, layer), c in sorted(cells.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99), kv[0][1]))]


def summary_lines(report: dict, listed: list[str] | None = None) -> list[str]:
    """The console summary: totals per backend, then the failures (`listed`: their lines as given, e.g.
    grouped by cause, causes.listed_lines; else one per record), tests not run, unmatched expectations."""
    lines = []
    for backend, groups in (report.get("counts") or split_counts(report["results"])).items():
        lines.append(f"{backend}: numerical tests {counts_text(groups.get('numerical', {}))}; "
                     f"errors layer (rejection tests) {counts_text(groups.get('errors', {}))}")
    not_run: dict = defaultdict(list)
    for r in report["results"]:
        if r["status"] == "not run":
            not_run[(r.get("backend"), r.get("op"))].append(r)
        elif r["status"] in LISTED and listed is None:
            rate = r.get("replays") if r["status"] == "flaky" else None
            lines.append(f"  {r['status'].upper()} {r.get('backend')} {r.get('op')} "
                         f"[{' '.join(r.get('clauses', []))}] {r['id']}"
                         + (f" (failed {rate['failed']} of {rate['replays']} replays)" if rate else ""))
            if r.get("repro"):
                lines.append(f"    replay: kvconform replay {r['repro']} --backend {r.get('backend_spec')}")
    lines += listed or []
    for (backend, op), records in not_run.items():
        reason = (records[0].get("message") or "").partition("not run: ")[2]
        lines.append(f"  NOT RUN {backend} {op}: {len(records)} tests not run ({reason})")
    for e in report["expectations"]["unmatched"]:
        lines.append(f"  unmatched expectation ({e['source']}): {e['test']} [{e['backend']}]")
    if report.get("partial"):
        lines.append(f"  PARTIAL RUN: {report['partial']}")
    return [visible(line) for line in lines]


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


def write_all(out: Path, report: dict | None = None, run: dict | None = None, session: dict | None = None) -> dict:
    """Render report.json, report.md, report.html and junit.xml in `out` (from results.jsonl, run.json
    unless `run` is given, and backends/, unless `report` is given; `session`: see `assemble`). Raises
    OSError (e.g. a full disk) with every file either whole or as it was."""
    out = Path(out)
    if report is None:
        run = run if run is not None else (outdir.read_run(out) or {})
        records, backends = distinct_backends(read_results(out / outdir.RESULTS), _load_backends(out))
        report = assemble(records, backends=backends, run=run, session=session)
    from . import html, junit, markdown
    outdir.write_atomic(out / "report.json", finite_json.dumps(report, indent=1, default=str) + "\n")
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
    if isinstance(report.get("results"), list):
        report["results"] = [renamed(r) if isinstance(r, dict) else r for r in report["results"]]
    return report


def merge(reports: list[dict], names: list[str] | None = None) -> dict:
    """Join reports (the shards of a run, or whole runs): results keyed by (backend, test id), later files
    win; one header; and one verdict over the whole. Shards are grouped by their run's identity (run_id,
    the same in every shard of a run): each group must hold every shard 1..N once, else the merge is NOT
    CHECKED naming the missing ones (a foreign shard forms a group of its own, incomplete). Two files
    holding the same shard of one run are an error (ReportError)."""
    if not reports:
        raise ReportError("nothing to merge")
    names = names or [f"report {i + 1}" for i in range(len(reports))]
    results: dict = {}
    backends: dict = {}
    entries: dict = {}
    profiles = {r.get("profile") for r in reports}
    shards: dict = defaultdict(dict)   # (run_id, N) -> {I: file}
    carried: list[dict] = []
    for rep, name in zip(reports, names):
        for label, desc in rep.get("backends", {}).items():
            if label not in backends or not backend_problem(backends[label]):
                backends[label] = desc   # a backend that could not be checked in one part stays so
        for e in rep.get("expectations", {}).get("entries", []):
            entries[(e["test"], e["backend"], e["source"])] = e
        for rec in rep["results"]:
            results[(rec.get("backend"), rec["id"])] = rec
        carried += [r for r in (rep.get("gate") or {}).get("not_checked", []) if r["kind"] not in gate_mod.WHOLE_ONLY]
        shard = _shard_of(rep)
        if shard is not None:
            i, n = shard
            group = shards[(rep.get("run_id"), n)]
            if i in group:
                raise ReportError(f"{group[i]} and {name} are both shard {i}/{n} of run {rep.get('run_id')}")
            group[i] = name
    for (run_id, n), group in sorted(shards.items(), key=lambda kv: str(kv[0])):
        missing = [f"{i}/{n}" for i in range(1, n + 1) if i not in group]
        if missing:
            given = ", ".join(f"{i}/{n} ({group[i]})" for i in sorted(group))
            carried.append(gate_mod.reason("shard", f"run {run_id}: shard(s) {', '.join(missing)} missing from the "
                                                    f"merge (given: {given}); their tests were not checked"))
    gates = [rep.get("gate") or {} for rep in reports]
    selected = [g.get("selected") for g in gates]
    suite_ops = [g.get("suite_ops") for g in gates]
    ops = [rep.get("ops") for rep in reports]
    run = {"profile": "+".join(sorted(p for p in profiles if p)) or None, "seed": reports[0].get("seed"),
           "shard": "merged " + ", ".join(str(r.get("shard")) for r in reports),
           "run_id": "+".join(sorted({str(r.get("run_id")) for r in reports})),
           "ops": None if any(o is None for o in ops) else sorted({op for o in ops for op in o}),
           "expectations": list(entries.values())}
    session = {"selected": None if None in selected else sum(selected),
               "suite_ops": None if None in suite_ops else sorted({op for o in suite_ops for op in o}),
               "whole": True, "extra": carried}
    merged = assemble(list(results.values()), backends=backends, run=run, session=session)
    partial = [f"shard {r.get('shard')}: {r['partial']}" for r in reports if r.get("partial")]
    merged["partial"] = "; ".join(partial) or None   # a partial shard leaves the whole partial
    return merged


def _shard_of(report: dict) -> tuple[int, int] | None:
    """(I, N) of a shard's report ("shard": "I/N"), None for a whole run or a merge."""
    text = report.get("shard")
    if not isinstance(text, str) or "/" not in text or text.startswith("merged"):
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        return None
    return (i, n) if 1 <= i <= n else None
