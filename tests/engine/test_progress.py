"""`kvconform run --progress` on a terminal (issue 28.4): one line redrawn in place, saying the backend and
op of the latest result, that op's tests done / total, the run's, the failures so far and the time; ended
before pytest's summary. (In a log, one line per backend x op: tests/engine/test_engine_throughput.py.)"""
from __future__ import annotations

from kvconform.conformance.run.progress import Progress, elapsed_text


def test_terminal_line_is_redrawn_with_counts_failures_and_time():
    written, now = [], [100.0]
    p = Progress(written.append, tty=True, clock=lambda: now[0], start=95.0)
    p.plan({"a[numpy-1]": ("numpy", "write_kv"), "a[numpy-2]": ("numpy", "write_kv"),
            "b[numpy-1]": ("numpy", "shift_keys")})
    p.result("a[numpy-1]", "pass")
    now[0] = 100.05          # within REDRAW_SECONDS: not redrawn
    p.result("b[numpy-1]", "fail")
    now[0] = 161.0
    p.result("a[numpy-2]", "crash")   # the last result is always drawn
    p.close()
    assert written[0] == "\r\x1b[Kkvconform: numpy write_kv 1/2 | run 1/3 tests, 0 failed | 0:05"
    assert written[1] == "\r\x1b[Kkvconform: numpy write_kv 2/2 | run 3/3 tests, 2 failed | 1:06"
    assert written[2:] == ["\n"]


def test_log_lines_come_once_per_op_when_its_last_test_is_recorded():
    written = []
    p = Progress(written.append, tty=False, clock=lambda: 3725.0, start=3700.0)   # within the heartbeat
    p.plan({"a1": ("pallas", "write_kv"), "a2": ("pallas", "write_kv"), "b1": ("triton", "write_kv")})
    p.result("a1", "flaky")
    p.result("b1", "pass")
    p.result("a2", "unsupported")
    p.close()
    assert written == ["kvconform: triton write_kv: 1 tests, 0 failed | run 2/3 tests, 1 failed | 0:25 elapsed\n",
                       "kvconform: pallas write_kv: 2 tests, 1 failed | run 3/3 tests, 1 failed | 0:25 elapsed\n"]
    assert elapsed_text(59.9) == "0:59"


def test_a_log_gets_a_line_at_least_every_30_seconds_while_an_op_runs():
    """A long op in a CI log: the current line after 30 s without one, not silence until the op ends."""
    written, now = [], [0.0]
    p = Progress(written.append, tty=False, clock=lambda: now[0], start=0.0)
    p.plan({f"t{i}": ("triton", "ragged_paged_attention") for i in range(4)})
    for i, t in enumerate((10.0, 31.0, 45.0)):
        now[0] = t
        p.result(f"t{i}", "pass")
    assert written == ["kvconform: triton ragged_paged_attention 2/4 | run 2/4 tests, 0 failed | 0:31\n"]
    now[0] = 70.0
    p.result("t3", "fail")
    assert written[-1].startswith("kvconform: triton ragged_paged_attention: 4 tests, 1 failed")
