"""Backends that signal their runner (hostile backends, round two, item 6; not part of the package): write_kv
sends SIGTERM, or SIGINT, to the worker's parent, the run's process, then returns the right result."""
import os
import signal

from kvconform import reference
from kvconform.backends.numpy import NumpyBackend


class _SignalsRunner(NumpyBackend):
    sends = signal.SIGTERM

    def capabilities(self):
        return {"write_kv": super().capabilities()["write_kv"]}

    def write_kv(self, *args, **kw):
        os.kill(os.getppid(), self.sends)
        return reference.write_kv(*args, **kw)


class SendsSigterm(_SignalsRunner):
    name = "sends-sigterm"


class SendsSigint(_SignalsRunner):
    name = "sends-sigint"
    sends = signal.SIGINT


def make_sigterm():
    return SendsSigterm()


def make_sigint():
    return SendsSigint()
