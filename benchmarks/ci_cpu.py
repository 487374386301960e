"""The CI's CPU budget: how much CPU each step of `.ci/run` after the install takes, whether it kept the
cores busy, and what a given wall-clock aim leaves for it. Not a test: it prints, and with --save writes a
JSON file to benchmarks/results/.

    .venv/bin/python benchmarks/ci_cpu.py                  # both steps, as the CI runs them (~25 min on 2 cores)
    .venv/bin/python benchmarks/ci_cpu.py --steps gate     # one step
    .venv/bin/python benchmarks/ci_cpu.py --save LABEL     # -> results/ci_cpu_LABEL.json

The steps are ci/bootstrap.py's own (`test_steps()`), run one after the other in this checkout with the CI
step's environment. For each: wall seconds, CPU seconds (user + system of the step and every process it
waited for: pytest-xdist workers, the `kvconform run`s the meta-tests start, backend workers) and the busy
share, CPU / (wall x cores). A busy share near 1 says the step is bound by the work it does, not by how it
is scheduled: no ordering of its tests can make it much shorter, only less work or faster work can. The
budget line is the CPU seconds that fit in `--aim` minutes of wall clock after `--install` seconds of
install, on these cores, at full use, against the CPU the steps took. The machine's speed is read before
and after (machine_speed.py), since every figure here scales with it.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from engine_startup import children_cpu  # noqa: E402  (benchmarks/ is not a package)
from machine_speed import python_rate  # noqa: E402


def _bootstrap():
    """ci/bootstrap.py as a module (ci/ is not a package)."""
    spec = importlib.util.spec_from_file_location("ci_bootstrap", ROOT / "ci" / "bootstrap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_step(title: str, cmd: list, env: dict, cores: int) -> dict:
    """Run one CI step; its wall and CPU seconds and busy share (CPU over wall x cores)."""
    print(f"=== {title}\n$ {' '.join(map(str, cmd))}", flush=True)
    cpu, start = children_cpu(), time.perf_counter()
    rc = subprocess.call([str(c) for c in cmd], cwd=ROOT, env=env)   # its output shows, as in the CI
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    return {"step": title, "exit": rc, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "busy": round(cpu / (wall * cores), 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="tests,gate",
                   help="which steps: tests (the project tests), gate (the conformance gate); default both")
    p.add_argument("--aim", type=float, default=15.0, help="the whole CI's aim in minutes (default 15)")
    p.add_argument("--install", type=float, default=69.0,
                   help="seconds the install takes in a fresh clone (default 69: the last recorded one)")
    p.add_argument("--save", metavar="LABEL", help="write benchmarks/results/ci_cpu_LABEL.json")
    args = p.parse_args()

    bootstrap = _bootstrap()
    wanted = {w.strip() for w in args.steps.split(",") if w.strip()}
    unknown = wanted - {"tests", "gate"}
    if unknown:
        p.error(f"--steps: unknown step(s) {sorted(unknown)}; choose from tests, gate")
    steps = [s for s, key in zip(bootstrap.test_steps(), ("tests", "gate")) if key in wanted]
    cores = os.cpu_count() or 1
    env = bootstrap.step_environment()

    before = python_rate()
    rows = [run_step(title, cmd, env, cores) for title, cmd in steps]
    after = python_rate()

    budget = max(0.0, args.aim * 60 - args.install) * cores
    used = sum(r["cpu_s"] for r in rows)
    print(f"\nmachine: python {before:.1f} -> {after:.1f} M it/s, {cores} CPUs")
    print(f"{'step':<66} {'exit':>4} {'wall s':>8} {'CPU s':>8} {'busy':>6}")
    for r in rows:
        print(f"{r['step']:<66} {r['exit']:>4} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {r['busy']:>6.0%}")
    print(f"budget at {args.aim:g} min ({args.install:.0f} s install, {cores} cores fully used): {budget:.0f} CPU s; "
          f"these steps took {used:.0f} CPU s ({used / budget:.2f}x the budget)" if budget else
          f"no budget: the install alone takes the {args.aim:g} minutes")
    if args.save:
        out = HERE / "results" / f"ci_cpu_{args.save}.json"
        out.write_text(json.dumps({"python_mits_before": round(before, 2), "python_mits_after": round(after, 2),
                                   "cores": cores, "aim_min": args.aim, "install_s": args.install,
                                   "budget_cpu_s": round(budget), "steps": rows}, indent=1) + "\n")
        print(f"wrote {out.relative_to(ROOT)}")
    sys.exit(max((r["exit"] for r in rows), default=0))


if __name__ == "__main__":
    main()
