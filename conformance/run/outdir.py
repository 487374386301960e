"""A run's output folder (`--out` / `--kvc-out`): what in it is kvconform's, one run at a time, a new run
replacing an earlier run's files, run.json (the options `--resume` restores, and how the run ended), a
results.jsonl whose last line a kill cut short, and files written whole or not at all.

kvconform's own files in a folder: results.jsonl, run.json, report.json, report.md, report.html,
junit.xml, backends/*.json (the backends' descriptions), canaries/canaries-<platform>.json (engine/canaries.py),
repro/<id>/ (a reproducer: a directory holding a
kvconform case.json), the lock `.kvconform.lock` and a half-written `.<name>.<pid>.kvconform-tmp`. A new run
(without resume) deletes these and nothing else: a user's files in the folder, and Hypothesis's example
database `hypothesis-db/` (the thorough profile's; it only makes a run retry examples that failed before,
and never changes a verdict), stay. A folder that holds files but no earlier run (no run.json or
results.jsonl) is refused (refuse_foreign): a run's report.md would replace a user's file of that name.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shutil
from pathlib import Path

RESULTS = "results.jsonl"
RUN = "run.json"
LOCK = ".kvconform.lock"
REPORTS = ("report.json", "report.md", "report.html", "junit.xml")
TMP_SUFFIX = ".kvconform-tmp"
#: files of an earlier run a new run deletes (`.pytest.ini`: what `kvconform run` once wrote here)
OWNED_FILES = (RESULTS, RUN, *REPORTS, ".pytest.ini")

#: the options of a run that `--resume` restores from run.json (the names of `kvconform run`'s options)
RESUMED = ("profile", "backends", "ops", "seed", "timeout", "expectations", "run_unclaimed", "max_crashes")


class FolderError(Exception):
    """The folder cannot be used as asked (in use by another run, nothing to resume, conflicting options,
    not clearable); the message is one line."""


# --- one run at a time -------------------------------------------------------------------------------

_held: dict[Path, object] = {}


def lock(out: Path) -> None:
    """Take `out`'s lock for this process (again in the same process: nothing to do; released when the
    process ends, however it ends). Another process's run into the same folder gets FolderError at once:
    two runs appending to one results.jsonl would lose and mix records, and a CI job waiting on another
    for the length of a run is rarely what was meant."""
    key = Path(out).resolve()
    if key in _held:
        return
    try:
        import fcntl
    except ImportError:   # pragma: no cover - not POSIX: no lock
        return
    handle = open(key / LOCK, "a+")  # noqa: SIM115 - held open for the life of the run
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise FolderError(f"{key} is in use by another kvconform run ({holder}); wait for it to end or give "
                          f"another output folder") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, since {_now()}\n")
    handle.flush()
    _held[key] = handle


def unlock(out: Path) -> None:
    handle = _held.pop(Path(out).resolve(), None)
    if handle is not None:
        handle.close()


# --- a new run replaces an earlier one ------------------------------------------------------------------

def foreign_entry(out: Path) -> str | None:
    """The name of a file or folder in `out` that kvconform did not write, when no earlier run or merge wrote
    there (no run.json, no results.jsonl, no report.json of kvconform's schema): a run would write
    report.md or junit.xml over a user's own file of that name, so such a folder is refused. None for a
    new or empty folder, or one an earlier run or `report merge` wrote (its other files stay, see clear)."""
    out = Path(out)
    if not out.is_dir() or (out / RUN).exists() or (out / RESULTS).exists() \
            or str((_json(out / "report.json") or {}).get("schema", "")).startswith("kvconform.report/"):
        return None
    return next((p.name for p in sorted(out.iterdir()) if p.name != LOCK and not p.name.endswith(TMP_SUFFIX)),
                None)


def refuse_foreign(out: Path, flag: str) -> None:
    """FolderError (one line naming `flag` and one such file) for a folder holding files kvconform did
    not write and no earlier run (foreign_entry)."""
    name = foreign_entry(out)
    if name is not None:
        raise FolderError(f"{flag} {out}: holds {name!r}, which kvconform did not write, and no earlier run "
                          f"(run.json): give a new or empty folder, or the folder of an earlier run or merge")


def clear(out: Path) -> None:
    """Delete an earlier run's files from `out` (see the module docstring); FolderError if one cannot be."""
    out = Path(out)
    try:
        for name in OWNED_FILES:
            _unlink(out / name)
        for path in [*out.glob(f".*{TMP_SUFFIX}"), *out.glob(f"backends/.*{TMP_SUFFIX}")]:
            _unlink(path)
        described = out / "backends"
        if described.is_dir():
            for path in described.glob("*.json"):
                if "spec" in (_json(path) or {}):
                    _unlink(path)
            _rmdir_if_empty(described)
        cached = out / "canaries"      # engine/canaries.py's copies of the platform canaries' results
        if cached.is_dir():
            for path in cached.glob("canaries-*.json"):
                _unlink(path)
            _rmdir_if_empty(cached)
        repro = out / "repro"
        if repro.is_dir():
            for directory in repro.iterdir():
                if directory.is_dir() and is_reproducer(directory):
                    shutil.rmtree(directory)
            _rmdir_if_empty(repro)
    except OSError as exc:
        raise FolderError(f"cannot clear the earlier run's files from {out}: {exc.strerror or exc} "
                          f"({exc.filename or out})") from None


def is_reproducer(directory: Path) -> bool:
    from kvconform.conformance.engine.case import CASE_SCHEMA
    return (_json(directory / "case.json") or {}).get("schema") == CASE_SCHEMA


def _json(path: Path):
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _rmdir_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:   # not empty: someone else's files
        pass


# --- run.json -------------------------------------------------------------------------------------------

def read_run(out: Path) -> dict | None:
    """run.json of the run in `out`, None if there is none (or it cannot be read)."""
    return _json(Path(out) / RUN)


def resumed_options(out: Path, given: dict, shard: str | None = None) -> dict:
    """The options of a resumed run: each of RESUMED as run.json saved it, unless given (None: not given).

    A given option that differs from the saved one is a FolderError naming both: a resumed run that
    silently used other options would report a mix of two runs under one header. `shard` is not
    restored: a shard's folder may be resumed as the whole run; resumed as another shard (`shard`, this
    invocation's I/N, differs from the saved one) it is a FolderError: the folder would hold two shards'
    results under one shard's name."""
    run = read_run(out)
    if run is None or not isinstance(run.get("options"), dict):
        raise FolderError(f"--resume: {out} holds no run to continue (no readable run.json); start a new run "
                          f"without --resume")
    if shard is not None and run.get("shard") is not None and str(run["shard"]) != str(shard):
        raise FolderError(f"--resume continues shard {run['shard']} in {out}; --shard {shard} differs: resume "
                          f"it as shard {run['shard']} (or the whole run, without --shard), or give shard "
                          f"{shard} its own --out")
    saved = run["options"]
    merged = {}
    for name in RESUMED:
        value, kept = given.get(name), saved.get(name)
        if value is None or (name == "run_unclaimed" and value is False):
            merged[name] = kept
        elif _same(name, value, kept):
            merged[name] = value
        else:
            flag = "--" + name.replace("_", "-").removesuffix("s") if name in ("backends", "expectations") \
                else "--" + name.replace("_", "-")
            raise FolderError(f"--resume continues the run in {out}, made with {flag} {_shown(kept)}; "
                              f"{_shown(value)} differs: leave {flag} out, or start a new run without --resume")
    return merged


def _same(name: str, a, b) -> bool:
    if name in ("backends", "ops", "expectations"):
        return sorted(a or []) == sorted(b or [])
    if name == "timeout":
        return a is not None and b is not None and math.isclose(float(a), float(b))
    return a == b


def _shown(value) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "(none)"
    return "(none)" if value is None else str(value)


def started_run(out: Path, meta: dict, resume: bool) -> dict:
    """Write run.json at the start of a run: `meta` (profile, backends, expectations, shard, seed,
    options) with status "running"; a resumed run keeps the saved options and its start. Returns it."""
    saved = read_run(out) if resume else None
    if saved is None or not isinstance(saved.get("options"), dict):   # a new run, or nothing to keep
        run = dict(meta)
    else:   # the resumed run's options stay (they were restored from here); the shard is this one's
        run = dict(saved, shard=meta.get("shard"))
    run.setdefault("started", _now())
    run.update(status="running", stopped=None, finished=None)
    if resume:
        run["resumed"] = run.get("resumed", 0) + 1
    write_atomic(Path(out) / RUN, json.dumps(run, indent=2, default=str) + "\n")
    return run


def finished_run(out: Path, run: dict, stopped: str | None, status: str) -> dict:
    """run.json at the end: `status` "complete", "interrupted" (a signal), "cut short" (a write failed) or
    "stopped" (-x, --maxfail), `stopped` the reason.
    Returns the dict even when it cannot be written (a full disk): the reports still say it."""
    run = dict(run, status=status, stopped=stopped, finished=_now())
    try:
        write_atomic(Path(out) / RUN, json.dumps(run, indent=2, default=str) + "\n")
    except OSError:
        pass
    return run


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# --- results.jsonl ------------------------------------------------------------------------------------

def repair_results(path: Path) -> bool:
    """Make results.jsonl end with a newline before a resumed run appends to it: a last line a kill cut
    short is dropped (its test runs again), a whole last record missing only its newline gets one (a
    record appended to a torn line would be lost with it). Returns True when the file was changed."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return False
    if not data or data.endswith(b"\n"):
        return False
    cut = data.rfind(b"\n") + 1
    try:
        json.loads(data[cut:])
    except ValueError:
        with open(path, "rb+") as fh:
            fh.truncate(cut)
    else:
        with open(path, "ab") as fh:
            fh.write(b"\n")
    return True


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (a full disk leaves the earlier file, never a truncated
    one): written beside it, then renamed over it. Raises OSError (the half-written file is removed)."""
    path = Path(path)
    # this process's own: the xdist processes of one run write the same backend description at once
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError:
        _unlink_quietly(tmp)
        raise


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
