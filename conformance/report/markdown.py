"""report.md: a short Markdown summary, suited to a CI step summary, that leads with the news (issue 28):
the gate's verdict, the totals (their failure counts link to the failures), the failures grouped by cause
(causes.py: one entry per cause with its count, tests, smallest counterexample, diagnosis and replay command), then one cell per backend x op (overview.py), the ops each backend does not
claim in one line, the features of the cells that did not all pass, the test layers and a legend. The
per-feature matrix of every cell is in report.html and report.json.

Every string from a result or a backend description (exception messages, backend names, test ids) goes
through `_esc`: control characters written as escapes (`\x1b`, backend_text.visible), `&`, `<`, `>`
HTML-escaped, so a backend printing `<!--` or `<script>` cannot hide the rest of a GitHub step summary,
and `|` and newlines escaped, so it cannot break out of a table cell or a list item; Markdown's emphasis,
backticks, brackets and `~` are backslash-escaped, so a name like `*x*` shows as typed. Such text is never
put in a code span (entities are not decoded there): `_code` is a `<code>` element around escaped text.
A partial run (interrupted, cut short) says so first.
"""
from __future__ import annotations

import html
import re

from kvconform.conformance.engine.backend_text import visible
from . import causes, overview
from kvconform.conformance.engine.records import FAILED, STATUS_ORDER, split_counts

ICON = overview.ICON


#: Markdown's inline syntax (emphasis, code spans, links, strikethrough) and the escape itself: every one
#: is backslash-escaped (CommonMark 2.4: any ASCII punctuation may be). An underscore inside a word
#: (`test_write_kv`) never opens emphasis (CommonMark 6.2, intraword `_`) and stays as it is.
_MARKUP = re.compile(r"([\\`*\[\]~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def _esc(text) -> str:
    """Text safe in Markdown prose and table cells: HTML-escaped, Markdown's inline markup characters
    (`*`, `_` but inside a word, backticks, brackets, `~`, backslash) and `|` backslash-escaped, on one
    line."""
    return _MARKUP.sub(r"\\\1", html.escape(visible(text), quote=False)).replace("|", "\\|").replace("\n", " ")


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
    lines += _canaries(report)
    if bad:
        lines += ["", "## Failures", ""]
        for i, entry in enumerate(causes.group(report), 1):
            lines += _failure(i, entry.smallest) if entry.count == 1 else _cause(i, entry)
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
    lines += _case_lines(r)
    if r.get("output_bytes"):
        lines.append(f"   - the backend printed {r['output_bytes']:,} bytes during the failing call")
    if r.get("failure_text"):
        lines.append(f"   - whole message, traceback and output: {_code(r['failure_text'])}")
    if r.get("repro"):
        lines.append(f"   - replay: {_code(overview.replay_command(r))}")
    return lines


def _canaries(report: dict) -> list[str]:
    """The platform canaries of each backend that ran in an interpreter (engine/canaries.py): the wrong ones named."""
    from kvconform.conformance.engine import canaries
    lines = []
    for label, desc in (report.get("backends") or {}).items():
        found = desc.get("canaries") if isinstance(desc, dict) else None
        if not found:
            continue
        lines.append(f"- {_esc(label)}: {_esc(canaries.summary(found))}")
        lines += [f"  - WRONG {_esc(r.get('what'))}: {_esc(str(r.get('detail'))[:300])}" for r in canaries.wrong(found)]
    return (["", "## Platform canaries", "", "Failures of cases that need what a canary found wrong say so in their "
             "diagnosis: they may be the interpreter's, not the kernel's.", ""] + lines) if lines else []


def _cause(i: int, entry) -> list[str]:
    """Failures of one cause (causes.py): count, cause, tests, the smallest counterexample and its replay."""
    r = entry.smallest
    names = [causes.short_id(x) for x in entry.records]
    shown = ", ".join(_code(n) for n in names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    lines = [f"{i}. {ICON.get(entry.status, '')} **{entry.count} × {_esc(entry.status)}** {_esc(entry.backend)} · "
             f"{_code(entry.op)} · one cause: {_esc(entry.cause[:400])}"
             + (f" ({_esc(entry.fingerprint)})" if entry.fingerprint else ""),
             f"   - tests: {shown}"]
    message = (r.get("message") or "").splitlines()
    if message:
        lines.append(f"   - smallest, {_code(causes.short_id(r))}: {_esc(message[0].strip()[:300])}")
    lines += _case_lines(r)
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
    return lines + ([""] if len(lines) > 2 else [])


def _case_lines(r: dict) -> list[str]:
    """A failure's counterexample and diagnosis lines (a failure alone or a group's smallest)."""
    lines = []
    if r.get("counterexample"):
        lines.append(f"   - counterexample: {_esc(r['counterexample'][:300])}")
    if (r.get("diagnosis") or {}).get("summary"):
        lines.append(f"   - diagnosis: {_esc(r['diagnosis']['summary'][:400])}")
    return lines
