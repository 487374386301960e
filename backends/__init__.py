"""Backend registry and discovery.

A backend is named either by an entry point of the group ``kvconform.backends`` (``numpy``, ``triton``,
``pallas``, or one a third-party package declares) or by ``package.module:factory`` for a backend that is
not installed as a package. The factory is called without arguments and returns a `base.Backend`.

Loading never raises for a backend that is merely broken or missing: `discover()` returns one
`Found` per name with either the backend or the reason it cannot be loaded, which `kvconform list` shows.
Only `load()` raises, with `BackendLoadError` (one clear line) for the CLI to print.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from importlib import metadata

from .base import OPS, Availability, Backend, OpClaims, Unsupported  # noqa: F401  (re-exported)

ENTRY_POINT_GROUP = "kvconform.backends"
_SPEC_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")


class BackendLoadError(Exception):
    """A backend named on the command line cannot be loaded; the message is one line."""


@dataclass
class Found:
    """One discovered backend: `backend` is set when it loaded, else `error` says why not."""
    name: str
    target: str                    # "module:factory"
    backend: Backend | None = None
    error: str = ""


def entry_points() -> dict[str, str]:
    """name -> "module:factory" for every entry point of the group."""
    return {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def resolve(spec: str) -> str:
    """The "module:factory" target of a backend name or spec; raises BackendLoadError if unknown."""
    spec = spec.strip()
    if ":" in spec:
        if not _SPEC_RE.match(spec):
            raise BackendLoadError(f"malformed backend {spec!r}: expected package.module:factory")
        return spec
    known = entry_points()
    if spec in known:
        return known[spec]
    raise BackendLoadError(f"unknown backend {spec!r}: known backends are {', '.join(sorted(known)) or 'none'}"
                           f" (or give package.module:factory)")


def load(spec: str) -> Backend:
    """Import and build the backend named by `spec` (entry-point name or module:factory)."""
    target = resolve(spec)
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or any error raised while importing the module
        raise BackendLoadError(f"cannot load backend {spec!r}: importing {module_name} failed: "
                               f"{type(exc).__name__}: {_one_line(exc)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise BackendLoadError(f"cannot load backend {spec!r}: {module_name} has no callable {attr!r}")
    try:
        backend = factory()
    except Exception as exc:
        raise BackendLoadError(f"cannot load backend {spec!r}: {target}() raised "
                               f"{type(exc).__name__}: {_one_line(exc)}") from None
    for needed in ("name", "capabilities", "availability", "describe"):
        if not hasattr(backend, needed):
            raise BackendLoadError(f"cannot load backend {spec!r}: {target}() returned "
                                   f"{type(backend).__name__}, which lacks {needed!r} (see kvconform.backends.base)")
    return backend


def discover(extra: list[str] | tuple[str, ...] = ()) -> list[Found]:
    """Every entry-point backend plus `extra` specs, each loaded or with the reason it cannot be."""
    found = []
    names = list(entry_points()) + [s for s in extra if s not in entry_points()]
    for name in names:
        try:
            target = resolve(name)
        except BackendLoadError as exc:
            found.append(Found(name, name, error=str(exc)))
            continue
        try:
            found.append(Found(name, target, backend=load(name)))
        except BackendLoadError as exc:
            found.append(Found(name, target, error=str(exc).split(": ", 1)[-1]))
    return found


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
