"""Backends that crash or hang in write_kv, to test the worker isolation (not part of the package)."""
import os
import time

from kvconform.backends.numpy import NumpyBackend


class _OnlyWriteKv(NumpyBackend):
    def capabilities(self):
        return {"write_kv": super().capabilities()["write_kv"]}


class Aborts(_OnlyWriteKv):
    name = "aborts"

    def write_kv(self, *args, **kw):
        os.abort()


class Hangs(_OnlyWriteKv):
    name = "hangs"

    def write_kv(self, *args, **kw):
        time.sleep(600)


def make_aborts():
    return Aborts()


def make_hangs():
    return Hangs()
