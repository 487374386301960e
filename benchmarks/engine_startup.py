"""What kvconform costs before its first test, and what a test costs per backend, as ratios measured in one
run (issue 38: fast project tests). Not a test: it prints, and with --save writes a JSON file to
benchmarks/results/.

    .venv/bin/python benchmarks/engine_startup.py                        # all of it (~1-2 min on 2 cores)
    .venv/bin/python benchmarks/engine_startup.py --backends numpy       # skip the interpreters
    .venv/bin/python benchmarks/engine_startup.py --save after           # -> results/engine_startup_after.json
    .venv/bin/python benchmarks/engine_startup.py --isolation --backends ''   # + the isolation ratio (~1 min)

Measures, each in fresh processes (the median of --repeat runs), with the environment the CI steps get
(ci/bootstrap.py:step_environment, i.e. bytecode caches allowed):
  python        `python -c pass`: the interpreter's own start, the floor of everything below (wall and
                CPU seconds: on a shared host the CPU seconds are the steadier figure)
  import        `python -c "import kvconform"`
  help          `kvconform --help` (the console script's entry point, as installed)
  empty run     `kvconform run --backend numpy --ops OP -- -k NOTHING` (exit 3): what every run pays
                before and after its tests (Python, pytest, collecting the suite, the backend's worker, reports)
  run           `kvconform run --backend numpy --ops OP --profile ci`: wall time, the seconds its tests
                took (their `duration`, summed), and the rest: the engine's start-up and shutdown (Python,
                pytest, the suite's collection, the backend's worker, the reports)
  isolation     (--isolation) ONE run of OP's hand mutants as its backends, as the project's meta-tests
                run them, with each backend in a worker subprocess (a user's run) and in process
                (`-- --kvc-isolation none`, tests/engine/conftest.py IN_PROCESS): wall and CPU seconds,
                their ratio, and whether every test got the same status and counterexample both ways
  modules       which heavy frameworks `import kvconform` and `kvconform --help` load (should be none)
  examples/s    ONE run of OP on every backend of --backends: examples per second of each backend's tests
                and its ratio to numpy's (numpy's rate is the engine's own cost: reference, comparison,
                transport; the interpreters' is what checking a kernel on a CPU costs)
and the machine's speed before and after (machine_speed.py), since absolute seconds drift with the host.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from engine_throughput import per_op  # noqa: E402  (benchmarks/ is not a package)
from machine_speed import python_rate  # noqa: E402

#: frameworks a bare import or `--help` must not load (tests/engine/test_startup_imports.py holds the rule)
HEAVY = ("torch", "jax", "jaxlib", "triton", "hypothesis", "pytest", "_pytest", "numpy")

_MODULES_AFTER = """
import json, sys
if sys.argv[1] == "help":
    from importlib.metadata import entry_points
    main = entry_points(group="console_scripts", name="kvconform")[0].load()
    try:
        main(["--help"])
    except SystemExit:
        pass
else:
    import kvconform
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})), file=sys.stderr)
"""


def environment() -> dict:
    """The CI step's environment (ci/bootstrap.py): bytecode caches allowed, no profile override."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("KVCONFORM_PROFILE", None)
    return env


