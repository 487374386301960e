"""report.md: a short Markdown summary, suited to a CI step summary, that leads with the news (issue 28):
the gate's verdict, the totals (their failure counts link to the failures), each failure with its
diagnosis and replay command, then one cell per backend x op (overview.py), the ops each backend does not
claim in one line, the features of the cells that did not all pass, the test layers and a legend. The
per-feature matrix of every cell is in report.html and report.json.

Every string from a result or a backend description (exception messages, backend names, test ids) goes
through `_esc`: control characters written as escapes (`\x1b`, backend_text.visible), `&`, `<`, `>`
HTML-escaped, so a backend printing `<!--` or `<script>` cannot hide the rest of a GitHub step summary,
and `|` and newlines escaped, so it cannot break out of a table cell or a list item. Such text is never
put in a code span (entities are not decoded there): `_code` is a `<code>` element around escaped text.
A partial run (interrupted, cut short) says so first.
"""
from __future__ import annotations

import html

from kvconform.conformance.engine.backend_text import visible
from . import overview
from kvconform.conformance.engine.records import FAILED, STATUS_ORDER, split_counts

ICON = overview.ICON


def _esc(text) -> str:
    """Text safe in Markdown prose and table cells: HTML-escaped, `|` escaped, on one line."""
    return html.escape(visible(text), quote=False).replace("|", "\\|").replace("\n", " ")


def _code(text) -> str:
    return f"<code>{_esc(text)}</code>"


def _row(*cells) -> str:
    return "| " + " | ".join(_esc(c) for c in cells) + " |"


def _totals(counts: dict, anchor: str | None) -> str:
    """`❌ [2 fail](#failures), 7 pass, 276 unsupported`: the failure counts link to the failures."""
    parts = []
    for s in STATUS_ORDER:
        if counts.get(s):
            text = f"{counts[s]} {s}"
            parts.append(f"[{text}](#{anchor})" if anchor and s in FAILED + ("xpass",) else text)
    return f"{ICON.get(overview.cell_status(counts), '')} " + ", ".join(parts) if parts else "none"


def render(report: dict) -> str:
    lines = ["# kvconform report", ""]
    lines += _gate(report.get("gate"))
    if report.get("partial"):
        lines += [f"**PARTIAL RUN:** {_esc(report['partial'])}", ""]
    bad = overview.failures(report)
    lines += ["| backend | numerical tests | errors layer (rejection tests) |", "|---|---|---|"]
    for backend, groups in (report.get("counts") or split_counts(report.get("results", []))).items():
        anchor = "failures" if bad else None
        lines.append(f"| {_esc(backend)} | {_totals(groups.get('numerical', {}), anchor)} | "
                     f"{_totals(groups.get('errors', {}), anchor)} |")
    if bad:
        lines += ["", "## Failures", ""]
        for i, r in enumerate(bad, 1):
            lines += _failure(i, r)
    lines += _ops(report)
    if report.get("layers"):
        backends = sorted({c["backend"] for c in report["layers"]})
        by = {(c["backend"], c["layer"]): c["counts"] for c in report["layers"]}
        names = list(dict.fromkeys(c["layer"] for c in report["layers"]))
        lines += ["", "## Test layers", "", "| layer | " + " | ".join(_esc(b) for b in backends) + " |",
                  "|---" * (len(backends) + 1) + "|"]
        lines += ["| " + " | ".join([_esc(layer)] + [overview.counts_cell(by[(b, layer)]) if (b, layer) in by
                                                      else "" for b in backends]) + " |" for layer in names]
    unmatched = report.get("expectations", {}).get("unmatched", [])
    if unmatched:
        lines += ["", "## Unmatched expectations", ""]
        lines += [f"- {_code(e['test'])} ({_esc(e['backend'])}, {_esc(e['source'])}): {_esc(e['reason'])}"
                  for e in unmatched]
    lines += ["", f"<sub>{_esc(overview.LEGEND)} suite {_esc(report['suite_version'])}, spec "
                  f"{_esc(report['spec_version'])}, profile {_code(report['profile'])}, created "
                  f"{_esc(report['created'])}; every feature of every cell: report.html, report.json.</sub>"]
    return "\n".join(lines) + "\n"


