"""Loading the backends of a run, isolated like calling them (issue 26).

A backend is imported, built by its factory and asked for `availability()` and `capabilities()` in its
worker subprocess (worker.py), under the same isolation and call timeout as its op calls: a module that
exits, hangs, segfaults or skips itself while loading, or a factory / availability() that raises, becomes
one line in the description (`load_error`, `claims_error`), never a dead, hanging or green CLI. The claims
are then checked as data (backends/base.py: `description_problems`). Every route loads through here:
`kvconform run` (the plugin's controller loads every backend once, before collection), `check-backend`,
`list`, and the pytest plugin route.

A `Loaded` keeps its worker, so the process that loaded a backend serves its op calls too: loading costs
one worker start per backend and pytest process, as calling does.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any



def backend_problem(description: dict) -> str:
    """Why a backend of the run could not be checked at all ("" when it could): it did not load (import,
    factory, exit, hang, segfault), its claims cannot be read or are invalid, or it cannot run here."""
    if description.get("load_error"):
        return f"could not be loaded: {description['load_error']}"
    if description.get("claims_error"):
        return f"its claims cannot be used: {description['claims_error']}"
    if not description.get("available", True):
        return f"cannot run here: {description.get('reason') or 'no reason given'}"
    return ""


@dataclass
class Loaded:
    """One backend of a run: its description (always a dict with name, available and capabilities; with
    `load_error` or `claims_error` when it cannot be checked) and the worker that serves its calls (None
    when it cannot be checked)."""
    spec: str
    description: dict
    worker: Any = field(default=None, repr=False)

    @property
    def problem(self) -> str:
        """Why the backend cannot be checked here, in words ("" when it can)."""
        return backend_problem(self.description)

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()


#: backends a caller loaded for the session that runs next in this process (`kvconform run` finding the
#: backends that can run here); the plugin takes them instead of loading them again
_HANDED_OVER: dict[str, Loaded] = {}


def hand_over(loaded: Loaded) -> None:
    _HANDED_OVER[loaded.spec] = loaded


def load(spec: str, *, timeout: float, isolated: bool = True) -> Loaded:
    """Load backend `spec` in a worker (or in this process with `isolated=False`: --kvc-isolation none).
    Never raises for a backend that cannot be loaded: its description says why."""
    from kvconform.backends import BackendLoadError
    from kvconform.backends.base import description_problems

    from kvconform.conformance.engine.call_errors import BackendUnavailable, ClaimsUnreadable
    from kvconform.conformance.engine.worker import InProcess, Worker
    handed = _HANDED_OVER.pop(spec, None)
    if handed is not None and getattr(handed.worker, "timeout", timeout) == timeout:
        return handed
    if handed is not None:
        handed.stop()
    worker = None
    try:
        worker = Worker(spec, timeout=timeout) if isolated else InProcess(spec)
        description = worker.describe()
    except ClaimsUnreadable as exc:
        return Loaded(spec, _unusable(spec, claims_error=_without_spec(str(exc), spec)))
    except (BackendUnavailable, BackendLoadError) as exc:
        return Loaded(spec, _unusable(spec, load_error=_without_spec(str(exc), spec)))
    problems = description_problems(description)
    if problems:
        worker.stop()
        return Loaded(spec, dict(_unusable(spec, description, claims_error="; ".join(problems)),
                                 claims_problems=problems))
    return Loaded(spec, dict(description), worker)


def load_all(specs, *, timeout: float, isolated: bool = True) -> dict[str, Loaded]:
    """`load` of each spec, several at once (each waits on its own worker process)."""
    specs = list(dict.fromkeys(specs))
    if len(specs) <= 1 or not isolated:
        return {spec: load(spec, timeout=timeout, isolated=isolated) for spec in specs}
    # most of a load is waiting (a spawned process importing; a hang until the timeout): more threads
    # than CPUs keep a hanging backend from holding up the others
    with ThreadPoolExecutor(max_workers=min(len(specs), max(4, os.cpu_count() or 1))) as pool:
        loaded = list(pool.map(lambda s: load(s, timeout=timeout), specs))
    return dict(zip(specs, loaded))


def _unusable(spec: str, description: Any = None, **problem: str) -> dict:
    """A description for a backend that cannot be checked: what could be read of its own (a valid name and
    version), never claims (they are not used), and the problem."""
    desc = dict(description) if isinstance(description, dict) else {}
    name = desc.get("name")
    return {"name": name if isinstance(name, str) and name.strip() else spec,
            "version": str(desc.get("version", "")), "available": False,
            "reason": backend_problem(problem), "device": "", "capabilities": {}, **problem}


def _without_spec(text: str, spec: str) -> str:
    """A worker's or loader's message without its "backend 'x'" preamble (the report names the backend)."""
    for prefix in (f"cannot load backend {spec!r}: ", f"backend {spec!r}: ", f"backend {spec!r} "):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text
