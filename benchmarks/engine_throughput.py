"""Engine throughput per backend and op: examples per second through the worker, and where the time goes
(issue 16, item 2). Not a test.

    .venv/bin/python benchmarks/engine_throughput.py --backend pallas --ops ssd_chunked_scan   # runs it
    .venv/bin/python benchmarks/engine_throughput.py --from ci-out                           # a finished run
    .venv/bin/python benchmarks/engine_throughput.py --from ci-out --before benchmarks/results/gate_before_issue16.json

Reads a run's results.jsonl (each test records its duration, its example count and, since issue 16, the
seconds per phase of conformance/timing.py: reference, backend, guard, transport, compare, other) and
prints one row per backend x op: tests, examples, seconds, examples/s and each phase's share of the
seconds. With --before (an older results.jsonl, e.g. from before a change) it adds that run's examples/s
and the speed-up (--before also takes the rows this script printed with --json, as in
benchmarks/results/). Durations are the tests' own wall times, summed: with --jobs 2 the run's wall time is
about half their sum.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from kvconform.conformance.engine.timing import PHASES


def load(path: Path) -> list[dict]:
    """The result records of a run: `path` is results.jsonl or the run's output directory."""
    path = path / "results.jsonl" if path.is_dir() else path
    if not path.is_file():
        sys.exit(f"engine_throughput: no results at {path}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rows_from(path: Path) -> dict[tuple[str, str], dict]:
    """Per-op rows of a run (its directory or results.jsonl) or of a saved `--json` summary."""
    if path.suffix == ".json" and path.is_file():
        saved = json.loads(path.read_text())
        return {tuple(key.split("/", 1)): row for key, row in saved["rows"].items()}
    return per_op(load(path))


def per_op(records: list[dict]) -> dict[tuple[str, str], dict]:
    """(backend, op) -> tests, examples (numerical examples plus rejection cases), seconds, phase seconds.
    A stateful test spans ops; it counts under the op its marker names (the record's op, or the failing
    op for a failure)."""
    rows: dict[tuple[str, str], dict] = defaultdict(lambda: {"tests": 0, "examples": 0, "seconds": 0.0,
                                                            "phases": dict.fromkeys(PHASES, 0.0)})
    for r in records:
        if r.get("status") not in ("pass", "fail", "xfail", "xpass", "unclaimed-pass", "crash"):
            continue   # unsupported and skipped tests ran nothing worth timing
        row = rows[(r["backend"], r["op"])]
        row["tests"] += 1
        row["examples"] += r.get("examples", 0)
        row["seconds"] += r.get("duration", 0.0)
        for phase, seconds in (r.get("timing") or {}).items():
            row["phases"][phase] += seconds
    return dict(rows)


def render(rows: dict, before: dict | None) -> list[str]:
    head = f"{'backend':<8} {'op':<28} {'tests':>5} {'examples':>8} {'seconds':>8} {'ex/s':>7}"
    head += "".join(f" {p[:9]:>9}" for p in PHASES)
    if before is not None:
        head += f" {'before ex/s':>11} {'speed-up':>8}"
    lines = [head]
    totals: dict[str, dict] = defaultdict(lambda: {"examples": 0, "seconds": 0.0, "before": 0.0})
    for (backend, op), row in sorted(rows.items(), key=lambda kv: (kv[0][0], -kv[1]["seconds"])):
        rate = row["examples"] / row["seconds"] if row["seconds"] else float("nan")
        timed = sum(row["phases"].values())
        line = f"{backend:<8} {op:<28} {row['tests']:>5} {row['examples']:>8} {row['seconds']:>8.1f} {rate:>7.2f}"
        line += "".join(f" {100 * row['phases'][p] / timed:>8.0f}%" if timed else f" {'-':>9}" for p in PHASES)
        t = totals[backend]
        t["examples"] += row["examples"]
        t["seconds"] += row["seconds"]
        if before is not None:
            old = before.get((backend, op))
            if old and old["seconds"]:
                old_rate = old["examples"] / old["seconds"]
                line += f" {old_rate:>11.2f} {rate / old_rate:>7.2f}x"
                t["before"] += old["seconds"]
            else:
                line += f" {'-':>11} {'-':>8}"
        lines.append(line)
    for backend, t in sorted(totals.items()):
        line = f"{backend:<8} {'(all ops)':<28} {'':>5} {t['examples']:>8} {t['seconds']:>8.1f}"
        line += f" {t['examples'] / t['seconds']:>7.2f}" if t["seconds"] else ""
        if before is not None and t["before"]:
            line += f"   test seconds before {t['before']:.1f}"
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, default=None,
                        help="a finished run's output directory or results.jsonl (default: run one now)")
    parser.add_argument("--backend", action="append", default=[], help="backend spec(s) to run (default numpy)")
    parser.add_argument("--ops", default=None, help="comma-separated ops to run (default: all)")
    parser.add_argument("--profile", default="ci")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--before", type=Path, default=None, help="an older results.jsonl to compare with")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON object")
    args = parser.parse_args(argv)
    if args.source is None:
        out = Path(tempfile.mkdtemp(prefix="kvconform-throughput-"))
        cmd = [str(Path(sys.executable).with_name("kvconform")), "run", "--profile", args.profile,
               "--jobs", str(args.jobs), "--out", str(out)]
        for spec in args.backend or ["numpy"]:
            cmd += ["--backend", spec]
        if args.ops:
            cmd += ["--ops", args.ops]
        print("$ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
        args.source = out
    rows = rows_from(args.source)
    before = rows_from(args.before) if args.before else None
    if args.json:
        print(json.dumps({"source": str(args.source), "rows": {f"{b}/{o}": row for (b, o), row in rows.items()}}))
    else:
        print("\n".join(render(rows, before)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
