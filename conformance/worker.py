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

**Process group.** The worker starts a session of its own (`os.setsid`), so every process a backend
spawns (a compile server, a pool) is in the worker's process group, and stopping the worker — at a
timeout, after a crash, at the end of a run — kills the whole group (`os.killpg`). A worker whose parent
dies (the run was SIGKILLed) kills its group itself within a second. Being its own session, the worker
does not get the terminal's Ctrl-C: the run decides when it stops.

**Output.** The worker's stdout and stderr (file descriptors 1 and 2, so C extensions' output too) go
to a file emptied before each call, not to the run's terminal: `Worker.output()` is what the backend
printed during the last call, capped for records (backend_text.py) with the whole text in a private
copy; the harness keeps it for a failure, the plugin puts it in the failure's reproducer directory.

An error of the engine's own handling of a result (inspecting or converting what the backend returned)
is an `EngineError`, never charged to the backend as "backend raised".
"""
from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import NamedTuple

from . import backend_text
from .protocol import (ALIAS, InputSnapshot, ProtocolViolation, aliased_inputs, plain_data,  # noqa: F401
                       plain_text, protocol_outputs)
from .strided import StridedInputs


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
    names = tuple(plain_text(c.__name__) for c in type(exc).__mro__)
    return (plain_text(type(exc).__name__), _message(exc), traceback.format_exc(), names,
            plain_text(raise_site(exc)))


def _message(exc: BaseException) -> str:
    """str(exc) as an exact str (protocol.plain_text); a __str__ that raises is said, not propagated."""
    try:
        return plain_text(exc)
    except Exception as inner:   # noqa: BLE001 - the backend's __str__ is the backend's code
        return f"(its message could not be read: str() raised {type(inner).__name__})"


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


def _serve(conn, spec: str, fault_path: str | None = None, output_path: str | None = None,
           parent: int | None = None) -> None:
    """Worker main loop (runs in the child). A fatal signal dumps the Python stacks to `fault_path`, so
    that a crash report can say where the backend died (the process itself can tell nobody); what the
    backend prints goes to `output_path`, emptied before each call; `parent`: the pid whose death ends
    this worker and its process group."""
    _own_process_group(parent)
    if fault_path is not None:
        fault_file = open(fault_path, "w")  # noqa: SIM115 - must stay open for the life of the process
        faulthandler.enable(file=fault_file, all_threads=True)
    capture = _Capture(output_path)
    from kvconform import backends
    from kvconform.backends.base import Unsupported
    # The interpreter, NumPy and the engine are up: from here on the time is the backend's own (its
    # import, factory, availability(), capabilities()), which the parent bounds by the call timeout.
    conn.send(("loading", os.getpid()))
    try:
        backend = backends.load(spec)
    except backends.BackendLoadError as exc:   # also sys.exit / pytest.skip at import (backends.load)
        conn.send(("error", (type(exc).__name__, str(exc), "")))
        return
    try:
        conn.send(("ok", plain_data(backend.describe())))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - availability() or capabilities() failed: claims unreadable
        conn.send(("claims-error", (plain_text(type(exc).__name__), f"describe() {backends.failure_words(exc)}",
                                    traceback.format_exc(limit=6))))
        return
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        op, kwargs, layouts = request
        if op == INSPECT:   # check-backend: the methods of the claimed ops, where the backend object lives
            conn.send(("ok", _inspect(backend, kwargs["ops"])))
            continue
        served = time.perf_counter()
        try:
            strided = StridedInputs(kwargs, layouts)   # views built here: pickling made them contiguous (NU-14)
        except Exception as exc:
            conn.send(("engine-error", f"the engine could not build the strided views of {op}'s inputs: "
                                       f"{type(exc).__name__}: {exc}"))
            continue
        kwargs = strided.inputs
        before = InputSnapshot(kwargs)
        capture.begin()
        try:
            started = time.perf_counter()
            result = getattr(backend, op)(**kwargs)
            backend_seconds = time.perf_counter() - started
        except Unsupported as exc:
            conn.send(("declined", _message(exc)))
            continue
        except BaseException as exc:  # noqa: BLE001 - pytest.skip(), sys.exit(), KeyboardInterrupt in an op
            conn.send(("error", _error_payload(exc)))   # are the backend's raise, not a dead worker
            continue
        finally:
            capture.end()
        try:   # the engine's side: an error here is never "backend raised"
            try:   # converted before pickling, which a generator or a device tensor would not survive
                outputs = protocol_outputs(result)
            except ProtocolViolation as exc:
                conn.send(("protocol", str(exc)))
                continue
            mutated = before.mutated(kwargs) + strided.touched() + aliased_inputs(result, kwargs)
        except Exception as exc:
            conn.send(("engine-error", f"the engine could not inspect what {op} returned "
                                       f"({type(result).__name__}): {type(exc).__name__}: {exc}"))
            continue
        timing = (backend_seconds, time.perf_counter() - served - backend_seconds)
        conn.send(("ok", (outputs, mutated, timing)))


def _own_process_group(parent: int | None) -> None:
    """Make this worker the leader of a new session and process group (what a backend spawns joins it,
    and the run kills the group), and kill the group when `parent` dies (a SIGKILLed run cannot)."""
    if not hasattr(os, "setsid"):   # pragma: no cover - not POSIX
        return
    try:
        os.setsid()
    except OSError:   # already a group leader: then never kill the group (it may be the run's own)
        return
    if parent is None:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="kvconform-parent-watch", daemon=True).start()


class _Capture:
    """The worker's file descriptors 1 and 2 redirected to one file, emptied before each call (so the file
    holds what the backend printed during the last call); Python's and C's stdio buffers are flushed
    around the call, so nothing printed in it arrives later."""

    def __init__(self, path: str | None):
        self.fd = None
        if path is None:
            return
        self._flush()
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(self.fd, 1)
        os.dup2(self.fd, 2)
        try:
            import ctypes
            self._fflush = ctypes.CDLL(None).fflush
        except (OSError, AttributeError):   # pragma: no cover - no C library to flush
            self._fflush = None

    def begin(self) -> None:
        if self.fd is not None:
            self._flush()
            os.ftruncate(self.fd, 0)

    def end(self) -> None:
        if self.fd is not None:
            self._flush()

    def _flush(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        if getattr(self, "_fflush", None) is not None:
            self._fflush(None)


@dataclass
class CapturedOutput:
    """What a backend printed during one call: `size` bytes in all, `text` capped for a record
    (backend_text.OUTPUT_CAP, head and tail), `path` a private copy of the whole text (at most
    backend_text.FULL_TEXT_CAP bytes) that its holder moves into a reproducer or `discard`s."""
    size: int
    text: str
    path: str | None

    def discard(self) -> None:
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            self.path = None


def read_output(path: str | None) -> CapturedOutput | None:
    """The captured output in `path` (see CapturedOutput), None when the backend printed nothing."""
    try:
        size = os.path.getsize(path) if path else 0
    except OSError:
        return None
    if not size:
        return None
    limit = backend_text.OUTPUT_CAP
    with open(path, "rb") as fh:
        if size <= limit:
            text = fh.read().decode(errors="replace")
        else:   # head and tail only: never read a huge output whole
            head = fh.read(limit // 4).decode(errors="replace")
            fh.seek(size - (limit - limit // 4))
            tail = fh.read().decode(errors="replace")
            text = f"{head}\n[... {size - limit:,} bytes cut ...]\n{tail}"
        fh.seek(0)
        fd, copy = tempfile.mkstemp(prefix="kvconform-output-", suffix=".txt")
        with os.fdopen(fd, "wb") as out:
            remaining = backend_text.FULL_TEXT_CAP
            while remaining > 0:
                chunk = fh.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                out.write(chunk)
                remaining -= len(chunk)
            if size > backend_text.FULL_TEXT_CAP:
                out.write(f"\n[... {size - backend_text.FULL_TEXT_CAP:,} more bytes not kept]\n".encode())
    return CapturedOutput(size, text, copy)


#: the request that asks a worker about its backend's op methods instead of calling one (`Worker.inspect`)
INSPECT = "__kvconform_inspect__"


def _inspect(backend, ops) -> dict:
    """{op: {"method": bool, "problems": [...], "notes": [...]}}: whether the backend has a method per op
    and how its signature differs from the reference's (backend_check.signature_problems)."""
    from kvconform import reference

    from .backend_check import signature_problems
    found = {}
    for op in ops:
        method = getattr(backend, op, None)
        if not callable(method):
            found[op] = {"method": False, "problems": [], "notes": []}
            continue
        problems, notes = signature_problems(method, getattr(reference, op))
        found[op] = {"method": True, "problems": problems, "notes": notes}
    return found


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
        self._output_path: str | None = None
        self.description: dict | None = None
        self.restarts = 0
        self.last_timing: CallTiming | None = None
        self.crash_output: CapturedOutput | None = None   # what the backend printed in the call that crashed

    def start(self) -> dict:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        fd, self._fault_path = tempfile.mkstemp(prefix="kvconform-fault-", suffix=".txt")
        os.close(fd)
        fd, self._output_path = tempfile.mkstemp(prefix="kvconform-stdout-", suffix=".txt")
        os.close(fd)
        proc = ctx.Process(target=_serve, args=(child, self.spec, self._fault_path, self._output_path, os.getpid()),
                           daemon=True, name=f"kvconform-{self.spec}")
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        # two phases: the worker process starts (Python, NumPy, the engine: start_timeout), then the
        # backend loads (import, factory, availability(), capabilities()) under the call timeout
        status, payload = self._receive_while_loading(self.start_timeout, "start")
        if status == "loading":
            status, payload = self._receive_while_loading(self.timeout, "load")
        if status == "claims-error":
            self.stop()
            raise ClaimsUnreadable(payload[1])
        if status != "ok":
            self.stop()
            raise BackendUnavailable(payload[1])
        self.description = payload
        return payload

    def _receive_while_loading(self, limit: float, phase: str) -> tuple:
        """The worker's next message while it starts or loads; BackendUnavailable in words when it hangs
        past `limit` or dies (sys.exit is reported by the worker itself; os._exit or a fatal signal here)."""
        conn, proc = self._conn, self._proc
        doing = ("did not start (a new Python process importing NumPy and kvconform)" if phase == "start" else
                 "did not finish loading (import, factory, availability() and capabilities() share the call "
                 "timeout, --timeout)")
        if not conn.poll(limit):
            self.stop()
            raise BackendUnavailable(f"backend {self.spec!r} {doing} within {limit:g} s; worker killed")
        try:
            return conn.recv()
        except (EOFError, OSError):
            proc.join(timeout=2)
            code = proc.exitcode
            where = crash_site(self._fault_path)
            self.stop()
            how = ("os._exit() or an exit in native code: a backend must not end the process"
                   if code is not None and code >= 0 else "a crash in native code")
            raise BackendUnavailable(f"backend {self.spec!r}: its process ended while "
                                     f"{'starting' if phase == 'start' else 'loading'} ({_describe_exit(code)}; "
                                     f"{how})" + (f"; {where}" if where else "")) from None

    def describe(self) -> dict:
        if self.description is None:
            self.start()
        return self.description

    def inspect(self, ops) -> dict:
        """`_inspect` of the loaded backend, run in the worker: {op: {"method", "problems", "notes"}}."""
        self.describe()
        self._conn.send((INSPECT, {"ops": list(ops)}, None))
        if not self._conn.poll(self.timeout):
            self.stop()
            raise BackendCrash(f"hang: inspecting the op methods took more than {self.timeout:g} s")
        try:
            status, payload = self._conn.recv()
        except (EOFError, OSError):
            self.stop()
            raise BackendCrash("the worker died while its op methods were inspected") from None
        return payload

    def call(self, op: str, kwargs: dict, timeout: float | None = None, layouts: dict | None = None):
        """`layouts`: {argument: layout} of a strided case (conformance/strided.py), built in the worker."""
        if self.crash_output is not None:   # an earlier crash's, nobody took it
            self.crash_output.discard()
            self.crash_output = None
        if self._proc is None or not self._proc.is_alive():
            if self._proc is not None:
                self.restarts += 1
            self.start()
        limit = self.timeout if timeout is None else timeout
        started = time.monotonic()
        self.last_timing = None
        try:
            self._conn.send((op, kwargs, layouts))
            if not self._conn.poll(limit):
                self._keep_crash_output()
                self.stop(graceful=False)
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
            self._keep_crash_output()
            self.stop(graceful=False)
            raise BackendCrash(f"{op}: worker process died ({_describe_exit(code)}) after "
                               f"{time.monotonic() - started:.1f} s" + (f"; {where}" if where else "")) from None
        if status == "error":
            raise BackendError(*payload)
        if status == "declined":
            raise BackendDeclined(payload)
        if status == "protocol":
            raise BackendProtocolError(payload)
        if status == "engine-error":
            raise EngineError(payload)
        result, mutated, (backend_seconds, guard_seconds) = payload
        round_trip = time.monotonic() - started
        self.last_timing = CallTiming(backend_seconds, guard_seconds,
                                      max(0.0, round_trip - backend_seconds - guard_seconds))
        return result.value(), mutated

    def output(self) -> CapturedOutput | None:
        """What the backend printed (stdout and stderr) during the last call, or None; valid until the next
        call. The caller owns the returned copy (move it or `discard` it)."""
        return read_output(self._output_path)

    def _keep_crash_output(self) -> None:
        if self.crash_output is not None:
            self.crash_output.discard()
        self.crash_output = self.output()

    def stop(self, graceful: bool = True) -> None:
        """Stop the worker (asked to exit, killed after a second; at once unless `graceful`) and kill its
        process group: whatever the backend spawned dies with it."""
        if self._conn is not None:
            try:
                if graceful and self._proc is not None and self._proc.is_alive():
                    self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._conn.close()
        if self._proc is not None:
            if graceful:
                self._proc.join(timeout=1)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(timeout=5)
            kill_group(self._proc.pid)
        for path in (self._fault_path, self._output_path):
            if path is not None:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        self._proc = self._conn = self._fault_path = self._output_path = None


