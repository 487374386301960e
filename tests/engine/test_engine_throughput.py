"""Engine throughput (issue 16): every result says where its seconds went, `--jobs` keeps a test module's
tests of one backend in one process (so a JIT backend compiles each kernel shape once), the benchmark
reads a run's records, and the machine-speed yardstick the CI logs around its timings runs."""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from kvconform.conformance.engine.timing import PHASES

ROOT = Path(__file__).resolve().parents[2]


def _records(cli, out):
    return [r for r in cli.report(out)["results"] if r["status"] == "pass"]


def test_every_result_says_where_its_seconds_went(cli, tmp_path):
    out = tmp_path / "out"
    proc = cli("run", "--backend", "numpy", "--ops", "write_kv", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:]
    records = _records(cli, out)
    assert records
    for r in records:
        timing = r["timing"]
        assert set(timing) == set(PHASES), timing
        assert all(v >= 0 for v in timing.values())
        # the phases split the test's duration (each rounded to 1 ms)
        assert abs(sum(timing.values()) - r["duration"]) <= 0.01, (timing, r["duration"])
        if r["examples"] + r["rejections"] < 5:
            continue   # a one-call golden test can take under the 1 ms the phases are rounded to
        assert timing["backend"] > 0
        if r["layer"] == "differential":
            assert timing["reference"] > 0 and timing["compare"] > 0 and timing["transport"] > 0


def test_jobs_keep_each_module_and_backend_in_one_process(cli, tmp_path):
    out = tmp_path / "out"
    # write_kv's tests live in test_paged_attention.py and (its state machine) test_paged_attention_properties.py,
    # shift_keys's in test_rotation.py and test_rotation_properties.py, both strided columns in test_strided.py
    proc = cli("run", "--backend", "numpy", "--ops", "write_kv,shift_keys", "--profile", "quick",
               "--jobs", "2", "--progress", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:]
    _check_progress_lines(proc.stdout, {"write_kv", "shift_keys"}, len(cli.report(out)["results"]))
    workers = defaultdict(set)
    for r in _records(cli, out):
        workers[r["id"].split("::")[0]].add(r["worker"])
    assert len(workers) == 5, dict(workers)
    assert all(len(w) == 1 for w in workers.values()), dict(workers)
    assert set.union(*workers.values()) == {"gw0", "gw1"}, "both processes should get a module"


PROGRESS_LINE = re.compile(r"kvconform: numpy (\w+): (\d+) tests, 0 failed \| run (\d+)/(\d+) tests, 0 failed \| "
                           r"\d+:\d\d elapsed")
HEARTBEAT_LINE = re.compile(r"kvconform: numpy \w+ \d+/\d+ \| run \d+/\d+ tests, \d+ failed \| [\d:]+")


def _check_progress_lines(stdout: str, ops: set, total: int) -> None:
    """--progress in a log (issue 28.4): one whole line per backend x op, never pieces of two lines or
    pytest's per-test letters, under --jobs 2 too."""
    lines = [line for line in stdout.splitlines() if "kvconform: numpy" in line]
    # on a loaded machine an op may take over 30 s: its heartbeat lines (progress.HEARTBEAT_SECONDS) come too
    lines = [line for line in lines if not HEARTBEAT_LINE.fullmatch(line)]
    assert all(PROGRESS_LINE.fullmatch(line) for line in lines), lines
    seen = {PROGRESS_LINE.fullmatch(line).group(1): line for line in lines}
    assert set(seen) == ops and len(lines) == len(ops), lines
    done = sorted(int(PROGRESS_LINE.fullmatch(line).group(3)) for line in lines)
    assert done[-1] == total and all(int(PROGRESS_LINE.fullmatch(line).group(4)) == total for line in lines)
    assert not re.search(r"^[.sxXF]+$", stdout, re.M), stdout[-2000:]


def test_throughput_benchmark_reads_a_run(cli, tmp_path):
    out = tmp_path / "out"
    quiet = cli("run", "--backend", "numpy", "--ops", "shift_keys", "--out", str(out))
    assert quiet.returncode == 0
    assert "kvconform: numpy" not in quiet.stdout   # no progress lines unless asked
    script = str(ROOT / "benchmarks" / "engine_throughput.py")
    saved = tmp_path / "before.json"   # a run's rows saved with --json serve as a later run's --before
    summary = subprocess.run([sys.executable, script, "--from", str(out), "--json"], capture_output=True,
                             text=True, timeout=60)
    assert summary.returncode == 0, summary.stderr
    saved.write_text(summary.stdout)
    proc = subprocess.run([sys.executable, script, "--from", str(out), "--before", str(saved)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("numpy") and "shift_keys" in line)
    cells = row.split()
    examples, seconds, rate = int(cells[3]), float(cells[4]), float(cells[5])
    assert examples > 0 and seconds > 0
    # seconds are printed to 0.1 s, the rate to 0.01
    assert examples / (seconds + 0.05) - 0.01 <= rate <= examples / max(seconds - 0.05, 1e-3) + 0.01
    assert cells[-1] == "1.00x"   # against itself


def test_machine_speed_reads_both_yardsticks():
    """The reading the CI logs before its tests and after its gate: positive rates for both workloads, as
    JSON and as the logged line."""
    script = str(ROOT / "benchmarks" / "machine_speed.py")
    proc = subprocess.run([sys.executable, script, "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    reading = json.loads(proc.stdout)
    assert reading["python_mits"] > 0 and reading["matmul_gflops"] > 0 and reading["cpus"] >= 1
    # one BLAS thread exactly when threadpoolctl can hold it there (extra `fast`), and the line says which
    one_thread = importlib.util.find_spec("threadpoolctl") is not None
    assert reading["matmul_one_thread"] is one_thread
    line = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120).stdout
    threads = "1 thread" if one_thread else "BLAS's default threads"
    assert line.startswith("machine speed: python ") and f"GFLOP/s ({threads})" in line
