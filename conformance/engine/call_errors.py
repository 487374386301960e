"""How a backend call can end other than with a result: the backend raised (BackendError), declined the case\n(BackendDeclined), broke the protocol, crashed or hung (BackendCrash), cannot run here; or the engine failed."""
from __future__ import annotations

import os
import traceback

from kvconform.conformance.engine.backend_text import KEPT_CAP, kept
from kvconform.conformance.engine.protocol import plain_text


class BackendCrash(BaseException):
    """The backend process died or hung during a call."""


class BackendError(Exception):
    """The backend raised an exception: a failure on valid input, the expected outcome on malformed input.

    `mro` names the exception's classes (most derived first), so the engine can tell that a backend's own
    `KernelArgumentError(ValueError)` is a ValueError without unpickling the backend's class."""

    def __init__(self, type_name: str, message: str, tb: str = "", mro: tuple[str, ...] = (), site: str = ""):
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message, self.tb, self.site = type_name, message, tb, site
        self.mro = tuple(mro) or (type_name,)


def _error_payload(exc: BaseException) -> tuple:
    """(type name, message, traceback, class names of the MRO, raise site): what BackendError is rebuilt
    from. The traceback is whole, not limited in frames (a limit would keep the outermost frames and drop
    the innermost, where it was raised); the message and the traceback are each cut to what is kept
    (backend_text.kept), here in the worker, so that a 5 MB message neither crosses nor is stored."""
    names = tuple(plain_text(c.__name__) for c in type(exc).__mro__)
    return (plain_text(type(exc).__name__), exception_message(exc), traceback_text(exc), names,
            plain_text(raise_site(exc)))


def exception_message(exc: BaseException) -> str:
    """str(exc) as an exact str (protocol.plain_text: nothing of the backend's crosses to the run's
    process), cut to what is kept (backend_text.kept) before anything else reads it, so that a 5 MB
    message costs no more than a short one; a __str__ that raises is said, not propagated."""
    try:
        text = str(exc)   # the backend's __str__
        return plain_text(kept(str.__str__(text) if type(text) is not str else text))
    except Exception as inner:   # noqa: BLE001 - the backend's __str__ is the backend's code
        return f"(its message could not be read: str() raised {type(inner).__name__})"


def traceback_text(exc: BaseException) -> str:
    """`exc`'s traceback as traceback.format_exc writes it (its causes and contexts too), each exception's
    message cut to a quarter of what is kept (the message itself is kept apart) before it is formatted:
    formatting a 5 MB message took ~30 ms a call, and a cut of the whole would drop the last exception.
    TracebackException holds the message as `_str` (CPython Lib/traceback.py, 3.8 to 3.13); without it,
    the whole text is formatted and then cut."""
    try:
        top = traceback.TracebackException.from_exception(exc)
        pending, seen = [top], set()
        while pending:
            part = pending.pop()
            if id(part) in seen:
                continue
            seen.add(id(part))
            if isinstance(getattr(part, "_str", None), str):
                part._str = kept(part._str, KEPT_CAP // 4)
            pending += [p for p in (part.__cause__, part.__context__, *(getattr(part, "exceptions", None) or ()))
                        if p is not None]
        text = "".join(top.format())
    except Exception:   # noqa: BLE001 - a __str__ of the backend's that raises, a layout of another Python
        text = traceback.format_exc()
    return plain_text(kept(text))


def exception_line(message: str) -> str:
    """The real error of a backend exception's message: the message itself, or, for a message that holds a
    traceback (an error re-raised from the backend's own subprocess, which starts at `spawn_main`), its
    last line."""
    lines = [line for line in message.splitlines() if line.strip()]
    if len(lines) > 1 and any(line.startswith("Traceback (most recent call last)") for line in lines):
        return lines[-1].strip()
    return message


def raise_site(exc: BaseException, frames: int = 4) -> str:
    """The innermost frames of where `exc` was raised, innermost first ("raised in kernel (k.py:12) <-
    launch (k.py:30) ..."); "" without a traceback."""
    sites = [_site(f.filename, f.lineno, f.name) for f in traceback.extract_tb(exc.__traceback__)[-frames:]]
    return "raised in " + " <- ".join(reversed(sites)) if sites else ""


def _site(path: str, lineno, func: str) -> str:
    """One frame as the crash and raise sites show it: `func (file.py:line)`."""
    return f"{func.strip()} ({os.path.basename(path)}:{lineno})"


class BackendProtocolError(Exception):
    """The backend returned something outside the protocol (protocol.ProtocolViolation: a list, a generator,
    an array that cannot be converted): a failure of the case, said in those words."""


class BackendDeclined(Exception):
    """The backend raised `kvconform.Unsupported` for a call: the message is its reason. The harness
    decides whether that is `unsupported` (a case outside the claims) or a failure (inside them)."""


class BackendUnavailable(Exception):
    """The backend could not be loaded in the worker."""


class EngineError(Exception):
    """The engine failed on what the backend returned (inspecting or converting it): the suite's error,
    recorded as `error`, never as the backend raising."""


class ClaimsUnreadable(BackendUnavailable):
    """The backend loaded, but describe() (its availability or capabilities) raised: nothing can be
    checked, and a run must not end green (the error is the message)."""
