"""Clause coverage: clauses defined in spec/*.md against the clauses suite tests cite, per layer.

A clause is defined where its id opens a list item, a heading or a bold lead-in of a line
(``- **PA-7** ...``, ``### PA-7``, ``**PA-7.**``, ``PA-7.`` at the start of a line); ids mentioned in
running text are references, not definitions. A clause whose definition text (up to the next definition) contains
``Not testable on a backend:`` followed by the reason is *marked*: it states a definition, a rule of the
suite itself or an identity of the reference, and is counted apart from the covered ones. Tests are found by importing the suite modules and reading
the `conformance_test` marker of each test function (no pytest run needed).
"""
from __future__ import annotations

import importlib
import importlib.util
import re
from importlib import resources
from pathlib import Path

from kvconform.conformance.engine.records import LAYERS
from kvconform.conformance.harness import profiles

_DEF = re.compile(r"^\s*(?:[-*+]\s+|#{1,6}\s+|\d+\.\s+|\|\s*)?(?:\*\*|`)?([A-Z]{2}-[A-Z]*\d+[a-z]?)\b", re.M)


def spec_files() -> dict[str, str]:
    """name -> Markdown text of every spec file (package data, else the repository's spec/)."""
    found: dict[str, str] = {}
    try:
        for entry in resources.files("kvconform.spec").iterdir():
            if entry.name.endswith(".md"):
                found[entry.name] = entry.read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    if not found:
        repo_spec = profiles.CONFORMANCE_DIR.parent / "spec"
        for path in sorted(repo_spec.glob("*.md")):
            found[path.name] = path.read_text(encoding="utf-8")
    return found


def defined_clauses(texts: dict[str, str] | None = None) -> dict[str, str]:
    """clause id -> spec file name, in order of definition."""
    clauses: dict[str, str] = {}
    for name, text in sorted((texts or spec_files()).items()):
        if name == "README.md":
            continue
        for match in _DEF.finditer(text):
            clauses.setdefault(match.group(1), name)
    return clauses


MARK = "Not testable on a backend:"


def marked_clauses(texts: dict[str, str] | None = None) -> dict[str, str]:
    """clause id -> the reason given after `MARK` in its definition (clauses no backend test can check)."""
    marked: dict[str, str] = {}
    for name, text in sorted((texts or spec_files()).items()):
        if name == "README.md":
            continue
        starts = list(_DEF.finditer(text))
        for i, match in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
            body = text[match.start():end]
            at = body.find(MARK)
            if at >= 0:
                rest = body[at + len(MARK):]
                rest = rest.split("*")[0] if "*" in rest else rest.split("\n\n")[0]  # to the italic's end
                reason = " ".join(rest.split()).rstrip(".")
                marked.setdefault(match.group(1), reason)
    return marked


def suite_tests(suite_dir: Path | None = None) -> list[dict]:
    """[{test, module, op, clauses, layer}] for every marked test function of the suite (default: the
    regular suite and the scale profile's, conformance/scale_suite/)."""
    dirs = [Path(suite_dir)] if suite_dir else [profiles.suite_dir("suite"), profiles.suite_dir("scale_suite")]
    tests = []
    for path in sorted(p for d in dirs for p in d.glob("test_*.py")):
        spec = importlib.util.spec_from_file_location(f"_kvconform_suite_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, fn in vars(module).items():
            meta = getattr(fn, "kvconform", None)
            if name.startswith("test_") and isinstance(meta, dict):
                tests.append({"test": name, "module": path.name, **meta})
    return tests


def coverage_table(clauses: dict[str, str], tests: list[dict]) -> dict[str, dict[str, list[str]]]:
    """clause -> layer -> [test names]."""
    table = {c: {layer: [] for layer in LAYERS} for c in clauses}
    for t in tests:
        for c in t["clauses"]:
            table.setdefault(c, {layer: [] for layer in LAYERS})[t["layer"]].append(t["test"])
    return table


def render(table: dict, clauses: dict[str, str], prefixes: tuple[str, ...] = (),
           marked: dict[str, str] | None = None) -> list[str]:
    marked = marked or {}
    ids = [c for c in table if not prefixes or c.split("-")[0] in prefixes]
    ids.sort(key=lambda c: (c.split("-")[0], re.sub(r"\d", "", c), int(re.search(r"\d+", c).group())))
    lines = [f"{'clause':<8} {'spec':<22} " + " ".join(f"{layer:>12}" for layer in LAYERS)]
    for c in ids:
        lines.append(f"{c:<8} {clauses.get(c, '(not in spec)'):<22} " +
                     " ".join(f"{len(table[c][layer]):>12}" for layer in LAYERS))
    untested = [c for c in ids if c in clauses and not any(table[c].values())]
    uncovered = [c for c in untested if c not in marked]
    shown = [c for c in untested if c in marked]
    unknown = [c for c in ids if c not in clauses]
    lines.append(f"{len(ids) - len(uncovered) - len(unknown)}/{len(ids) - len(unknown)} clauses covered"
                 + (f" ({len(shown)} of them marked not testable on a backend)" if shown else ""))
    for c in shown:
        lines.append(f"marked {c}: {marked[c]}")
    if uncovered:
        lines.append("uncovered: " + " ".join(uncovered))
    if unknown:
        lines.append("cited by tests but not defined in spec/: " + " ".join(unknown))
    return lines
