"""A backend that signals its runner (hostile backends, round two, item 6): the worker holds back a signal
aimed at the run's process and the call fails naming the backend (engine/runner_guard.py)."""
from __future__ import annotations

import subprocess
import sys

#: install the kernel filter in a child and say whether it took (a container may forbid seccomp filters;
#: then os.kill's wrapper is the only guard, and the libc/kill-command backends would end the run)
_PROBE = ("import os, sys; from kvconform.conformance.engine import signal_filter; "
          "why = signal_filter.install(os.getppid(), lambda: None); sys.exit(0 if why is None else 1)")


def _filter_installs() -> bool:
    return subprocess.run([sys.executable, "-c", _PROBE], timeout=60).returncode == 0


def test_a_backend_that_signals_its_runner_is_named_not_an_interrupt(cli, tmp_path):
    """Item 6: write_kv sends SIGTERM (SIGINT) to the run's process; the run goes on, and each call that
    tried fails, naming the backend and the signal (tests/engine/signal_backends.py); also through libc's
    kill() and a `kill` command."""
    out = tmp_path / "out"
    kernel_filter = _filter_installs()
    beyond_os_kill = ["--backend", "signal_backends:make_libc_kill", "--backend",
                      "signal_backends:make_kill_command"] if kernel_filter else []
    proc = cli("run", "--backend", "signal_backends:make_sigterm", "--backend", "signal_backends:make_sigint",
               *beyond_os_kill, "--ops", "write_kv", "--out", str(out), "--", "-k", "differential and base")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "interrupted" not in proc.stdout + proc.stderr and "--resume" not in proc.stdout + proc.stderr
    report = cli.report(out)
    assert "partial" not in report or not report["partial"]
    by_backend = {r["backend"]: r for r in report["results"]}
    for name, sig in (("sends-sigterm", "SIGTERM"), ("sends-sigint", "SIGINT")):
        assert by_backend[name]["status"] == "fail"
        assert f"{name} sent {sig} to the process running it" in by_backend[name]["message"]
        assert "during write_kv: a backend must not signal the process that runs it" in by_backend[name]["message"]
    # Linux's kernel filter (engine/signal_filter.py): libc's kill() through ctypes is stopped and named; a
    # `kill` command the backend starts is stopped (ended by SIGSYS), the backend not named: its test passes
    # (before: each interrupted the run, exit 143)
    if kernel_filter:
        libc = by_backend["libc-kill"]
        assert libc["status"] == "fail" and "libc-kill sent a signal to the process running it (pid " in \
            libc["message"] and "through a system call (libc's kill, not os.kill) during write_kv" in libc["message"]
        assert by_backend["kill-command"]["status"] == "pass", by_backend["kill-command"]["message"]
