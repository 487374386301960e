"""Backend calls in a worker subprocess, so that a segfault, an abort or a hang becomes a `crash` result.

One `Worker` per backend: a spawned process that loads the backend once and then serves requests over a
pipe (arrays travel pickled between our own two processes; nothing is unpickled from disk). A call that
does not answer within its timeout, or a worker that dies, raises `BackendCrash`; the next call starts a
fresh worker. An exception raised by the backend comes back as `BackendError` with its type and message,
`kvconform.Unsupported` as `BackendDeclined` with the backend's reason, and a result outside the protocol (a
list, a generator, an array that cannot be converted) as `BackendProtocolError`, saying so. Results are
converted, and inputs checked for mutation and aliasing, by conformance/protocol.py.

`BackendCrash` derives from BaseException on purpose: Hypothesis then stops at once instead of shrinking
(each shrink step would restart a worker), and the case that crashed is reported as it was drawn.
"""
from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import tempfile
import time
import traceback
from typing import Any, NamedTuple

from .protocol import ALIAS, InputSnapshot, ProtocolViolation, aliased_inputs, protocol_outputs  # noqa: F401


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


class ClaimsUnreadable(BackendUnavailable):
    """The backend loaded, but describe() (its availability or capabilities) raised: nothing can be
    checked, and a run must not end green (the error is the message)."""


def _serve(conn, spec: str, fault_path: str | None = None) -> None:
    """Worker main loop (runs in the child). A fatal signal dumps the Python stacks to `fault_path`, so
    that a crash report can say where the backend died (the process itself can tell nobody)."""
    if fault_path is not None:
        fault_file = open(fault_path, "w")  # noqa: SIM115 - must stay open for the life of the process
        faulthandler.enable(file=fault_file, all_threads=True)
    from kvconform import backends
    from kvconform.backends.base import Unsupported
    try:
        backend = backends.load(spec)
    except Exception as exc:  # BackendLoadError
        conn.send(("error", (type(exc).__name__, str(exc), "")))
        return
    try:
        conn.send(("ok", backend.describe()))
    except Exception as exc:  # availability() or capabilities() raised: the claims cannot be read
        conn.send(("claims-error", (type(exc).__name__, str(exc), traceback.format_exc(limit=6))))
        return
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        op, kwargs = request
        served = time.perf_counter()
        try:
            before = InputSnapshot(kwargs)
            started = time.perf_counter()
            result = getattr(backend, op)(**kwargs)
            backend_seconds = time.perf_counter() - started
            try:   # converted before pickling, which a generator or a device tensor would not survive
                outputs = protocol_outputs(result)
            except ProtocolViolation as exc:
                conn.send(("protocol", str(exc)))
                continue
            mutated = before.mutated(kwargs) + aliased_inputs(result, kwargs)
            result = outputs
            timing = (backend_seconds, time.perf_counter() - served - backend_seconds)
            conn.send(("ok", (result, mutated, timing)))
        except Unsupported as exc:
            conn.send(("declined", str(exc)))
        except Exception as exc:
            conn.send(("error", _error_payload(exc)))


class CallTiming(NamedTuple):
    """Where the seconds of one backend call went (engine throughput, benchmarks/engine_throughput.py).

    backend: inside the backend's method; guard: the engine's purity checks around it in the worker
    (input copies for the mutation check, the aliasing check, output conversion); transport: the rest of
    the round trip (pickling the case's arrays there and the result back, the pipe, waking the worker).
    A call that raised or declined counts its whole round trip as backend time."""
    backend: float
    guard: float
    transport: float


