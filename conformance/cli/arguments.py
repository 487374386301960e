"""Arguments shared by the commands: one-line usage errors (exit 2), --out, --ops, --backend."""
from __future__ import annotations

import tempfile
from pathlib import Path


class UsageError(Exception):
    pass


def _check_out(out: str) -> Path:
    if not out.strip():
        raise UsageError(f"--out {out!r}: must name a folder (kvconform never writes into the current "
                         f"folder unasked; give --out . for that)")
    path = Path(out).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UsageError(f"--out {out} is not writable: {exc.strerror or exc}") from None
    return path


#: pytest-xdist's options (xdist/plugin.py pytest_addoption, 3.8): `kvconform run` starts xdist itself
#: from --jobs, with its own scheduler of work units (plugin.pytest_xdist_make_scheduler); those that take
#: a value, then the flags
XDIST_VALUED = ("-n", "--numprocesses", "--maxprocesses", "--max-worker-restart", "--dist", "--tx", "--px",
                "--rsyncdir", "--rsyncignore", "--testrunuid", "--maxschedchunk")
XDIST_FLAGS = ("-d", "--loadscope-reorder", "--no-loadscope-reorder")


def _refuse_xdist(pytest_args: list[str]) -> None:
    """A pytest-xdist option after `--` (`-n 4`, `-n4`, `--dist=load`, `-p xdist`, `-p no:xdist`):
    UsageError naming it. It would start workers beside --jobs's, or turn off the run's scheduler."""
    for i, arg in enumerate(pytest_args):
        following = pytest_args[i + 1] if i + 1 < len(pytest_args) else ""
        name = arg.split("=", 1)[0]
        attached = arg[:2] in ("-n", "-d") and len(arg) > 2 and arg[2] != "-"     # -n4, -nauto
        plugin = arg.startswith("-p") and "xdist" in (arg[2:] or following)
        if name in XDIST_VALUED or name in XDIST_FLAGS or attached or plugin:
            shown = f"{arg} {following}" if arg in (*XDIST_VALUED, "-p") and following else arg
            raise UsageError(f"pytest-xdist option {shown!r} after --: kvconform run starts its workers itself; "
                             f"--jobs N is the way to run in N processes")


def _parse_ops(text: str | None) -> list[str] | None:
    """--ops: op names separated by commas (None: every op); an empty list or an unknown name is bad input."""
    from kvconform.backends.base import OPS, did_you_mean
    if text is None:
        return None
    ops = list(dict.fromkeys(o.strip() for o in text.split(",") if o.strip()))
    if not ops:
        raise UsageError(f"--ops {text!r} names no op: give op names separated by commas "
                         f"(known: {', '.join(OPS)})")
    unknown = [o for o in ops if o not in OPS]
    if unknown:
        raise UsageError("; ".join(f"--ops: unknown op {o!r}{did_you_mean(o, OPS)}" for o in unknown))
    return ops


def _named_backends(specs: list[str], command: str) -> list[str]:
    """The backends named with --backend, each resolved (bad input: an unknown name, a malformed spec, a
    module that does not exist) and once: a repeat (or a second name of the same factory) is dropped
    with a note, so that no result is counted twice."""
    from kvconform import backends
    kept: dict[str, str] = {}   # spec -> module:factory
    for spec in specs:
        try:
            target = backends.resolve(spec)
        except backends.BackendLoadError as exc:
            raise UsageError(f"argument --backend: {exc}") from None
        twin = next((s for s, t in kept.items() if t == target), None)
        if twin is not None:
            print(f"kvconform {command}: note: --backend {spec} names the same backend as {twin} "
                  f"({target}); it is used once", flush=True)
            continue
        kept[spec] = target
    return list(kept)
