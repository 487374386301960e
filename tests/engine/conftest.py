"""Helpers for the engine's meta-tests: run the `kvconform` CLI in a subprocess and read its report
(`cli`), and one shared run of several backends of one op (`run_many`)."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


class Cli:
    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
        env.pop("KVCONFORM_PROFILE", None)
        return subprocess.run([sys.executable, "-m", "kvconform.conformance.cli", *args], capture_output=True,
                              text=True, timeout=timeout, env=env, cwd=self.tmp_path)

    @staticmethod
    def report(out: Path) -> dict:
        return json.loads((Path(out) / "report.json").read_text())


@pytest.fixture
def cli(tmp_path) -> Cli:
    return Cli(tmp_path)


@dataclass(frozen=True)
class GroupRun:
    """One `kvconform run` of several backends over one op: `report` is its report.json (None when the
    run wrote none), `output` the tail of its stdout and stderr, `returncode` its exit status (None when
    it ran past GROUP_TIMEOUT)."""
    op: str
    specs: tuple[str, ...]
    profile: str
    out: Path
    returncode: int | None
    output: str
    report: dict | None

    def records(self, spec: str) -> list[dict]:
        """The result records of one backend of the run (`backend_spec` is the spec it was given as)."""
        return [r for r in (self.report or {}).get("results", []) if r.get("backend_spec") == spec]


#: seconds for one group run (the engine bounds each backend call itself; this only stops a run gone wrong)
GROUP_TIMEOUT = 3600

#: pytest arguments of the meta-tests' runs of the project's own NumPy backends (mutants, threshold mutants,
#: permission backends): each backend runs in the run's own process (`--kvc-isolation none`, engine/worker.py
#: InProcess) instead of a worker subprocess of its own. The verdicts are the same: InProcess makes the same
#: protocol checks (conversion, mutation, aliasing), and the suite's draws do not depend on the isolation
#: (measured on the hand mutants of ragged_paged_attention, write_kv, selective_state_update and
#: recurrent_store_step, 3184 records: the same status and counterexample for every test). It saves the
#: ~0.4 s start of a worker per backend and the pickling of every call's arrays: x0.61 of the CPU seconds of
#: write_kv's mutant run (benchmarks/engine_startup.py --isolation, docs/performance.md). What the isolation
#: itself does (crashes, hangs, exits, hostile backends) is tested with real workers (test_runner.py,
#: test_hostile_*.py), and test_mutants.py checks a grouped in-process run against a run of one backend in
#: its worker.
IN_PROCESS = ("--kvc-isolation", "none")


class RunMany:
    """`run_many(op, specs, profile)`: ONE `kvconform run --backend S1 --backend S2 ... --ops OP` (its
    backends in process: IN_PROCESS) per distinct (op, specs, profile, extra arguments) in a pytest
    session, instead of one run per backend
    (each `kvconform run` costs ~2-3 s of start-up before its first test: Python, pytest, the suite's
    collection, the backend's worker). Meta-tests of many small backends of one op (mutants, permission
    backends) share it.

    Under pytest-xdist every worker process has its own session: the run is shared through a folder of
    the session's common base temp directory, and a lock per key, so whichever worker asks first runs it
    and the other reads its result (it waits while the run is under way)."""

    def __init__(self, root: Path):
        self.root = root
        self.memo: dict[str, GroupRun] = {}

    def __call__(self, op: str, specs, profile: str = "ci", *extra: str) -> GroupRun:
        specs = tuple(dict.fromkeys(specs))
        key = hashlib.sha256(json.dumps([op, specs, profile, extra]).encode()).hexdigest()[:16]
        if key not in self.memo:
            self.memo[key] = self._shared(key, op, specs, profile, extra)
        return self.memo[key]

    def _shared(self, key: str, op: str, specs: tuple[str, ...], profile: str, extra) -> GroupRun:
        folder = self.root / f"run-many-{key}"
        folder.mkdir(parents=True, exist_ok=True)
        done = folder / "done.json"
        with open(folder / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
            if not done.exists():
                backends = [a for spec in specs for a in ("--backend", spec)]
                try:
                    proc = Cli(folder)("run", *backends, "--ops", op, "--profile", profile, "--out",
                                       str(folder / "out"), *extra, "--", *IN_PROCESS, timeout=GROUP_TIMEOUT)
                    code, output = proc.returncode, proc.stdout[-6000:] + proc.stderr[-6000:]
                except subprocess.TimeoutExpired as exc:
                    code, output = None, f"kvconform run did not finish within {GROUP_TIMEOUT} s: {exc}"
                done.write_text(json.dumps({"returncode": code, "output": output}))
        outcome = json.loads(done.read_text())
        report_path = folder / "out" / "report.json"
        report = json.loads(report_path.read_text()) if report_path.exists() else None
        return GroupRun(op, specs, profile, folder / "out", outcome["returncode"], outcome["output"], report)


@pytest.fixture(scope="session")
def run_many(tmp_path_factory) -> RunMany:
    base = tmp_path_factory.getbasetemp()
    # pytest-xdist: each worker's base temp is a folder of the session's one (xdist's documented recipe)
    return RunMany(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)
