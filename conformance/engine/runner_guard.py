"""A backend that signals the process running it (hostile backends, round two): `os.kill(os.getppid(),
SIGTERM)` from an op would stop the run as if the user had, with "`--resume` continues the run" and no
backend named.

The worker is where the backend's code runs, so the worker records it: `RunnerGuard` wraps `os.kill` and
`os.killpg` there, and a signal aimed at the run's process (its pid, its process group, or every process
with pid -1) is not sent; the call that tried is then a failure of the backend, named and said in words
("sent SIGTERM to the process running it ..."). Signals to anything else (the backend's own children, its
worker's group) pass. A signal sent another way (libc's kill() through ctypes, a `kill` command the
backend starts) is stopped by the kernel filter of signal_filter.py, on Linux: libc's from the worker's
own process is named as os.kill's is; a started process that tries is ended by SIGSYS, the signal not
sent, the backend not named.
"""
from __future__ import annotations

import os
import signal

from kvconform.conformance.engine import signal_filter


class RunnerGuard:
    """Installed once in a worker: `runner` is the run's pid (the worker's parent)."""

    def __init__(self, runner: int | None):
        self.runner = runner
        self.sent: list[str] = []
        if runner is None:
            return
        try:
            self.runner_group = os.getpgid(runner)
        except OSError:
            self.runner_group = None
        kill, killpg = os.kill, os.killpg

        def guarded_kill(pid, sig):
            if self._aims_at_runner(pid, sig, group=False):
                return None
            return kill(pid, sig)

        def guarded_killpg(pgid, sig):
            if self._aims_at_runner(pgid, sig, group=True):
                return None
            return killpg(pgid, sig)

        os.kill, os.killpg = guarded_kill, guarded_killpg
        #: why the kernel filter is not installed (None: it is): then only os.kill / os.killpg are guarded
        self.filter_problem = signal_filter.install(runner, self._trapped)

    def _trapped(self) -> None:
        """The kernel filter stopped a system call of this process aimed at the run (SIGSYS's handler)."""
        self.sent.append(f"a signal to the process running it (pid {self.runner}) through a system call (libc's "
                         f"kill, not os.kill)")

    def _aims_at_runner(self, target: int, sig: int, *, group: bool) -> bool:
        """Whether os.kill(target, sig) (os.killpg when `group`) would reach the run's process; records it."""
        if not sig:   # signal 0 only asks whether the process exists
            return False
        if group:
            hit = target == self.runner_group or target == 0 and os.getpgrp() == self.runner_group
        else:
            hit = target in (self.runner, -1) or (self.runner_group is not None and target == -self.runner_group)
        if hit:
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            self.sent.append(f"{name} to {'the process group of ' if group or target < -1 else ''}the process "
                             f"running it (pid {self.runner})")
        return hit

    def take(self, during: str) -> str | None:
        """What was held back since the last take, in words ("sent SIGTERM to the process running it (pid
        12) during write_kv: ..."; `during`: the op, or "while loading"), or None."""
        if not self.sent:
            return None
        said = "; ".join(dict.fromkeys(self.sent))
        self.sent = []
        return (f"sent {said} {during}: a backend must not signal the process that runs it (the signal was "
                f"not delivered)")
