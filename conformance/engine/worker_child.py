"""The worker process's side: load the backend, serve op calls, capture its output, report its exceptions."""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass

from kvconform.conformance.engine import backend_text
from kvconform.conformance.engine.protocol import (InputSnapshot, ProtocolViolation, aliased_inputs, plain_data,
                                                   plain_text, protocol_outputs)
from kvconform.conformance.engine.strided import StridedInputs

from .call_errors import _error_payload, exception_message
from .runner_guard import RunnerGuard


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
    guard = RunnerGuard(parent)   # os.kill / os.killpg aimed at the run are held back (runner_guard.py)
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
        description = plain_data(backend.describe())   # built-in data only (protocol.plain_data)
        signalled = guard.take("while loading")
        if signalled:
            conn.send(("error", ("RunnerSignalled", f"backend {spec!r} {signalled}", "")))
            return
        conn.send(("ok", description))
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
            conn.send(("declined", exception_message(exc)))
            continue
        except BaseException as exc:  # noqa: BLE001 - pytest.skip(), sys.exit(), KeyboardInterrupt in an op
            conn.send(("error", _error_payload(exc)))   # are the backend's raise, not a dead worker
            continue
        finally:
            capture.end()
        signalled = guard.take(f"during {op}")
        if signalled:
            conn.send(("protocol", signalled))
            continue
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
    backend_text.KEPT_CAP bytes) that its holder moves into a reproducer or `discard`s."""
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
            remaining = backend_text.KEPT_CAP
            while remaining > 0:
                chunk = fh.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                out.write(chunk)
                remaining -= len(chunk)
            if size > backend_text.KEPT_CAP:
                out.write(f"\n[... {size - backend_text.KEPT_CAP:,} more bytes not kept]\n".encode())
    return CapturedOutput(size, text, copy)


#: the request that asks a worker about its backend's op methods instead of calling one (`Worker.inspect`)
INSPECT = "__kvconform_inspect__"


def _inspect(backend, ops) -> dict:
    """{op: {"method": bool, "problems": [...], "notes": [...]}}: whether the backend has a method per op
    and how its signature differs from the reference's (signatures.signature_problems)."""
    from kvconform import reference
    from kvconform.conformance.engine.signatures import signature_problems
    found = {}
    for op in ops:
        method = getattr(backend, op, None)
        if not callable(method):
            found[op] = {"method": False, "problems": [], "notes": []}
            continue
        problems, notes = signature_problems(method, getattr(reference, op))
        found[op] = {"method": True, "problems": problems, "notes": notes}
    return found
