"""`kvconform run --progress`: where a long run stands (issue 28 item 4).

On a terminal, one line that updates in place: the backend and op of the latest result, that op's tests
done / total, the run's done / total, failures so far and the time elapsed. Elsewhere (a CI log, a pipe),
one whole line per (backend, op) when its last test is recorded. Only the controlling pytest process
prints (results reach it one at a time, also under `--jobs`), each line in one write, so lines never
interleave. Without --progress nothing is printed beyond pytest's own output.

Totals come from the collected test ids: `plan` takes {test id: (backend, op)}; under pytest-xdist the
controller sees ids only, and `ops_of_ids` reads each id's op from its suite module's `kvconform` marker.
"""
from __future__ import annotations

import importlib.util
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from kvconform.conformance.engine.records import FAILED

#: the terminal line is redrawn at most this often (a quick op records hundreds of results a second)
REDRAW_SECONDS = 0.1


def elapsed_text(seconds: float) -> str:
    """`0:07`, `12:30`, `1:02:05`."""
    s = int(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


class Progress:
    """Counts results against the planned tests and writes progress through `write(text)`.

    write: called with whole lines ending in "\\n" (tty False) or with "\\r"-led redraws (tty True)."""

    def __init__(self, write: Callable[[str], None], *, tty: bool, clock: Callable[[], float] = time.monotonic,
                 start: float | None = None):
        self.write, self.tty, self.clock = write, tty, clock
        self.start = clock() if start is None else start
        self.group_of: dict[str, tuple[str, str]] = {}
        self.total: Counter = Counter()
        self.done: Counter = Counter()
        self.failed: Counter = Counter()
        self.finished = 0
        self.failures = 0
        self.last_draw = float("-inf")
        self.drawn = False

    def plan(self, groups: dict[str, tuple[str, str]]) -> None:
        """groups: test id -> (backend, op) of every test this run will record."""
        self.group_of.update(groups)
        self.total.update(groups.values())

    @property
    def planned(self) -> int:
        return sum(self.total.values())

    def result(self, test_id: str, status: str, backend: str = "?", op: str = "?") -> None:
        group = self.group_of.get(test_id, (backend, op))
        self.done[group] += 1
        self.finished += 1
        if status in FAILED:
            self.failed[group] += 1
            self.failures += 1
        if self.tty:
            now = self.clock()
            if now - self.last_draw >= REDRAW_SECONDS or self.finished == self.planned:
                self.last_draw = now
                self.drawn = True
                self.write("\r\x1b[K" + self.line(group))
        elif self.done[group] == self.total[group]:
            self.write(self.op_line(group) + "\n")

    def line(self, group: tuple[str, str]) -> str:
        backend, op = group
        return (f"kvconform: {backend} {op} {self.done[group]}/{self.total[group] or '?'} | run "
                f"{self.finished}/{self.planned or '?'} tests, {self.failures} failed | "
                f"{elapsed_text(self.clock() - self.start)}")

    def op_line(self, group: tuple[str, str]) -> str:
        backend, op = group
        return (f"kvconform: {backend} {op}: {self.done[group]} tests, {self.failed[group]} failed | run "
                f"{self.finished}/{self.planned or '?'} tests, {self.failures} failed | "
                f"{elapsed_text(self.clock() - self.start)} elapsed")

    def close(self) -> None:
        """End the terminal line so that pytest's summary starts on its own."""
        if self.tty and self.drawn:
            self.write("\n")
            self.drawn = False


def ops_of_ids(ids: list[str], rootdir: Path) -> dict[str, str]:
    """test id -> op, from the `kvconform` marker (harness.conformance_test) of each id's test function,
    its module loaded from `rootdir` once (under pytest-xdist the controller has ids, not items)."""
    modules: dict[str, dict] = {}
    ops = {}
    for test_id in ids:
        path, _, rest = test_id.partition("::")
        if path not in modules:
            modules[path] = _load(rootdir / path)
        name = rest.split("[")[0].split("::")[-1]
        meta = getattr(modules[path].get(name), "kvconform", None)
        if isinstance(meta, dict):
            ops[test_id] = meta["op"]
    return ops


def _load(path: Path) -> dict:
    if not path.is_file():
        return {}
    spec = importlib.util.spec_from_file_location(f"_kvconform_progress_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return vars(module)
