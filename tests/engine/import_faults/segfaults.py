"""Dies of SIGSEGV while imported (a native extension gone wrong)."""
import ctypes

ctypes.string_at(0)

from ._factory import make  # noqa: E402,F401  (never reached)
