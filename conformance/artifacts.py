"""Reproducer directories: what every failure leaves behind, and what `kvconform replay` reads.

    <out>/repro/<case-id>/inputs.npz   the failing (minimal) inputs, raw bits, allow_pickle=False
    <out>/repro/<case-id>/case.json    op, parameters, seed, clauses, tolerance, metrics, message
    <out>/repro/<case-id>/repro.py     a short script: replays the case on the recorded backend
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from . import case as case_io

_SCRIPT = '''\
"""Reproducer written by kvconform: re-runs one failing case and prints the per-element diff summary.

    python repro.py [--backend SPEC]        (default backend: {backend!r})
"""
import pathlib
import sys

from kvconform.conformance.cli import main

if __name__ == "__main__":   # the backend's worker is spawned: it re-imports this file as __mp_main__
    here = pathlib.Path(__file__).resolve().parent
    args = sys.argv[1:] or ["--backend", {backend!r}]
    sys.exit(main(["replay", str(here), *args]))
'''


def case_id(nodeid: str) -> str:
    """A file-system-safe, still readable id for a test item (hash suffix keeps it unique)."""
    name = nodeid.split("::", 1)[-1]
    safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).strip("_")[:80]
    return f"{safe}-{hashlib.sha1(nodeid.encode()).hexdigest()[:8]}"


def repro_dir_for(out_dir, nodeid: str) -> Path:
    return Path(out_dir) / "repro" / case_id(nodeid)


def write_reproducer(out_dir, nodeid: str, failure: dict, record: dict) -> Path:
    directory = repro_dir_for(out_dir, nodeid)
    extra = {
        "test": nodeid,
        "backend": record.get("backend_spec"),
        "clauses": record.get("clauses"),
        "layer": record.get("layer"),
        "features": record.get("features"),
        "fields": failure.get("fields", []),
        "message": failure.get("message", ""),
        "diagnosis": failure.get("diagnosis"),
        "before": [f"before-{i}" for i in range(len(failure.get("before", [])))],
    }
    for i, earlier in enumerate(failure.get("before", [])):   # call history the failure depends on
        case_io.save(earlier, directory / f"before-{i}")
    case_io.save(failure["case"], directory, extra)
    (directory / "repro.py").write_text(_SCRIPT.format(backend=record.get("backend_spec")))
    return directory
