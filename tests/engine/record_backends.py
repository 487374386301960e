"""Hostile backends for the meta-tests of records and runs (test_run_records.py), each claiming write_kv
only: a 5 MB exception message, a megabyte printed per call, control characters in its name and
messages, wrong on some calls only, a result the engine cannot convert, children that must die with
the worker, a hang after its first call, a refusal of malformed input. Not part of the package."""
import os
import subprocess
import sys
import time

import numpy as np

from kvconform import reference
from kvconform.backends.base import Unsupported
from kvconform.backends.numpy import NumpyBackend


class _WriteKvOnly(NumpyBackend):
    def capabilities(self):
        return {"write_kv": super().capabilities()["write_kv"]}


def _wrong(pools):
    """write_kv's result with every written value off by one: fails any comparison."""
    return type(pools)(*(np.asarray(p) + 1 for p in pools))


class HugeMessage(_WriteKvOnly):
    """Raises an exception whose message is 5 MB (a dumped tensor, say)."""
    name = "huge-message"

    def write_kv(self, *args, **kw):
        raise RuntimeError("HEAD-OF-MESSAGE " + "x" * 5_000_000 + " TAIL-OF-MESSAGE")


class Loud(_WriteKvOnly):
    """Prints a megabyte per call (to stdout, and a line to stderr through the file descriptor, as C code
    would), and is wrong."""
    name = "loud"

    def write_kv(self, *args, **kw):
        print("FIRST-PRINTED-LINE")
        print("L" * 1_000_000)
        os.write(2, b"LAST-LINE-ON-STDERR\n")
        return _wrong(reference.write_kv(*args, **kw))


class ControlCharacters(_WriteKvOnly):
    """A name and a message full of terminal escapes, NUL and a right-to-left override."""
    name = "esc\x1b[31mred\x00nul"

    def write_kv(self, *args, **kw):
        raise RuntimeError("bell\x07 clear\x1b[2J nul\x00 rtl\u202e end")


class WrongEveryThirdCall(_WriteKvOnly):
    """Wrong on calls 0, 3, 6, ... of its process: its first failure reproduces in 3 of the next 10."""
    name = "wrong-every-third"
    calls = 0

    def write_kv(self, *args, **kw):
        n, type(self).calls = type(self).calls, type(self).calls + 1
        result = reference.write_kv(*args, **kw)
        return _wrong(result) if n % 3 == 0 else result


class WrongAlways(_WriteKvOnly):
    """Wrong on every call: a deterministic bug, whose failure reproduces on every replay."""
    name = "wrong-always"

    def write_kv(self, *args, **kw):
        return _wrong(reference.write_kv(*args, **kw))


class WrongOnce(_WriteKvOnly):
    """Wrong on its process's second call only (the first example of the drawn test after the one-call
    test): Hypothesis's shrunk example then passes, its "unreliable results"."""
    name = "wrong-once"
    calls = 0

    def write_kv(self, *args, **kw):
        n, type(self).calls = type(self).calls, type(self).calls + 1
        result = reference.write_kv(*args, **kw)
        return _wrong(result) if n == 1 else result


class _Unconvertible:
    """An array-like (it has __array__) whose conversion raises: the engine's conversion fails."""

    def __array__(self, dtype=None, copy=None):
        raise TypeError("cannot convert this storage to numpy")


class ReturnsUnconvertible(_WriteKvOnly):
    name = "returns-unconvertible"

    def write_kv(self, *args, **kw):
        return _Unconvertible()


def _spawn_child() -> None:
    """Start a long-lived child (a compile server, say) and note its pid in $KVC_CHILD_PIDS."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.environ["KVC_CHILD_PIDS"], "a") as fh:
        fh.write(f"{child.pid}\n")


class SpawnsAndHangs(_WriteKvOnly):
    """Spawns a child at its first call, then hangs: the timeout must kill the worker and the child."""
    name = "spawns-and-hangs"

    def write_kv(self, *args, **kw):
        _spawn_child()
        time.sleep(600)


class SpawnsAndPasses(_WriteKvOnly):
    """Spawns a child at its first call and passes: the child must die when the run stops the worker."""
    name = "spawns-and-passes"
    spawned = False

    def write_kv(self, *args, **kw):
        if not type(self).spawned:
            type(self).spawned = True
            _spawn_child()
        return reference.write_kv(*args, **kw)


class HangsAfterFirstCall(_WriteKvOnly):
    """Passes its first call, hangs in every later one: a run of it is under way until it is stopped."""
    name = "hangs-after-first"
    calls = 0

    def write_kv(self, *args, **kw):
        type(self).calls += 1
        if type(self).calls > 1:
            time.sleep(600)
        return reference.write_kv(*args, **kw)


class DeclinesMalformed(_WriteKvOnly):
    """Raises kvconform.Unsupported instead of rejecting a malformed call inside its claims."""
    name = "declines-malformed"

    def write_kv(self, *args, **kw):
        try:
            return reference.write_kv(*args, **kw)
        except (ValueError, TypeError):
            raise Unsupported("not a case this kernel handles") from None


def make_write_kv_only():
    return _WriteKvOnly()


def make_huge_message():
    return HugeMessage()


def make_loud():
    return Loud()


def make_control_characters():
    return ControlCharacters()


def make_wrong_every_third():
    return WrongEveryThirdCall()


def make_wrong_always():
    return WrongAlways()


def make_wrong_once():
    return WrongOnce()


def make_returns_unconvertible():
    return ReturnsUnconvertible()


def make_spawns_and_hangs():
    return SpawnsAndHangs()


def make_spawns_and_passes():
    return SpawnsAndPasses()


def make_hangs_after_first():
    return HangsAfterFirstCall()


def make_declines_malformed():
    return DeclinesMalformed()