def kvconform_script() -> str:
    return str(Path(sys.executable).with_name("kvconform"))


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children and theirs (a run's backend workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], cwd: Path, ok=(0,)) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds, the process) of one command. On a shared host the CPU seconds are the
    steadier figure: the wall time also counts the time other jobs held the cores."""
    cpu, start = children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=environment(), capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - start, children_cpu() - cpu
    if proc.returncode not in ok:
        sys.exit(f"engine_startup: {' '.join(cmd)} exited {proc.returncode}: {proc.stdout[-1000:]}{proc.stderr[-1000:]}")
    return seconds, cpu, proc


def median_timed(cmd: list[str], cwd: Path, repeat: int, ok=(0,)) -> dict:
    timed(cmd, cwd, ok)   # once to warm the page cache and write bytecode caches
    runs = [timed(cmd, cwd, ok)[:2] for _ in range(repeat)]
    return {"wall_s": statistics.median(r[0] for r in runs), "cpu_s": statistics.median(r[1] for r in runs)}


def heavy_modules(what: str, cwd: Path) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", _MODULES_AFTER, what], cwd=cwd, env=environment(),
                          capture_output=True, text=True)
    return [m for m in json.loads(proc.stderr.strip().splitlines()[-1]) if m in HEAVY]


def timed_run(backends: list[str], op: str, cwd: Path, out: Path,
              pytest_args: tuple[str, ...] = ()) -> tuple[float, float, list[dict]]:
    """(wall seconds, CPU seconds, result records) of one `kvconform run` of `op` on `backends`."""
    cmd = [kvconform_script(), "run", *[a for b in backends for a in ("--backend", b)], "--ops", op,
           "--profile", "ci", "--out", str(out), *(("--", *pytest_args) if pytest_args else ())]
    seconds, cpu, _ = timed(cmd, cwd, ok=(0, 1))
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    return seconds, cpu, records


def measure(args) -> dict:
    cwd = Path(tempfile.mkdtemp(prefix="kvc-startup-"))
    speed_before = python_rate()
    result: dict = {"op": args.op, "repeat": args.repeat}
    result["python"] = median_timed([sys.executable, "-c", "pass"], cwd, args.repeat)
    result["import"] = median_timed([sys.executable, "-c", "import kvconform"], cwd, args.repeat)
    result["help"] = median_timed([kvconform_script(), "--help"], cwd, args.repeat)
    # a run that selects no test (exit 3, NOT CHECKED): Python, pytest, collecting the suite, the backend's
    # worker, the reports; what every `kvconform run` pays before and after its tests
    result["empty_run"] = median_timed([kvconform_script(), "run", "--backend", "numpy", "--ops", args.op,
                                        "--profile", "ci", "--out", str(cwd / "empty"), "--", "-k",
                                        "kvc_selects_no_test"], cwd, args.repeat, ok=(3,))
    result["heavy_after_import"] = heavy_modules("import", cwd)
    result["heavy_after_help"] = heavy_modules("help", cwd)
    runs = []
    timed_run(["numpy"], args.op, cwd, cwd / "warm")
    for i in range(args.repeat):
        seconds, cpu, records = timed_run(["numpy"], args.op, cwd, cwd / f"run{i}")
        tests = sum(r.get("duration", 0.0) for r in records)
        runs.append({"wall_s": seconds, "cpu_s": cpu, "tests_s": tests, "overhead_s": seconds - tests})
    result["run"] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    if args.backends:
        seconds, _, records = timed_run(args.backends, args.op, cwd, cwd / "backends")
        rows = per_op(records)
        rates = {backend: row["examples"] / row["seconds"] for (backend, _), row in rows.items() if row["seconds"]}
        numpy_rate = rates.get("numpy")
        result["backends"] = {
            backend: {"tests": row["tests"], "examples": row["examples"], "seconds": round(row["seconds"], 3),
                      "examples_per_s": round(rates[backend], 2),
                      "ratio_to_numpy": round(rates[backend] / numpy_rate, 4) if numpy_rate else None}
            for (backend, _), row in sorted(rows.items()) if backend in rates}
        result["backends_wall_s"] = seconds
    if args.isolation:
        result["isolation"] = isolation(args.op, cwd)
    result["machine_python_mips"] = [round(speed_before, 2), round(python_rate(), 2)]
    return result


def isolation(op: str, cwd: Path) -> dict:
    """One run of `op`'s hand mutants with each in a worker subprocess, then one in process."""
    from kvconform.conformance.mutants import all_mutants
    specs = [m.spec for m in all_mutants() if m.op == op]
    runs = {}
    for mode, args in (("subprocess", ()), ("in_process", ("--kvc-isolation", "none"))):
        seconds, cpu, records = timed_run(specs, op, cwd, cwd / f"isolation-{mode}", args)
        runs[mode] = {"wall_s": round(seconds, 2), "cpu_s": round(cpu, 2),
                      "verdicts": {r["id"]: [r["status"], r.get("counterexample")] for r in records}}
    same = runs["subprocess"]["verdicts"] == runs["in_process"]["verdicts"]
    return {"mutants": len(specs), "tests": len(runs["subprocess"]["verdicts"]), "same_verdicts": same,
            **{mode: {k: v for k, v in run.items() if k != "verdicts"} for mode, run in runs.items()},
            "cpu_ratio": round(runs["in_process"]["cpu_s"] / runs["subprocess"]["cpu_s"], 3)}


def render(r: dict) -> list[str]:
    run = r["run"]
    lines = [f"machine: python {r['machine_python_mips'][0]} -> {r['machine_python_mips'][1]} M loop iterations/s",
             "                        wall s   CPU s  (CPU over python -c pass)"]
    for key, what in (("python", "python -c pass"), ("import", "import kvconform"), ("help", "kvconform --help"),
                      ("empty_run", "run selecting no test")):
        extra = f"  ({r[key]['cpu_s'] - r['python']['cpu_s']:+.3f})" if key != "python" else ""
        lines.append(f"{what:<22} {r[key]['wall_s']:7.3f} {r[key]['cpu_s']:7.3f}{extra}")
    lines += [f"heavy modules after import kvconform: {', '.join(r['heavy_after_import']) or 'none'}; "
              f"after kvconform --help: {', '.join(r['heavy_after_help']) or 'none'}",
              f"kvconform run numpy {r['op']}: {run['wall_s']:.2f} s wall ({run['cpu_s']:.2f} s CPU), {run['tests_s']:.2f} s "
              f"in its tests, {run['overhead_s']:.2f} s start-up and shutdown ({run['overhead_s'] / run['wall_s']:.0%} of the run)"]
    for backend, row in r.get("backends", {}).items():
        lines.append(f"  {backend:<8} {row['tests']:>3} tests {row['examples']:>5} examples {row['seconds']:>8.2f} s "
                     f"{row['examples_per_s']:>8.2f} examples/s  x{row['ratio_to_numpy']} of numpy's rate")
    if "isolation" in r:
        i = r["isolation"]
        lines.append(f"{i['mutants']} hand mutants of {r['op']} in one run ({i['tests']} tests): in worker subprocesses "
                     f"{i['subprocess']['wall_s']} s wall ({i['subprocess']['cpu_s']} s CPU), in process "
                     f"{i['in_process']['wall_s']} s ({i['in_process']['cpu_s']} s CPU): x{i['cpu_ratio']} of the CPU; "
                     f"{'the same' if i['same_verdicts'] else 'DIFFERENT'} status and counterexample for every test")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", default="write_kv", help="the op of the one-op runs (default write_kv: the smallest "
                                                    "with every backend)")
    p.add_argument("--backends", default="numpy,triton,pallas",
                   help="comma-separated backends for examples/s ('' to skip; default numpy,triton,pallas)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each start-up measure (median; default 3)")
    p.add_argument("--isolation", action="store_true",
                   help="also time one run of the op's hand mutants in worker subprocesses and in process")
    p.add_argument("--save", metavar="LABEL", help="write benchmarks/results/engine_startup_LABEL.json")
    args = p.parse_args()
    if args.repeat < 1:
        p.error(f"argument --repeat: must be >= 1, got {args.repeat}")
    if args.save is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", args.save):
        p.error(f"argument --save: a label of letters, digits, '_', '.' or '-', got {args.save!r}")
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    result = measure(args)
    result["created"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print("\n".join(render(result)))
    if args.save:
        path = HERE / "results" / f"engine_startup_{args.save}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"saved: {path}")


if __name__ == "__main__":
    main()
