"""A backend that signals its runner (hostile backends, round two, item 6): the worker holds back a signal
aimed at the run's process and the call fails naming the backend (engine/runner_guard.py)."""
from __future__ import annotations


def test_a_backend_that_signals_its_runner_is_named_not_an_interrupt(cli, tmp_path):
    """Item 6: write_kv sends SIGTERM (SIGINT) to the run's process; the run goes on, and each call that
    tried fails, naming the backend and the signal (tests/engine/signal_backends.py)."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "signal_backends:make_sigterm", "--backend", "signal_backends:make_sigint",
               "--ops", "write_kv", "--out", str(out), "--", "-k", "differential and base")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "interrupted" not in proc.stdout + proc.stderr and "--resume" not in proc.stdout + proc.stderr
    report = cli.report(out)
    assert "partial" not in report or not report["partial"]
    by_backend = {r["backend"]: r for r in report["results"]}
    for name, sig in (("sends-sigterm", "SIGTERM"), ("sends-sigint", "SIGINT")):
        assert by_backend[name]["status"] == "fail"
        assert f"{name} sent {sig} to the process running it" in by_backend[name]["message"]
        assert "during write_kv: a backend must not signal the process that runs it" in by_backend[name]["message"]
