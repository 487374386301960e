"""Backends that signal their runner (hostile backends, round two, item 6; not part of the package): write_kv
sends SIGTERM, or SIGINT, to the worker's parent, the run's process, then returns the right result; through
os.kill, libc's kill() by ctypes, or a `kill` command in a subprocess."""
import ctypes
import os
import signal
import subprocess

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


class LibcKill(_SignalsRunner):
    name = "libc-kill"

    def write_kv(self, *args, **kw):
        ctypes.CDLL(None).kill(os.getppid(), signal.SIGTERM)
        return reference.write_kv(*args, **kw)


class KillCommand(_SignalsRunner):
    name = "kill-command"

    def write_kv(self, *args, **kw):
        subprocess.run(["kill", "-TERM", str(os.getppid())], check=False)
        return reference.write_kv(*args, **kw)


def make_libc_kill():
    return LibcKill()


def make_kill_command():
    return KillCommand()


def make_sigterm():
    return SendsSigterm()


def make_sigint():
    return SendsSigint()
