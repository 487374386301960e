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
