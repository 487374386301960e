"""report.html: one self-contained page (no scripts, no external resources).

Every string from a result (backend messages, ids, counterexamples) goes through `html.escape` after its
control characters are written as escapes (backend_text.visible), and a Content-Security-Policy forbids
scripts outright, so nothing a backend prints can inject markup. A partial run says so in a banner.
Error plots are inline SVG: the worst error / allowed error per test (log scale), 1 = the tolerance line,
and for each failed field its error / allowed along the elements (compare.py `FieldResult.profile`).

The page leads with the news (issue 28): the gate's verdict, the totals (their failure counts link to the
first failure of the backend), each failure with its diagnosis, counterexample and replay command (the
whole message, variations, plots, traceback and output on demand), then one cell per backend x op
(overview.py) whose features open on demand, the ops each backend does not claim in one line, a legend;
then the test layers, the backends and the plot.
"""
from __future__ import annotations

import html
import math

from kvconform.conformance.engine.backend_text import visible
from . import overview
from kvconform.conformance.engine.records import FAILED, STATUS_ORDER, cell_status, split_counts

COLOR = {"pass": "#2e7d32", "fail": "#c62828", "crash": "#6a1b9a", "flaky": "#ad1457", "error": "#c62828",
         "xfail": "#f9a825",
         "xpass": "#ef6c00", "unsupported": "#9e9e9e", "unclaimed-pass": "#1565c0", "not run": "#8d6e63",
         "skip": "#bdbdbd"}

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}
th{background:#f3f3f3}.st{color:#fff;border-radius:3px;padding:0 .4em;font-size:.85em}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;white-space:pre-wrap}
.fail{border-left:4px solid #c62828;padding-left:.8em;margin:1em 0}
.fail h3{font-size:1em;margin:.2em 0}.replay{font-family:monospace;background:#f7f7f7;padding:.2em .4em}
#ops td{vertical-align:top}#ops details table{margin:.3em 0;font-size:.85em}.legend{color:#555;font-size:.9em}
"""


def e(value) -> str:
    return html.escape(visible(value), quote=True)


def badge(status: str) -> str:
    return f'<span class="st" style="background:{COLOR.get(status, "#777")}">{e(status)}</span>'


def _ops(report: dict) -> str:
    """One cell per backend x op claimed (its counts and worst error / allowed; its features open on
    demand); the ops each backend does not claim in one line."""
    backends, ops, cells, unclaimed = overview.op_cells(report)
    if not ops:
        return "<p>No op was run.</p>"
    out = ['<table id="ops"><tr><th>op</th>'] + [f"<th>{e(b)}</th>" for b in backends] + ["</tr>"]
    for op in ops:
        out.append(f"<tr><td>{e(op)}</td>")
        for b in backends:
            cell = cells.get((b, op))
            if cell is None:
                out.append("<td></td>")
                continue
            counts = cell["counts"]
            detail = ", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts.get(s))
            ratio = overview.ratio_text(cell["error_ratio"])
            rows = "".join(f"<tr><td>{e(f)}</td><td>{badge(cell_status(fc['counts']))} "
                           f"{e(overview.counts_cell(fc['counts']).split(' ', 1)[-1])}</td>"
                           f"<td>{e(overview.ratio_text(fc['error_ratio']))}</td></tr>"
                           for f, fc in sorted(cell["features"].items()))
            out.append(f'<td class="cell" data-status="{e(cell_status(counts))}"><details><summary>'
                       f"{badge(cell_status(counts))} <small>{e(detail)}</small>"
                       + (f' <small title="worst error / allowed error">· {e(ratio)}</small>' if ratio else "")
                       + f"</summary><table><tr><th>feature</th><th>tests</th><th>error / allowed</th></tr>{rows}"
                       f"</table></details></td>")
        out.append("</tr>")
    out.append("</table>")
    out += [f'<p class="unclaimed">{e(b)} does not claim {len(v)} op(s) of this run: {e(", ".join(v))}</p>'
            for b, v in sorted(unclaimed.items()) if v]
    out.append('<p class="legend">' + " ".join(f"{badge(s)} {e(overview.MEANING[s])}" for s in
               ("pass", "fail", "crash", "flaky", "xfail", "xpass", "unsupported"))
               + f"; {e(overview.RATIO_NOTE)}.</p>")
    return "".join(out)


def _layers(report: dict) -> str:
    """backends × test layers (golden, differential, property, stateful, errors)."""
    cells = report.get("layers") or []
    if not cells:
        return ""
    backends = sorted({c["backend"] for c in cells})
    names = list(dict.fromkeys(c["layer"] for c in cells))
    by = {(c["backend"], c["layer"]): c["counts"] for c in cells}
    out = ['<h2>Test layers</h2><table id="layers"><tr><th>layer</th>']
    out += [f"<th>{e(b)}</th>" for b in backends]
    out.append("</tr>")
    for layer in names:
        out.append(f"<tr><td>{e(layer)}</td>")
        for b in backends:
            counts = by.get((b, layer))
            if counts is None:
                out.append("<td>—</td>")
                continue
            detail = ", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts.get(s))
            out.append(f'<td data-status="{e(cell_status(counts))}">{badge(cell_status(counts))} '
                       f"<small>{e(detail)}</small></td>")
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


#: log10 range of the plots: 1e-8 .. 1e3 of the allowed error (beyond: clipped to the edge)
LOG_LO, LOG_HI = -8.0, 3.0


def _finite_ratio(value) -> float | None:
    """A recorded error / allowed as a float (inf kept), None when the test has none."""
    try:
        h = float(value)
    except (TypeError, ValueError):
        return None
    return h if h >= 0 and not math.isnan(h) else None


def _x_of(value: float, left: float, width: float) -> float:
    v = math.log10(value) if value > 0 else LOG_LO
    return left + (min(max(v, LOG_LO), LOG_HI) - LOG_LO) / (LOG_HI - LOG_LO) * width


def _log_axis(left: float, width: float, y: float, label: str) -> list[str]:
    """Tick labels 1e-8 .. 1e3 along y, the dashed tolerance line at 1 is drawn by the caller."""
    parts = [f'<text x="{_x_of(10.0 ** p, left, width):.1f}" y="{y:.0f}" font-size="10" text-anchor="middle">'
             f'1e{p}</text>' for p in range(int(LOG_LO), int(LOG_HI) + 1)]
    parts.append(f'<text x="{left + width / 2:.0f}" y="{y + 14:.0f}" font-size="11" text-anchor="middle">'
                 f'{e(label)}</text>')
    return parts


def _plot(report: dict) -> str:
    """One labelled bar per test with an error metric: its worst error / allowed error (log scale), the
    dashed line at 1 is the tolerance; sorted worst first so what is close to failing shows."""
    items = []
    for r in report["results"]:
        h = overview.error_ratio(r)
        if h is not None and h > 0:
            test = r["id"].split("::")[-1]
            items.append((h, f"{r.get('backend', '')} · {test}", r["status"]))
    if not items:
        return "<p>No error metrics recorded.</p>"
    items.sort(key=lambda item: -item[0])
    label_w, width, bar, top = 420, 560, 16, 8
    left = label_w + 10
    height = top + bar * len(items) + 40
    parts = [f'<svg id="error-plot" xmlns="http://www.w3.org/2000/svg" width="{left + width + 20}" '
             f'height="{height}" role="img"><title>error / allowed per test (log scale, 1 = tolerance)</title>']
    for i, (h, label, status) in enumerate(items):
        y = top + i * bar
        w = max(1.0, _x_of(h, left, width) - left)
        text = label if len(label) <= 70 else label[:67] + "..."
        parts.append(f'<text x="{label_w}" y="{y + bar - 5}" font-size="10" text-anchor="end">{e(text)}</text>')
        parts.append(f'<rect x="{left}" y="{y + 1}" width="{w:.1f}" height="{bar - 4}" '
                     f'fill="{COLOR.get(status, "#777")}"><title>{e(label)}: error / allowed {e(overview.ratio_text(h))} '
                     f'({e(status)})</title></rect>')
    x1 = _x_of(1.0, left, width)
    axis_y = top + bar * len(items) + 12
    parts.append(f'<line x1="{x1:.1f}" y1="{top}" x2="{x1:.1f}" y2="{axis_y - 10}" stroke="#000" '
                 f'stroke-dasharray="4"/>')
    parts += _log_axis(left, width, axis_y, "worst error / allowed error (log scale; dashed: the tolerance)")
    parts.append("</svg>")
    return "".join(parts)


def _profile_plot(field: dict) -> str:
    """A failed field's error / allowed along its elements (C order, max per bin): where it fails."""
    values = [_finite_ratio(v) for v in field.get("profile") or []]
    values = [v if v is not None else 0.0 for v in values]
    if not values:
        return ""
    width, height, left, top = 520, 150, 50, 10
    plot_h = height - 50
    y_of = lambda v: top + plot_h - (min(max(math.log10(v) if v > 0 else LOG_LO, LOG_LO), LOG_HI) - LOG_LO) \
        / (LOG_HI - LOG_LO) * plot_h   # noqa: E731
    step = width / len(values)
    parts = [f'<svg class="profile" xmlns="http://www.w3.org/2000/svg" width="{left + width + 10}" '
             f'height="{height}" role="img"><title>{e(field.get("name"))}: error / allowed along the elements'
             f'</title>']
    for i, v in enumerate(values):
        y = y_of(v)
        color = COLOR["fail"] if v > 1 else COLOR["pass"]
        parts.append(f'<rect x="{left + i * step:.1f}" y="{y:.1f}" width="{max(step - 0.5, 0.5):.1f}" '
                     f'height="{top + plot_h - y:.1f}" fill="{color}"><title>bin {i}: {e(format(v, ".3g"))}'
                     f'</title></rect>')
    y1 = y_of(1.0)
    parts.append(f'<line x1="{left}" y1="{y1:.1f}" x2="{left + width}" y2="{y1:.1f}" stroke="#000" '
                 f'stroke-dasharray="4"/>')
    for p in (int(LOG_LO), 0, int(LOG_HI)):
        parts.append(f'<text x="{left - 4}" y="{y_of(10.0 ** p) + 3:.1f}" font-size="10" text-anchor="end">'
                     f'1e{p}</text>')
    n = field.get("compared", len(values))
    parts.append(f'<text x="{left + width / 2:.0f}" y="{height - 22}" font-size="11" text-anchor="middle">'
                 f'{e(field.get("name"))}: {len(values)} bins over {e(n)} compared elements (C order, max per bin)'
                 f'</text>')
    parts.append(f'<text x="{left + width / 2:.0f}" y="{height - 8}" font-size="11" text-anchor="middle">'
                 f'error / allowed error (log scale; dashed: the tolerance)</text>')
    parts.append("</svg>")
    return "".join(parts)


def _failures(report: dict) -> str:
    """Each failure (then each xfail): what failed, the diagnosis, the counterexample and the replay
    command first; the whole message, the diagnosis's variations, the error plots, the traceback and the
    backend's output on demand."""
    bad = overview.failures(report)
    bad += [r for r in report["results"] if r["status"] == "xfail"]
    if not bad:
        not_checked = (report.get("gate") or {}).get("not_checked")
        return "<p>No failures." + (" But not everything claimed was checked: see the gate above.</p>"
                                    if not_checked else "</p>")
    out = [_causes(report, {r["id"]: i for i, r in enumerate(bad, 1)})]
    for i, r in enumerate(bad, 1):
        head = (r.get("message") or "").split("\n", 1)[0]
        out.append(f'<div class="fail" id="failure-{i}" data-status="{e(r["status"])}"><h3>{badge(r["status"])} '
                   f'{e(r.get("backend"))} · <code>{e(r.get("op"))}</code> · <code>{e(r["id"].split("::")[-1])}'
                   f'</code> <small>clauses {e(", ".join(r.get("clauses", [])))}</small></h3>')
        if head:
            out.append(f"<p>{e(head)}</p>")
        diagnosis = r.get("diagnosis") or {}
        if diagnosis.get("summary"):
            out.append(f"<p class=diagnosis><b>diagnosis:</b> {e(diagnosis['summary'])}</p>")
        if r.get("counterexample"):
            out.append(f"<p>counterexample: <code>{e(r['counterexample'])}</code></p>")
        if r.get("repro"):
            out.append(f'<p>replay: <code class="replay">{e(overview.replay_command(r))}</code></p>')
        out.append(f"<details class=message><summary>whole message</summary><pre>{e(r.get('message', ''))}</pre>")
        rows = "".join(f"<tr><td>{e(v.get('name'))}</td><td>{e(v.get('outcome'))}</td>"
                       f"<td>{e(v.get('detail', ''))}</td></tr>" for v in diagnosis.get("variations", []))
        if rows:
            out.append(f"<table class=variations><tr><th>variation</th><th>outcome</th><th>detail</th></tr>"
                       f"{rows}</table>")
        out += [_profile_plot(f) for f in r.get("fields") or [] if f.get("profile")]
        if r.get("failure_text"):
            out.append(f"<p>whole message, traceback and output: <code>{e(r['failure_text'])}</code></p>")
        out.append("</details>")
        if r.get("traceback"):   # the message shows where it was raised; the traceback on demand
            out.append(f"<details class=traceback><summary>backend traceback</summary>"
                       f"<pre>{e(r['traceback'])}</pre></details>")
        if r.get("output"):
            out.append(f"<details class=output><summary>backend output ({e(format(r.get('output_bytes', 0), ','))} "
                       f"bytes printed during the failing call)</summary><pre>{e(r['output'])}</pre></details>")
        out.append("</div>")
    return "".join(out)


def _canaries(report: dict) -> str:
    """The platform canaries of each backend that ran in an interpreter (engine/canaries.py), each with its result."""
    from kvconform.conformance.engine import canaries
    parts = []
    for label, desc in (report.get("backends") or {}).items():
        found = desc.get("canaries") if isinstance(desc, dict) else None
        if not found:
            continue
        rows = "".join(f"<tr><td>{e(r.get('what'))}</td><td>{'ok' if r.get('ok') else 'WRONG' if r.get('ok') is False else 'not run'}"
                       f"</td><td>{e(r.get('detail'))}</td></tr>" for r in found)
        parts.append(f"<p><b>{e(label)}</b>: {e(canaries.summary(found))}</p><table class=canaries><tr><th>canary</th>"
                     f"<th>result</th><th>detail</th></tr>{rows}</table>")
    return ('<h2 id="canaries">Platform canaries</h2>' + "".join(parts)) if parts else ""


def _causes(report: dict, anchor: dict) -> str:
    """The failures grouped by cause (causes.py), one row each: count, status, backend and op, cause and
    fingerprint, tests, the smallest counterexample (linked to its failure below) and its replay."""
    from . import causes
    groups = causes.group(report)
    if not groups:
        return ""
    rows = []
    for c in groups:
        r = c.smallest
        names = [causes.short_id(x) for x in c.records]
        tests = ", ".join(e(n) for n in names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        link = f'<a href="#failure-{anchor[r["id"]]}">{e(causes.short_id(r))}</a>' if r["id"] in anchor else \
            e(causes.short_id(r))
        replay = f'<code class="replay">{e(overview.replay_command(r))}</code>' if r.get("repro") else ""
        rows.append(f'<tr data-status="{e(c.status)}"><td>{c.count}</td><td>{badge(c.status)}</td>'
                    f'<td>{e(c.backend)} · <code>{e(c.op)}</code></td><td>{e(c.cause)}'
                    f'{" <small>(" + e(c.fingerprint) + ")</small>" if c.fingerprint else ""}</td>'
                    f'<td><small>{tests}</small></td><td>{link}: <code>{e(r.get("counterexample", ""))}</code>'
                    f'<br>{replay}</td></tr>')
    return ('<table class=causes><tr><th>failures</th><th>status</th><th>where</th><th>cause (fingerprint)</th>'
            '<th>tests</th><th>smallest counterexample, replay</th></tr>' + "".join(rows) + "</table>")


def _totals(report: dict) -> str:
    """Per backend, numerical tests and the errors layer apart; a failure count links to the backend's
    first failure."""
    first: dict = {}
    for i, r in enumerate(overview.failures(report), 1):
        first.setdefault(r.get("backend", "?"), i)

    def counts(backend: str, group: dict) -> str:
        parts = []
        for s in STATUS_ORDER:
            if group.get(s):
                text = f"{badge(s)} {group[s]}"
                if s in FAILED + ("xpass",) and backend in first:
                    text = f'<a href="#failure-{first[backend]}">{text}</a>'
                parts.append(text)
        return " ".join(parts) or "none"

    rows = "".join(f"<tr><td><b>{e(b)}</b></td><td>{counts(b, g.get('numerical', {}))}</td>"
                   f"<td>{counts(b, g.get('errors', {}))}</td></tr>"
                   for b, g in (report.get("counts") or split_counts(report.get("results", []))).items())
    return (f'<table id="totals"><tr><th>backend</th><th>numerical tests</th><th>errors layer (rejection tests)'
            f"</th></tr>{rows}</table>")


def _gate(verdict: dict | None) -> str:
    """The gate's verdict (gate.py) above everything else, with each reason it was not all checked."""
    if not verdict:
        return ""
    code = verdict["exit_code"]
    color = {0: COLOR["pass"], 1: COLOR["fail"]}.get(code, COLOR["xpass"])
    text = {0: "every claimed case checked, none failed", 1: f"{verdict['failures']} failed test(s)",
            3: "nothing failed, but not everything claimed was checked"}.get(code, "")
    items = "".join(f"<li>NOT CHECKED {e(r['message'])}</li>" for r in verdict.get("not_checked", []))
    return (f'<div id="gate" style="border-left:6px solid {color};padding-left:.8em"><b>Gate: '
            f'{e(verdict["verdict"])} (exit {e(code)})</b>: {e(text)}' + (f"<ul>{items}</ul>" if items else "")
            + "</div>")


def _backends(report: dict) -> str:
    out = ["<table id=\"backends\"><tr><th>backend</th><th>version</th><th>device</th><th>ops claimed</th></tr>"]
    for name, d in sorted(report.get("backends", {}).items()):
        out.append(f"<tr><td>{e(name)}</td><td>{e(d.get('version', ''))}</td><td>{e(d.get('device', ''))}"
                   f"</td><td>{e(', '.join(sorted(d.get('capabilities', {}))))}</td></tr>")
    out.append("</table>")
    return "".join(out)


def render(report: dict) -> str:
    unmatched = report.get("expectations", {}).get("unmatched", [])
    um = "".join(f"<li><code>{e(x['test'])}</code> ({e(x['backend'])}): {e(x['reason'])}</li>" for x in unmatched)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>kvconform report</title><style>{CSS}</style></head>
<body>
<h1>kvconform report</h1>
{('<p id="partial" style="background:#fff3e0;border-left:4px solid #ef6c00;padding:.5em"><b>Partial run:</b> '
   + e(report['partial']) + '</p>') if report.get('partial') else ''}
{_gate(report.get("gate"))}
{_totals(report)}
{_canaries(report)}<h2 id="failures">Failures</h2>{_failures(report)}
<h2>Ops</h2>{_ops(report)}
{('<h2>Unmatched expectations</h2><ul id="unmatched">' + um + '</ul>') if um else ''}
{_layers(report)}
<h2>Backends</h2>{_backends(report)}
<h2>Error / allowed per test</h2>{_plot(report)}
<p class="legend">suite {e(report['suite_version'])}, spec {e(report['spec_version'])}, profile
<b>{e(report.get('profile'))}</b>, created {e(report.get('created'))}, Python
{e(report.get('platform', {}).get('python', ''))}</p>
</body></html>
"""
