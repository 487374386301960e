"""Never finishes its import."""
import time

time.sleep(600)

from ._factory import make  # noqa: E402,F401  (never reached)
