"""Latitudes of the spec: every clause whose text grants one has a permission backend or a written reason.

A *latitude unit* is a clause (its definition, up to the next definition or heading) or the text of a
section outside any clause (named `file "Heading"`), whose text says "may", "is allowed", "either",
"unspecified", "any value", "never compared", "not compared", "need not" or "in any order" (`WORDS`). The list is derived from the spec's text, never kept by hand, so a
new clause with "may" shows up as a gap until a permission backend takes it (its row in spec/numerics.md
"Permissions", or the backend's `clause`, names the unit) or spec/numerics.md "Latitudes no backend takes"
says why none is needed (the word describes the inputs, an error, a claim tested elsewhere, ...).
"""
from __future__ import annotations

import re

from .coverage import _DEF, permission_table, spec_files

#: the words that may grant a latitude (case-insensitive)
WORDS = re.compile(r"\bmay\b|\bis allowed\b|\beither\b|\bunspecified\b|\bany value\b|\bnever compared\b"
                   r"|\bnot compared\b|\bneed not\b|\bin any order\b", re.I)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)
#: the sections of spec/numerics.md that list latitudes (they are the lists, not latitudes)
LIST_SECTIONS = ("Permissions", "Latitudes no backend takes")
_REASON_ROW = re.compile(r"^\|\s*(?!where\b|---)([^\s|].*?)\s*\|\s*(.+?)\s*\|\s*$", re.M)


def latitude_units(texts: dict[str, str] | None = None) -> dict[str, str]:
    """unit -> the first sentence fragment (about 160 characters) around its first latitude word.

    unit: a clause id (`PA-19`) or `file "Heading"` for text outside any clause (`rotation.md "Unspecified"`).
    """
    units: dict[str, str] = {}
    for name, text in sorted((texts or spec_files()).items()):
        if name == "README.md":
            continue
        defs = list(_DEF.finditer(text))
        lines = {text.count("\n", 0, m.start(1)) for m in defs}    # a heading that defines a clause is the clause
        starts = sorted([(m.start(), m.group(1)) for m in defs]
                        + [(m.start(), f'{name} "{m.group(1)}"') for m in _HEADING.finditer(text)
                           if text.count("\n", 0, m.start()) not in lines])
        for i, (at, unit) in enumerate(starts):
            if name == "numerics.md" and unit in {f'numerics.md "{h}"' for h in LIST_SECTIONS}:
                continue
            body = text[at:starts[i + 1][0] if i + 1 < len(starts) else len(text)]
            hit = WORDS.search(body)
            if hit and unit not in units:
                units[unit] = " ".join(body[max(0, hit.start() - 80):hit.end() + 80].split())
    return units


def latitude_reasons(texts: dict[str, str] | None = None) -> dict[str, str]:
    """unit -> reason, from the table of spec/numerics.md "Latitudes no backend takes" (| where | why |);
    a clause is written as a link, `[PA-5](paged_attention.md)` (a bare id opening a row would define it)."""
    text = (texts or spec_files()).get("numerics.md", "")
    marker = "\n## Latitudes no backend takes"
    section = text.split(marker, 1)[1].split("\n## ", 1)[0] if marker in text else ""
    return {re.sub(r"^\[(.+)\]\(.*\)$", r"\1", m.group(1)): m.group(2) for m in _REASON_ROW.finditer(section)}


def _names(unit: str, granted: str) -> bool:
    """Whether a `granted by` text names `unit` (a clause id as a whole word, a section by its full name)."""
    if '"' in unit:
        return unit in granted
    return re.search(rf"(?<![A-Z0-9-]){re.escape(unit)}(?![0-9a-z])", granted) is not None


def latitude_table(texts: dict[str, str] | None = None) -> list[dict]:
    """[{unit, excerpt, backends, reason}] for every latitude unit, in spec order.

    backends: the permission backends (module:Class) whose permission row or own `clause` names the unit;
    reason: the written reason when no backend is needed ("" when none). A unit with neither is a gap.
    """
    from kvconform.conformance.permissions import all_permissions
    texts = texts or spec_files()
    grants = [(row["clauses"], row["backends"]) for row in permission_table(texts) if row["backends"]]
    grants += [(p.clause, [p.spec]) for p in all_permissions()]
    reasons = latitude_reasons(texts)
    rows = []
    for unit, excerpt in latitude_units(texts).items():
        backends = sorted({b for granted, specs in grants if _names(unit, granted) for b in specs})
        rows.append({"unit": unit, "excerpt": excerpt, "backends": backends, "reason": reasons.get(unit, "")})
    return rows


def render_latitudes(rows: list[dict], reasons: dict[str, str]) -> list[str]:
    """Summary lines for `kvconform coverage`: counts, then the gaps and stale reasons by name."""
    taken = [r for r in rows if r["backends"]]
    explained = [r for r in rows if not r["backends"] and r["reason"]]
    gaps = [r["unit"] for r in rows if not r["backends"] and not r["reason"]]
    stale = sorted(set(reasons) - {r["unit"] for r in rows})
    lines = [f"{len(rows) - len(gaps)}/{len(rows)} spec texts that grant a latitude (\"may\", \"not compared\", ...)"
             f" have a permission backend ({len(taken)}) or a written reason ({len(explained)})"]
    if gaps:
        lines.append("latitudes with neither (gaps): " + "; ".join(gaps))
    if stale:
        lines.append("reasons for texts that grant no latitude (stale): " + "; ".join(stale))
    return lines
