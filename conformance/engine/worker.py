"""Backend calls in a worker subprocess, so that a segfault, an abort or a hang becomes a `crash` result.

One `Worker` per backend: a spawned process that loads the backend once and then serves requests over a
pipe (arrays travel pickled between our own two processes; nothing is unpickled from disk). A call that
does not answer within its timeout, or a worker that dies, raises `BackendCrash`; the next call starts a
fresh worker. An exception raised by the backend comes back as `BackendError` with its type and message,
`kvconform.Unsupported` as `BackendDeclined` with the backend's reason, and a result outside the protocol (a
list, a generator, an array that cannot be converted) as `BackendProtocolError`, saying so. Results are
converted, and inputs checked for mutation and aliasing, by engine/protocol.py. The worker process's own
side is worker_child.py; what a call can end in, call_errors.py.

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

import multiprocessing as mp
import os
import signal
import tempfile
import time
from typing import NamedTuple

from kvconform.conformance.engine.protocol import InputSnapshot, ProtocolViolation, aliased_inputs, protocol_outputs
from kvconform.conformance.engine.strided import StridedInputs

from .call_errors import (BackendCrash, BackendDeclined, BackendError, BackendProtocolError, BackendUnavailable,
                          ClaimsUnreadable, EngineError, _error_payload, _site)
from .worker_child import INSPECT, CapturedOutput, _serve, read_output


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
            self.description = self.backend.describe()
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