class Worker:
    """A restartable backend process. `call` returns (result, mutated input names); `last_timing` is the
    CallTiming of the last call that returned."""

    def __init__(self, spec: str, *, timeout: float = 120.0, start_timeout: float = 300.0):
        self.spec, self.timeout, self.start_timeout = spec, timeout, start_timeout
        self._proc = None
        self._conn = None
        self._fault_path: str | None = None
        self.description: dict | None = None
        self.restarts = 0
        self.last_timing: CallTiming | None = None

    def start(self) -> dict:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        fd, self._fault_path = tempfile.mkstemp(prefix="kvconform-fault-", suffix=".txt")
        os.close(fd)
        proc = ctx.Process(target=_serve, args=(child, self.spec, self._fault_path), daemon=True,
                           name=f"kvconform-{self.spec}")
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        if not parent.poll(self.start_timeout):
            self.stop()
            raise BackendUnavailable(f"backend {self.spec!r} did not start within {self.start_timeout:.0f} s")
        try:
            status, payload = parent.recv()
        except EOFError:
            code = proc.exitcode
            self.stop()
            raise BackendUnavailable(f"backend {self.spec!r} worker died while loading (exit code {code})")
        if status == "claims-error":
            self.stop()
            raise ClaimsUnreadable(f"{payload[0]}: {payload[1]}")
        if status != "ok":
            self.stop()
            raise BackendUnavailable(payload[1])
        self.description = payload
        return payload

    def describe(self) -> dict:
        if self.description is None:
            self.start()
        return self.description

    def call(self, op: str, kwargs: dict, timeout: float | None = None):
        if self._proc is None or not self._proc.is_alive():
            if self._proc is not None:
                self.restarts += 1
            self.start()
        limit = self.timeout if timeout is None else timeout
        started = time.monotonic()
        self.last_timing = None
        try:
            self._conn.send((op, kwargs))
            if not self._conn.poll(limit):
                self.stop()
                raise BackendCrash(f"hang: {op} did not return within {limit:.0f} s (worker killed)")
            status, payload = self._conn.recv()
            if status != "ok":   # a raise or a refusal: its whole (small) round trip counts as the backend's
                self.last_timing = CallTiming(time.monotonic() - started, 0.0, 0.0)
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            code = self._proc.exitcode if self._proc is not None else None
            if code is None and self._proc is not None:
                self._proc.join(timeout=2)
                code = self._proc.exitcode
            where = crash_site(self._fault_path)
            self.stop()
            raise BackendCrash(f"{op}: worker process died ({_describe_exit(code)}) after "
                               f"{time.monotonic() - started:.1f} s" + (f"; {where}" if where else "")) from None
        if status == "error":
            raise BackendError(*payload)
        if status == "declined":
            raise BackendDeclined(payload)
        if status == "protocol":
            raise BackendProtocolError(payload)
        result, mutated, (backend_seconds, guard_seconds) = payload
        round_trip = time.monotonic() - started
        self.last_timing = CallTiming(backend_seconds, guard_seconds,
                                      max(0.0, round_trip - backend_seconds - guard_seconds))
        return result.value(), mutated

    def stop(self) -> None:
        if self._conn is not None:
            try:
                if self._proc is not None and self._proc.is_alive():
                    self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._conn.close()
        if self._proc is not None:
            self._proc.join(timeout=1)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(timeout=5)
        if self._fault_path is not None:
            try:
                os.unlink(self._fault_path)
            except OSError:
                pass
        self._proc = self._conn = self._fault_path = None


def crash_site(fault_path: str | None, frames: int = 4) -> str:
    """The innermost Python frames of the thread that received the fatal signal, from faulthandler's dump
    ("crashed in f (file:line) <- g (file:line) ..."); "" when nothing was dumped (a SIGKILL, say)."""
    if not fault_path:
        return ""
    try:
        with open(fault_path, errors="replace") as fh:
            text = fh.read()
    except OSError:
        return ""
    # faulthandler prints the current thread first: 'Current thread 0x... (most recent call first):'
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Current thread")), None)
    if start is None:
        start = next((i for i, line in enumerate(lines) if line.startswith("Thread ")), None)
    if start is None:
        return ""
    sites = []
    for line in lines[start + 1:]:
        line = line.strip()
        if not line.startswith("File "):
            break
        # 'File "/path/mod.py", line 12 in func'
        path, _, rest = line[len('File "'):].partition('", line ')
        lineno, _, func = rest.partition(" in ")
        sites.append(_site(path, lineno, func))
        if len(sites) == frames:
            break
    return "crashed in " + " <- ".join(sites) if sites else ""


def _describe_exit(code) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        import signal
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class InProcess:
    """Same interface as Worker without a subprocess (used by `replay --no-isolation` and by tests)."""

    def __init__(self, spec: str):
        from kvconform import backends
        self.spec = spec
        self.backend = backends.load(spec)
        try:
            self.description = self.backend.describe()
        except Exception as exc:
            raise ClaimsUnreadable(f"{type(exc).__name__}: {exc}") from None
        self.restarts = 0
        self.last_timing: CallTiming | None = None

    def describe(self) -> dict:
        return self.description

    def call(self, op: str, kwargs: dict, timeout: float | None = None):
        from kvconform.backends.base import Unsupported
        self.last_timing = None
        before = InputSnapshot(kwargs)
        try:
            started = time.perf_counter()
            try:
                result = getattr(self.backend, op)(**kwargs)
            finally:
                self.last_timing = CallTiming(time.perf_counter() - started, 0.0, 0.0)
        except Unsupported as exc:
            raise BackendDeclined(str(exc)) from None
        except Exception as exc:
            raise BackendError(*_error_payload(exc)) from None
        try:
            outputs = protocol_outputs(result)
        except ProtocolViolation as exc:
            raise BackendProtocolError(str(exc)) from None
        return outputs.value(), before.mutated(kwargs) + aliased_inputs(result, kwargs)

    def stop(self) -> None:
        pass


def pid_of(worker) -> int | None:
    proc = getattr(worker, "_proc", None)
    return proc.pid if proc is not None else os.getpid()