def _ops(report: dict) -> list[str]:
    """One cell per backend x op claimed, the unclaimed ops in one line per backend, and the features of
    each cell that did not all pass."""
    backends, ops, cells, unclaimed = overview.op_cells(report)
    if not ops:
        return []
    lines = ["", "## Ops", "", "| op | " + " | ".join(_esc(b) for b in backends) + " |",
             "|---" * (len(backends) + 1) + "|"]
    for op in ops:
        row = [_esc(op)]
        for b in backends:
            cell = cells.get((b, op))
            if cell is None:
                row.append("")
                continue
            ratio = overview.ratio_text(cell["error_ratio"])
            row.append(_esc(overview.counts_cell(cell["counts"]) + (f" · {ratio}" if ratio else "")))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for b in backends:
        if unclaimed.get(b):
            lines.append(f"- {_esc(b)} does not claim {len(unclaimed[b])} op(s) of this run: "
                         f"{_esc(', '.join(unclaimed[b]))}")
    mixed = [(b, op, cell) for (b, op), cell in sorted(cells.items())
             if overview.cell_status(cell["counts"]) not in ("pass", "unclaimed-pass")]
    for b, op, cell in mixed:
        features = "; ".join(f"{f} {overview.counts_cell(fc['counts'])}" for f, fc in sorted(cell["features"].items()))
        lines.append(f"- {_esc(b)} · {_esc(op)} by feature: {_esc(features)}")
    return lines


def _failure(i: int, r: dict) -> list[str]:
    """One failure: status, backend, op, test; the message's first lines, counterexample, diagnosis, replay."""
    lines = [f"{i}. {ICON.get(r['status'], '')} **{_esc(r['status'])}** {_esc(r.get('backend'))} · "
             f"{_code(r.get('op'))} · {_code(r['id'].split('::')[-1])} (clauses {_esc(', '.join(r.get('clauses', [])))})"]
    message = (r.get("message") or "").splitlines()
    for line in message[:3]:
        if not line.lstrip().startswith(("replay:", "case:", "diagnosis:")):
            lines.append(f"   - {_esc(line.strip()[:300])}")
    if r.get("counterexample"):
        lines.append(f"   - counterexample: {_esc(r['counterexample'][:300])}")
    if (r.get("diagnosis") or {}).get("summary"):
        lines.append(f"   - diagnosis: {_esc(r['diagnosis']['summary'][:400])}")
    if r.get("output_bytes"):
        lines.append(f"   - the backend printed {r['output_bytes']:,} bytes during the failing call")
    if r.get("failure_text"):
        lines.append(f"   - whole message, traceback and output: {_code(r['failure_text'])}")
    if r.get("repro"):
        lines.append(f"   - replay: {_code(overview.replay_command(r))}")
    return lines


def _gate(verdict: dict | None) -> list[str]:
    """The gate's verdict (gate.py), first: a run that checked less than it claims says so here."""
    if not verdict:
        return []
    lines = [f"**Gate: {_esc(verdict['verdict'])} (exit {verdict['exit_code']})** — "
             + {0: "every claimed case checked, none failed.",
                1: f"{verdict['failures']} failed test(s).",
                3: "nothing failed, but not everything claimed was checked:"}.get(verdict["exit_code"], ""), ""]
    lines += [f"- NOT CHECKED {_esc(r['message'])}" for r in verdict.get("not_checked", [])]
    lines += [f"- not checked (tests chosen by hand, not counted): {_esc(r['message'])}"
              for r in verdict.get("warnings", [])]
    return lines + ([""] if len(lines) > 2 else [])