def kill_group(pid: int) -> None:
    """SIGKILL the process group a worker leads (its pid: the worker called setsid); never this process's
    own group, and nothing when the group is gone."""
    if not hasattr(os, "killpg") or pid == os.getpgrp():
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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
            self.description = plain_data(self.backend.describe())   # as the worker sends it
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - as in the worker (_serve)
            raise ClaimsUnreadable(f"describe() {backends.failure_words(exc)}") from None
        self.restarts = 0
        self.last_timing: CallTiming | None = None
        self.crash_output: CapturedOutput | None = None   # never set: a crash here is the caller's

    def describe(self) -> dict:
        return self.description

    def output(self) -> CapturedOutput | None:
        """Nothing is captured in-process: the backend's prints went where this process's go."""
        return None

    def call(self, op: str, kwargs: dict, timeout: float | None = None, layouts: dict | None = None):
        from kvconform.backends.base import Unsupported
        self.last_timing = None
        strided = StridedInputs(kwargs, layouts)
        kwargs = strided.inputs
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
        return outputs.value(), before.mutated(kwargs) + strided.touched() + aliased_inputs(result, kwargs)

    def stop(self, graceful: bool = True) -> None:
        pass


def pid_of(worker) -> int | None:
    proc = getattr(worker, "_proc", None)
    return proc.pid if proc is not None else os.getpid()
