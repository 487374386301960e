"""A backend for the pytest-option meta-tests (hostile backends, round two, item 3; not part of the package):
its first write_kv call in a worker takes 2 s, longer than the pytest-timeout limit the test sets, and
far below the engine's call timeout."""
import time

from kvconform import reference
from kvconform.backends.numpy import NumpyBackend


class SlowFirstCall(NumpyBackend):
    name = "slow-first-call"

    def __init__(self):
        self._first = True

    def capabilities(self):
        return {"write_kv": super().capabilities()["write_kv"]}

    def write_kv(self, *args, **kw):
        if self._first:
            self._first = False
            time.sleep(2.0)
        return reference.write_kv(*args, **kw)


def make_slow_first_call():
    return SlowFirstCall()
