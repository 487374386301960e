"""report.md: a short Markdown summary, suited to a CI step summary.

Every string from a result or a backend description (exception messages, backend names, test ids) goes
through `_esc`: control characters written as escapes (`\x1b`, backend_text.visible), `&`, `<`, `>`
HTML-escaped, so a backend printing `<!--` or `<script>` cannot hide the rest of a GitHub step summary,
and `|` and newlines escaped, so it cannot break out of a table cell or a list item. Such text is never
put in a code span (entities are not decoded there): `_code` is a `<code>` element around escaped text.
A partial run (interrupted, cut short) says so first.
"""
from __future__ import annotations

import html

from ..backend_text import visible
from .build import LISTED, STATUS_ORDER, cell_status

ICON = {"pass": "✅", "fail": "❌", "crash": "💥", "flaky": "🎲", "error": "❌", "xfail": "🟡", "xpass": "⚠️",
        "unsupported": "—", "unclaimed-pass": "➕", "not run": "⏭", "skip": "·"}


def _cell(counts: dict) -> str:
    status = cell_status(counts)
    detail = " ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts.get(s))
    return f"{ICON.get(status, '')} {detail}"


def _esc(text) -> str:
    """Text safe in Markdown prose and table cells: HTML-escaped, `|` escaped, on one line."""
    return html.escape(visible(text), quote=False).replace("|", "\\|").replace("\n", " ")


def _code(text) -> str:
    return f"<code>{_esc(text)}</code>"


def _row(*cells) -> str:
    return "| " + " | ".join(_esc(c) for c in cells) + " |"


def render(report: dict) -> str:
    lines = ["# kvconform report", "",
             f"suite {_esc(report['suite_version'])}, spec {_esc(report['spec_version'])}, profile "
             f"{_code(report['profile'])}, created {_esc(report['created'])}", ""]
    if report.get("partial"):
        lines += [f"**PARTIAL RUN:** {_esc(report['partial'])}", ""]
    lines += _gate(report.get("gate"))
    from .build import counts_text, split_counts
    for backend, groups in (report.get("counts") or split_counts(report.get("results", []))).items():
        lines.append(f"**{_esc(backend)}:** numerical tests {counts_text(groups.get('numerical', {}))}; "
                     f"errors layer (rejection tests) {counts_text(groups.get('errors', {}))}  ")
    lines += ["", "## Backends × ops × features", "", "| backend | op | feature | result | headroom |",
              "|---|---|---|---|---|"]
    for cell in report["matrix"]:
        h = cell["headroom"]
        lines.append(_row(cell["backend"], cell["op"], cell["feature"], _cell(cell["counts"]),
                          "" if h is None else f"{h:.3g}"))
    if report.get("layers"):
        lines += ["", "## Backends × test layers", "", "| backend | layer | result |", "|---|---|---|"]
        lines += [_row(c["backend"], c["layer"], _cell(c["counts"])) for c in report["layers"]]
    bad = [r for r in report["results"] if r["status"] in LISTED]
    if bad:
        lines += ["", "## Failures", ""]
        for r in bad:
            lines += _failure(r)
    unmatched = report.get("expectations", {}).get("unmatched", [])
    if unmatched:
        lines += ["", "## Unmatched expectations", ""]
        lines += [f"- {_code(e['test'])} ({_esc(e['backend'])}, {_esc(e['source'])}): {_esc(e['reason'])}"
                  for e in unmatched]
    return "\n".join(lines) + "\n"


def _failure(r: dict) -> list[str]:
    """One failure as a list item: status, test, op, clauses, the message's first lines, diagnosis, replay."""
    lines = [f"- **{_esc(r['status'])}** {_code(r['id'])} — op {_code(r.get('op'))}, clauses "
             f"{_esc(', '.join(r.get('clauses', [])))}"]
    for line in (r.get("message") or "").splitlines()[:3]:
        lines.append(f"  - {_esc(line[:300])}")
    if (r.get("diagnosis") or {}).get("summary"):
        lines.append(f"  - diagnosis: {_esc(r['diagnosis']['summary'][:400])}")
    if r.get("output_bytes"):
        lines.append(f"  - the backend printed {r['output_bytes']:,} bytes during the failing call")
    if r.get("failure_text"):
        lines.append(f"  - whole message, traceback and output: {_code(r['failure_text'])}")
    if r.get("repro"):
        lines.append(f"  - replay: {_code('kvconform replay ' + r['repro'] + ' --backend ' + str(r.get('backend_spec')))}")
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
