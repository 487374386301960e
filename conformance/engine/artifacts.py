"""Reproducer directories: what every failure leaves behind, and what `kvconform replay` reads.

    <out>/repro/<case-id>/inputs.npz   the failing (minimal) inputs, raw bits, allow_pickle=False
    <out>/repro/<case-id>/case.json    op, parameters, seed, clauses, tolerance, metrics, message
    <out>/repro/<case-id>/repro.py     a short script: replays the case on the recorded backend
    <out>/repro/<case-id>/failure.txt  the failure's whole texts: message, backend traceback, what the
                                       backend printed during the failing call (records keep them capped)
"""
from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from kvconform.conformance.engine import backend_text
from kvconform.conformance.engine import case as case_io

#: the name of a reproducer's whole-text file
FAILURE_TEXT = "failure.txt"

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
    """The reproducer directory of a failure: its case (and the calls before it), case.json with the
    (capped) message, the rate of its replays (`replays`; also `flaky` for a flaky failure, which
    `kvconform replay` repeats as often),
    repro.py and failure.txt."""
    directory = repro_dir_for(out_dir, nodeid)
    extra = {
        "test": nodeid,
        "backend": record.get("backend_spec"),
        "clauses": record.get("clauses"),
        "layer": record.get("layer"),
        "features": record.get("features"),
        "status": record.get("status"),
        "fields": failure.get("fields", []),
        "message": failure.get("message", ""),
        "diagnosis": failure.get("diagnosis"),
        "flaky": failure.get("flaky"),       # the replays' rate, only for a flaky failure
        "replays": failure.get("replays"),   # the replays' rate of any replayed failure
        "before": [f"before-{i}" for i in range(len(failure.get("before", [])))],
    }
    for i, earlier in enumerate(failure.get("before", [])):   # call history the failure depends on
        case_io.save(earlier, directory / f"before-{i}")
    case_io.save(failure["case"], directory, extra)
    (directory / "repro.py").write_text(_SCRIPT.format(backend=record.get("backend_spec")))
    write_failure_text(directory / FAILURE_TEXT, nodeid, record, failure)
    return directory


def write_failure_text(path: Path, nodeid: str, record: dict, failure: dict) -> None:
    """failure.txt: the failure's message, backend traceback and captured output as kept (each backend text
    at most backend_text.KEPT_CAP, cut with its length in the worker), which the record and the reports
    show capped further."""
    full = failure.get("full_message") or failure.get("message", "")
    rate = failure.get("replays")
    if rate:
        word = "flaky" if failure.get("flaky") else "replayed"
        full = f"{word}: failed {rate['failed']} of {rate['replays']} replays\n{full}"
    limit = 2 * backend_text.KEPT_CAP   # one kept backend text (cut in the worker) and the engine's lines around it
    output = failure.get("output")
    with open(path, "w", errors="replace") as fh:
        fh.write(f"kvconform failure: {nodeid}\nstatus: {record.get('status')}\n\n== message ==\n")
        fh.write(backend_text.cap(full, limit) + "\n")
        if failure.get("traceback"):
            fh.write("\n== backend traceback ==\n" + backend_text.cap(failure["traceback"], limit) + "\n")
        if failure.get("engine_traceback"):   # a crash: where the run's process saw the worker die
            fh.write("\n== the crash in the run's process (pytest's traceback) ==\n"
                     + backend_text.cap(failure["engine_traceback"], limit) + "\n")
        if output is not None and output.path is not None:
            fh.write(f"\n== backend output (stdout and stderr of the failing call, {output.size:,} bytes) ==\n")
    if output is not None and output.path is not None:
        with open(output.path, "rb") as src, open(path, "ab") as dst:
            shutil.copyfileobj(src, dst)
