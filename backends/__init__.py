"""Backend registry and loading.

A backend is named either by an entry point of the group ``kvconform.backends`` (``numpy``, ``triton``,
``pallas``, or one a third-party package declares) or by ``package.module:factory`` for a backend that is
not installed as a package. The factory is called without arguments and returns a `base.Backend`.

`resolve()` turns a name into its ``module:factory`` target without importing anything (an unknown name,
a malformed spec or a top-level module that does not exist is bad command-line input). `load()` imports
the module and calls the factory; whatever goes wrong there (an exception, `sys.exit`, `pytest.skip` at
module level) is one `BackendLoadError` line. The engine never calls `load()` in its own process: it runs
in the worker subprocess (conformance/worker.py, conformance/loading.py), so that a hang, a segfault or an
`os._exit` while loading is reported like one in an op call.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
from importlib import metadata

from .base import OPS, Availability, Backend, OpClaims, Unsupported  # noqa: F401  (re-exported)

ENTRY_POINT_GROUP = "kvconform.backends"
_SPEC_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")


class BackendLoadError(Exception):
    """A backend cannot be named or loaded; the message is one line."""


def entry_points() -> dict[str, str]:
    """name -> "module:factory" for every entry point of the group."""
    return {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def resolve(spec: str) -> str:
    """The "module:factory" target of a backend name or spec; raises BackendLoadError if the name is
    unknown, the spec malformed, or its top-level module cannot be found (looked up, not imported)."""
    spec = spec.strip()
    if ":" in spec:
        if not _SPEC_RE.match(spec):
            raise BackendLoadError(f"malformed backend {spec!r}: expected package.module:factory")
        top = spec.split(":")[0].split(".")[0]
        try:
            found = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise BackendLoadError(f"cannot load backend {spec!r}: no module named {top!r} "
                                   f"(check the spec and PYTHONPATH)")
        return spec
    known = entry_points()
    if spec in known:
        return known[spec]
    raise BackendLoadError(f"unknown backend {spec!r}: known backends are {', '.join(sorted(known)) or 'none'}"
                           f" (or give package.module:factory)")


def load(spec: str) -> Backend:
    """Import and build the backend named by `spec` (entry-point name or module:factory).

    Everything a module or factory can do instead of returning a backend becomes a BackendLoadError in
    words: an exception, `sys.exit()` (SystemExit), `pytest.skip` / `pytest.importorskip` at module level
    (pytest's Skipped derives from BaseException). KeyboardInterrupt is not caught."""
    target = resolve(spec)
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - any way of not finishing the import is a load failure
        raise BackendLoadError(f"cannot load backend {spec!r}: importing {module_name} "
                               f"{failure_words(exc)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise BackendLoadError(f"cannot load backend {spec!r}: {module_name} has no callable {attr!r}")
    try:
        backend = factory()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001
        raise BackendLoadError(f"cannot load backend {spec!r}: {target}() {failure_words(exc)}") from None
    for needed in ("name", "capabilities", "availability", "describe"):
        if not hasattr(backend, needed):
            raise BackendLoadError(f"cannot load backend {spec!r}: {target}() returned "
                                   f"{type(backend).__name__}, which lacks {needed!r} (see kvconform.backends.base)")
    return backend


def failure_words(exc: BaseException) -> str:
    """'raised ValueError: ...', 'called sys.exit(0)', 'skipped itself (...)': the end of a load error line."""
    if isinstance(exc, SystemExit):
        return (f"called sys.exit({exc.code!r}): a backend must not end the process (report what is missing "
                f"through availability())")
    # pytest.skip / importorskip / fail / exit: its OutcomeException classes (Skipped claims to be a builtin)
    if any(c.__module__.startswith(("_pytest", "pytest")) for c in type(exc).__mro__):
        call = {"Skipped": "pytest.skip / pytest.importorskip", "Failed": "pytest.fail",
                "Exit": "pytest.exit"}.get(type(exc).__name__, f"pytest ({type(exc).__name__})")
        return (f"called {call} at load time ({_one_line(exc)}): report what is missing through "
                f"availability() instead")
    return f"raised {type(exc).__name__}: {_one_line(exc)}"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
