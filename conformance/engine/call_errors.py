"""How a backend call can end other than with a result: the backend raised (BackendError), declined the case\n(BackendDeclined), broke the protocol, crashed or hung (BackendCrash), cannot run here; or the engine failed."""
from __future__ import annotations

import os
import traceback


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
    from. The traceback is whole: a limit would keep the outermost frames and drop the innermost, where
    it was raised."""
    names = tuple(c.__name__ for c in type(exc).__mro__)
    return type(exc).__name__, str(exc), traceback.format_exc(), names, raise_site(exc)


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
