"""`kvconform run`: the suite in pytest, over the chosen backends, profile and output folder."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from kvconform.conformance.run.gate import EXIT_FAILED, EXIT_NOT_CHECKED, EXIT_OK, EXIT_SIGINT, EXIT_USAGE

from .arguments import UsageError, _check_out, _named_backends, _parse_ops, _refuse_xdist


def _resumed(args, out: Path) -> None:
    """--resume: fill the options not given from the resumed run's run.json (outdir.RESUMED); a given
    option that differs is a usage error. A folder without a run to resume is run from the start."""
    from kvconform.conformance.run import outdir
    if outdir.read_run(out) is None:
        return
    ops = [o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else None
    given = {"profile": args.profile, "backends": args.backend or None, "ops": ops, "seed": args.seed,
             "timeout": args.timeout, "expectations": [str(Path(p).resolve()) for p in args.expectations] or None,
             "run_unclaimed": args.run_unclaimed, "max_crashes": args.max_crashes}
    try:
        kept = outdir.resumed_options(out, given, args.shard)
    except outdir.FolderError as exc:
        raise UsageError(str(exc)) from None
    args.profile, args.backend, args.seed, args.timeout = kept["profile"], kept["backends"] or [], kept["seed"], kept["timeout"]
    args.ops = ",".join(kept["ops"]) if kept["ops"] else None
    args.expectations = kept["expectations"] or []
    args.run_unclaimed, args.max_crashes = bool(kept["run_unclaimed"]), kept["max_crashes"]


def _runnable_here(timeout: float) -> list[str]:
    """The entry-point backends that load and can run here (`kvconform run` without --backend), each
    loaded in its worker (loading.py) and handed over to the run; one note for each left out."""
    from kvconform import backends
    from kvconform.conformance.engine import loading
    loaded = loading.load_all(list(backends.entry_points()), timeout=timeout)
    runnable = []
    for spec, item in loaded.items():
        if item.problem:
            print(f"kvconform run: not running {spec}: {item.problem}", flush=True)
        else:
            loading.hand_over(item)
            runnable.append(spec)
    return runnable


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _clamp_jobs(jobs: int, specs: list[str], ops: list[str] | None, suite: Path, cpus: int) -> int:
    """--jobs at most the CPUs and the work units the run hands out (one suite module x one backend,
    plugin.pytest_xdist_make_scheduler): more workers only wait, and each costs a process start."""
    from kvconform.backends.base import OPS
    if jobs <= 1:
        return jobs
    families = {OPS[op] for op in ops} if ops else None
    modules = [m for m in suite.glob("test_*.py")
               if families is None or any(m.stem.startswith(f"test_{family}") for family in families)]
    units = max(1, len(modules)) * max(1, len(specs))
    clamped = max(1, min(jobs, cpus, units))
    if clamped < jobs:
        print(f"kvconform run: note: --jobs {jobs} clamped to {clamped} ({cpus} CPU(s), {units} work unit(s) of "
              f"one test module x one backend)", flush=True)
    return clamped


def _native_backends(specs: list[str], profile: str, *, chosen: bool, timeout: float) -> list[str]:
    """The backends of a native-only profile: each named one must run natively on an accelerator
    (`Availability.native`, read from its description, loaded in its worker and handed over to the run);
    without --backend, those of the found ones that do. A backend that cannot be loaded stays in: the
    run reports it NOT CHECKED."""
    from kvconform.conformance.engine import loading
    native = []
    for spec, item in loading.load_all(specs, timeout=timeout).items():
        loading.hand_over(item)
        desc = item.description
        if desc.get("native") or desc.get("load_error") or desc.get("claims_error"):
            native.append(spec)
        elif chosen:
            raise UsageError(f"profile {profile} runs natively on a GPU or TPU only: backend {spec!r} runs on "
                             f"{desc.get('device') or 'the CPU'} here (profile scale-smoke runs the "
                             f"same tests at small sizes anywhere)")
    if not native:
        raise UsageError(f"profile {profile} runs natively on a GPU or TPU only: no backend found here does "
                         f"(see `kvconform list`)")
    return native


def cmd_run(args) -> int:
    from kvconform.conformance.harness import profiles
    from kvconform.conformance.run import expectations, outdir
    if args.resume:
        _resumed(args, Path(args.out).resolve())
    if args.profile is None:
        args.profile = os.environ.get("KVCONFORM_PROFILE", "quick")
    if args.max_crashes is None:
        args.max_crashes = 3
    if args.profile not in profiles.PROFILES:
        raise UsageError(f"unknown profile {args.profile!r}: choose one of {', '.join(profiles.PROFILES)}")
    profile = profiles.get(args.profile)
    ops = _parse_ops(args.ops)
    if args.jobs < 1:
        raise UsageError("--jobs must be >= 1")
    _refuse_xdist(args.pytest_args)
    if args.max_crashes < 0:
        raise UsageError(f"--max-crashes must be >= 0 (0: never stop running a crashing op), got {args.max_crashes}")
    if args.shard:
        try:
            i, n = (int(x) for x in args.shard.split("/"))
            assert 1 <= i <= n
        except (ValueError, AssertionError):
            raise UsageError(f"--shard must be I/N with 1 <= I <= N, got {args.shard!r}") from None
    if args.seed is not None and profile.derandomize:
        # a CI owner passing a seed expects other cases; the profile would silently draw the same ones
        raise UsageError(f"--seed {args.seed}: profile {profile.name} is derandomized (the same cases on every "
                         f"run), so a seed changes nothing; use --profile quick or thorough to draw other cases")
    for path in args.expectations:
        try:
            expectations.load([path])
        except expectations.ExpectationError as exc:
            raise UsageError(f"argument --expectations: {exc}") from None
    specs = _named_backends(args.backend, "run")
    out = _check_out(args.out)
    # collect-only runs nothing: no verdict, and the output folder is left as it is (run/selection.py)
    collect_only = any(a in ("--co", "--collect-only") for a in args.pytest_args)
    try:   # before loading any backend: a second run into this folder stops here, in one line
        if not collect_only:
            outdir.refuse_foreign(out, "--out")
            outdir.lock(out)
    except outdir.FolderError as exc:
        raise UsageError(str(exc)) from None
    timeout = args.timeout or profile.call_timeout
    if not specs:
        specs = _runnable_here(timeout)
        if not specs:
            if not collect_only:
                outdir.unlock(out)
            print("kvconform run: NOT CHECKED no backend can run here (see `kvconform list`)", flush=True)
            return EXIT_NOT_CHECKED
    if profile.native_only:
        specs = _native_backends(specs, profile.name, chosen=bool(args.backend), timeout=timeout)
    suite = Path(args.suite) if args.suite else profiles.suite_dir(profile.suite)
    jobs = _clamp_jobs(args.jobs, specs, ops, suite, _cpus())
    config_dir = tempfile.TemporaryDirectory(prefix="kvconform-run-")   # an empty pytest config, outside --out
    ini = Path(config_dir.name) / "pytest.ini"
    ini.write_text("[pytest]\n")
    pytest_args = [str(suite), "-c", str(ini), "--rootdir", str(suite.parent.parent), "-p", "no:cacheprovider",
                   "-q", "--kvc-profile", args.profile] + ([] if collect_only else ["--kvc-out", str(out)])
    for spec in specs:
        pytest_args += ["--kvc-backend", spec]
    if ops:
        pytest_args += ["--kvc-ops", ",".join(ops)]
    if args.shard:
        pytest_args += ["--kvc-shard", args.shard]
    if args.resume:
        pytest_args.append("--kvc-resume")
    for path in args.expectations:
        pytest_args += ["--kvc-expectations", str(Path(path).resolve())]
    pytest_args += ["--kvc-timeout", str(timeout)]
    if args.run_unclaimed:
        pytest_args.append("--kvc-run-unclaimed")
    pytest_args += ["--kvc-max-crashes", str(args.max_crashes)]
    if args.progress:   # without pytest's [NN%] column, which the letters it replaces would have filled
        pytest_args += ["--kvc-progress", "-o", "console_output_style=classic"]
    if args.seed is not None:
        pytest_args.append(f"--hypothesis-seed={args.seed}")
    if jobs > 1:
        pytest_args += ["-n", str(jobs)]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        pytest_args += ["-p", "kvconform.conformance.plugin"]
    pytest_args += args.pytest_args
    print(f"kvconform run: backends {', '.join(specs)}; profile {args.profile}; out {out}", flush=True)
    import pytest

    from kvconform.conformance.run.interrupt import STOP
    try:
        code = int(pytest.main(pytest_args))
    finally:
        config_dir.cleanup()
    if collect_only:
        print(f"kvconform run: collect only (--co): nothing was run or judged; {out} was left as it was",
              flush=True)
        return EXIT_OK if code in (0, 5) else _run_exit(code)
    if STOP.exit_code() is not None and code in (EXIT_FAILED, STOP.exit_code()):
        # interrupted (130, 143) or cut short by a record it could not write (3, or 1 if a test failed before)
        if STOP.write_error:
            print(f"kvconform run: NOT CHECKED: the run was cut short: {STOP.write_error}; the reports in {out} "
                  f"are partial (`kvconform report {out}` rebuilds them, `kvconform run --resume --out {out}` "
                  f"continues the run, once there is space)", file=sys.stderr, flush=True)
        else:
            print(f"kvconform run: {STOP.reason()}: the reports in {out} are partial; `kvconform run --resume "
                  f"--out {out}` continues the run", file=sys.stderr, flush=True)
        return code
    return _run_exit(code)


def _run_exit(pytest_status: int) -> int:
    """`kvconform run`'s exit code from pytest's, which the plugin has set to the gate's verdict (0, 1,
    3: gate.combine); pytest's own other codes mapped onto the scheme."""
    if pytest_status in (EXIT_OK, EXIT_FAILED, EXIT_NOT_CHECKED):
        if pytest_status == EXIT_NOT_CHECKED:
            print("kvconform run: NOT CHECKED (exit 3): see the reasons above and in the reports", flush=True)
        return pytest_status
    if pytest_status == 2:     # pytest's "interrupted" (KeyboardInterrupt)
        return EXIT_SIGINT
    if pytest_status == 4:     # pytest's usage error, printed by pytest (an argument after --)
        return EXIT_USAGE
    print(f"kvconform run: NOT CHECKED: pytest ended with status {pytest_status} "
          f"({'no tests ran' if pytest_status == 5 else 'internal error, see above'})", flush=True)
    return EXIT_NOT_CHECKED
