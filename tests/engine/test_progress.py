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
    p = Progress(written.append, tty=False, clock=lambda: 3725.0, start=0.0)
    p.plan({"a1": ("pallas", "write_kv"), "a2": ("pallas", "write_kv"), "b1": ("triton", "write_kv")})
    p.result("a1", "flaky")
    p.result("b1", "pass")
    p.result("a2", "unsupported")
    p.close()
    assert written == ["kvconform: triton write_kv: 1 tests, 0 failed | run 2/3 tests, 1 failed | 1:02:05 elapsed\n",
                       "kvconform: pallas write_kv: 2 tests, 1 failed | run 3/3 tests, 1 failed | 1:02:05 elapsed\n"]
    assert elapsed_text(59.9) == "0:59"
