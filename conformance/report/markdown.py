"""report.md: a short Markdown summary, suited to a CI step summary."""
from __future__ import annotations

from .build import STATUS_ORDER, cell_status

ICON = {"pass": "✅", "fail": "❌", "crash": "💥", "error": "❌", "xfail": "🟡", "xpass": "⚠️",
        "unsupported": "—", "unclaimed-pass": "➕", "skip": "·"}


def _cell(counts: dict) -> str:
    status = cell_status(counts)
    detail = " ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts.get(s))
    return f"{ICON.get(status, '')} {detail}"


def _esc(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(report: dict) -> str:
    lines = [f"# kvconform report", "",
             f"suite {report['suite_version']}, spec {report['spec_version']}, profile `{report['profile']}`, "
             f"created {report['created']}", ""]
    from .build import counts_text, split_counts
    for backend, groups in (report.get("counts") or split_counts(report.get("results", []))).items():
        lines.append(f"**{backend}:** numerical tests {counts_text(groups.get('numerical', {}))}; "
                     f"errors layer (rejection tests) {counts_text(groups.get('errors', {}))}  ")
    lines += ["", "## Backends × ops × features", "", "| backend | op | feature | result | headroom |",
              "|---|---|---|---|---|"]
    for cell in report["matrix"]:
        h = cell["headroom"]
        lines.append(f"| {cell['backend']} | {cell['op']} | {cell['feature']} | {_cell(cell['counts'])} | "
                     f"{'' if h is None else f'{h:.3g}'} |")
    if report.get("layers"):
        lines += ["", "## Backends × test layers", "", "| backend | layer | result |", "|---|---|---|"]
        lines += [f"| {c['backend']} | {c['layer']} | {_cell(c['counts'])} |" for c in report["layers"]]
    bad = [r for r in report["results"] if r["status"] in ("fail", "crash", "error", "xpass")]
    if bad:
        lines += ["", "## Failures", ""]
        for r in bad:
            lines.append(f"- **{r['status']}** `{_esc(r['id'])}` — op `{r.get('op')}`, clauses "
                         f"{', '.join(r.get('clauses', []))}")
            first = (r.get("message") or "").splitlines()[:3]
            for line in first:
                lines.append(f"  - {_esc(line)[:300]}")
            if (r.get("diagnosis") or {}).get("summary"):
                lines.append(f"  - diagnosis: {_esc(r['diagnosis']['summary'])[:400]}")
            if r.get("repro"):
                lines.append(f"  - replay: `kvconform replay {r['repro']}`")
    unmatched = report.get("expectations", {}).get("unmatched", [])
    if unmatched:
        lines += ["", "## Unmatched expectations", ""]
        lines += [f"- `{_esc(e['test'])}` ({e['backend']}, {e['source']}): {_esc(e['reason'])}" for e in unmatched]
    return "\n".join(lines) + "\n"
