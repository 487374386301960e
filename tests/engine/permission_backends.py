"""Fake backends for tests/engine/test_permissions.py: permission backends with a claim removed."""
from kvconform.backends.numpy import NumpyBackend
from kvconform.conformance.permissions.recurrent import RwkvLogDecays


class LogDecaysUnclaimed(RwkvLogDecays):
    """The log-space kernel without RS-44's claim: the range column's w = 0 must fail it."""
    def capabilities(self):
        return NumpyBackend.capabilities(self)
