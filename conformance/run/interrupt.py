"""How a run ends before its last test: SIGINT (Ctrl-C), SIGTERM (a CI job cancelled, `timeout`), or a
record that cannot be written (a full disk). Each leaves the results recorded so far and reports marked
partial, and its own exit status: 130 (SIGINT), 143 (SIGTERM), 3 (not everything was checked).

SIGTERM would kill Python on the spot (no report); while a run with an output folder is under way it
raises `Terminated`, a KeyboardInterrupt, which pytest handles as Ctrl-C: the test in progress stops,
its backend worker is killed, sessionfinish writes the reports. `STOP` remembers which of these happened
for the CLI and the plugin to turn into the exit status.
"""
from __future__ import annotations

import signal
import threading
from dataclasses import dataclass

EXIT_SIGINT = 130
EXIT_SIGTERM = 143
EXIT_NOT_CHECKED = 3


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is, so that it ends as after Ctrl-C."""


@dataclass
class Stop:
    signal: str | None = None        # "SIGINT" / "SIGTERM"
    write_error: str | None = None   # why a record could not be written

    def reason(self) -> str | None:
        if self.signal:
            return f"interrupted by {self.signal}"
        if self.write_error:
            return f"cut short: {self.write_error}"
        return None

    def exit_code(self) -> int | None:
        if self.signal == "SIGTERM":
            return EXIT_SIGTERM
        if self.signal == "SIGINT":
            return EXIT_SIGINT
        if self.write_error:
            return EXIT_NOT_CHECKED
        return None


STOP = Stop()
_saved: dict = {}


def install() -> None:
    """Note SIGINT and SIGTERM for the run and make both interrupt it (main thread only; idempotent)."""
    if _saved or threading.current_thread() is not threading.main_thread():
        return
    STOP.signal = STOP.write_error = None

    def on_sigint(signum, frame):
        STOP.signal = STOP.signal or "SIGINT"
        raise KeyboardInterrupt

    def on_sigterm(signum, frame):
        STOP.signal = STOP.signal or "SIGTERM"
        raise Terminated

    for sig, handler in ((signal.SIGINT, on_sigint), (signal.SIGTERM, on_sigterm)):
        _saved[sig] = signal.signal(sig, handler)


def restore() -> None:
    """Put back the handlers `install` replaced."""
    for sig, handler in _saved.items():
        signal.signal(sig, handler)
    _saved.clear()
