"""`kvconform`: run the suite, list backends, clause coverage, replay reproducers, merge reports.

Exit codes, the same for every command and route (gate.py; conformance/README.md, "What the exit code
means"): 0 every claimed case checked and none failed; 1 a failure; 2 bad invocation (one line
`kvconform: error: ...` on stderr naming the argument and the rule, nothing run, never a traceback);
3 NOT CHECKED (nothing failed, but not everything claimed was checked: the reasons are printed and in
every report); 130 / 143 interrupted by SIGINT / SIGTERM.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from .gate import EXIT_FAILED, EXIT_NOT_CHECKED, EXIT_OK, EXIT_SIGINT, EXIT_USAGE

EXIT_CODES = """exit codes (every command; conformance/README.md, "What the exit code means"):
  0    every claimed case was checked and none failed (xfail allowed)
  1    at least one failure: fail, crash (incl. hang), flaky, xpass of a strict expectation
  2    bad invocation: a command-line argument or an unreadable expectations file (one line on
       stderr naming the argument and the rule; nothing was run)
  3    NOT CHECKED: nothing failed, but not everything claimed was checked (a backend that did not
       load, exited, hung or crashed while loading; claims that cannot be read or are invalid; a
       claimed op with no numerical test run; a requested op or shard missing; zero tests selected;
       a run cut short); each reason is printed and shown in every report
  130  interrupted by SIGINT (Ctrl-C)      143  interrupted by SIGTERM
A failure (1) takes precedence over NOT CHECKED (3); both are reported."""


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors: `kvconform: error: argument --timeout: <rule>`, exit 2
    (argparse's own prints the whole usage first). Sub-command parsers inherit the class."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"kvconform: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    from .profiles import timeout_seconds
    raw = argparse.RawDescriptionHelpFormatter
    p = _Parser(prog="kvconform", description="KV-cache kernel conformance suite", epilog=EXIT_CODES,
                formatter_class=raw)
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the conformance suite", epilog=EXIT_CODES, formatter_class=raw)
    run.add_argument("--backend", action="append", default=[], metavar="SPEC",
                     help="entry-point name or package.module:factory (repeatable; a repeated one runs once; "
                          "default: all that run here)")
    run.add_argument("--ops", default=None, help="comma-separated ops (default: all)")
    run.add_argument("--profile", default=None,
                     help="quick, ci, thorough or repro (default: $KVCONFORM_PROFILE or quick; with --resume: the "
                          "resumed run's)")
    run.add_argument("--out", default="kvconform-out",
                     help="output directory (default: kvconform-out); a new run replaces an earlier run's files there")
    run.add_argument("--jobs", "-j", type=int, default=1,
                     help="parallel workers (pytest-xdist); at most the CPUs and the work units (test module x "
                          "backend), with a note")
    run.add_argument("--shard", default=None, metavar="I/N")
    run.add_argument("--resume", action="store_true",
                     help="continue the run in --out: its options from run.json, only the tests not yet recorded")
    run.add_argument("--expectations", action="append", default=[], metavar="TOML")
    run.add_argument("--seed", type=int, default=None,
                     help="Hypothesis seed (profiles quick/thorough; ci and repro are derandomized and reject it)")
    run.add_argument("--timeout", type=timeout_seconds, default=None,
                     help="seconds per backend call, and for loading the backend (import, factory, availability, "
                          "capabilities); > 0, at most a day (default: the profile's)")
    run.add_argument("--run-unclaimed", action="store_true")
    run.add_argument("--max-crashes", type=int, default=None, metavar="N",
                     help="after N crashes or hangs in a row of one op, record its remaining tests as `not run` "
                          "without running them (default 3; 0: never); the crashes fail the run")
    run.add_argument("--progress", action="store_true",
                     help="show where the run stands (backend, op, tests done / total, failures so far, time): "
                          "one updating line on a terminal, one line per backend x op in a log")
    run.add_argument("--suite", default=None, help=argparse.SUPPRESS)
    run.add_argument("pytest_args", nargs="*", help="extra pytest arguments after --")

    lst = sub.add_parser("list", help="backends found, whether they can run here, their claims",
                         epilog=EXIT_CODES, formatter_class=raw)
    lst.add_argument("--backend", action="append", default=[], metavar="SPEC",
                     help="list this backend only (entry-point name or package.module:factory; repeatable); "
                          "exit 3 if one cannot be loaded")
    lst.add_argument("--timeout", type=timeout_seconds, default=120.0,
                     help="seconds for loading each backend in its worker (default 120)")
    lst.add_argument("--profile", default=None, metavar="NAME",
                     help="the cases of a profile of fixed cases instead (models: model x op x shape)")

    chk = sub.add_parser("check-backend", help="what is wrong with a backend, in plain words: loading, claims, "
                                               "method signatures, one small case per claimed op",
                         epilog=EXIT_CODES, formatter_class=raw)
    chk.add_argument("backend", metavar="SPEC", help="entry-point name or package.module:factory")
    chk.add_argument("--timeout", type=timeout_seconds, default=120.0,
                     help="seconds per backend call and for loading it (default 120)")

    cov = sub.add_parser("coverage", help="clause x layer coverage of the suite")
    cov.add_argument("--family", default=None, help="clause prefix, e.g. PA")
    cov.add_argument("--json", action="store_true")
    cov.add_argument("--suite", default=None, metavar="DIR",
                     help="directory of test_*.py suite modules (default: the installed suite)")

    rep = sub.add_parser("replay", help="re-run a reproducer directory")
    rep.add_argument("directory")
    rep.add_argument("--backend", default=None,
                     help="the backend to run it on (default: the one case.json records, if it is an installed "
                          "entry-point name; a package.module:factory is imported only when given here)")
    rep.add_argument("--no-isolation", action="store_true", help="run the backend in this process")

    report = sub.add_parser("report", help="rebuild a run's reports from its results (report DIR), or join "
                                           "shard reports and judge the whole: every shard present, every "
                                           "claimed op checked (report merge A.json B.json ... --out DIR)",
                            usage="kvconform report DIR | kvconform report merge A.json B.json ... --out DIR",
                            epilog=EXIT_CODES, formatter_class=raw)
    report.add_argument("target", metavar="DIR|merge",
                        help="a run's output folder: write report.json, report.md, report.html and junit.xml "
                             "again from its results.jsonl and run.json; or `merge`")
    report.add_argument("reports", nargs="*", metavar="REPORT", help="(merge) report.json files or folders")
    report.add_argument("--out", default=None, help="(merge) output folder")
    return p


def main(argv=None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:   # _Parser already printed its one-line usage error (or --help its text)
        return EXIT_USAGE if exc.code else 0
    try:
        return {"run": cmd_run, "list": cmd_list, "check-backend": cmd_check_backend, "coverage": cmd_coverage,
                "replay": cmd_replay, "report": cmd_report}[args.command](args)
    except UsageError as exc:
        print(f"kvconform: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kvconform: interrupted (kvconform run --resume continues a run)", file=sys.stderr)
        return EXIT_SIGINT


# --- run -------------------------------------------------------------------------------------------

def _check_out(out: str) -> Path:
    if not out.strip():
        raise UsageError(f"--out {out!r}: must name a folder (kvconform never writes into the current "
                         f"folder unasked; give --out . for that)")
    path = Path(out).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UsageError(f"--out {out} is not writable: {exc.strerror or exc}") from None
    return path


def _parse_ops(text: str | None) -> list[str] | None:
    """--ops: op names separated by commas (None: every op); an empty list or an unknown name is bad input."""
    from kvconform.backends.base import OPS, did_you_mean
    if text is None:
        return None
    ops = list(dict.fromkeys(o.strip() for o in text.split(",") if o.strip()))
    if not ops:
        raise UsageError(f"--ops {text!r} names no op: give op names separated by commas "
                         f"(known: {', '.join(OPS)})")
    unknown = [o for o in ops if o not in OPS]
    if unknown:
        raise UsageError("; ".join(f"--ops: unknown op {o!r}{did_you_mean(o, OPS)}" for o in unknown))
    return ops


def _resumed(args, out: Path) -> None:
    """--resume: fill the options not given from the resumed run's run.json (outdir.RESUMED); a given
    option that differs is a usage error. A folder without a run to resume is run from the start."""
    from . import outdir
    if outdir.read_run(out) is None:
        return
    ops = [o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else None
    given = {"profile": args.profile, "backends": args.backend or None, "ops": ops, "seed": args.seed,
             "timeout": args.timeout, "expectations": [str(Path(p).resolve()) for p in args.expectations] or None,
             "run_unclaimed": args.run_unclaimed, "max_crashes": args.max_crashes}
    try:
        kept = outdir.resumed_options(out, given)
    except outdir.FolderError as exc:
        raise UsageError(str(exc)) from None
    args.profile, args.backend, args.seed, args.timeout = kept["profile"], kept["backends"] or [], kept["seed"], kept["timeout"]
    args.ops = ",".join(kept["ops"]) if kept["ops"] else None
    args.expectations = kept["expectations"] or []
    args.run_unclaimed, args.max_crashes = bool(kept["run_unclaimed"]), kept["max_crashes"]


def _named_backends(specs: list[str], command: str) -> list[str]:
    """The backends named with --backend, each resolved (bad input: an unknown name, a malformed spec, a
    module that does not exist) and once: a repeat (or a second name of the same factory) is dropped
    with a note, so that no result is counted twice."""
    from kvconform import backends
    kept: dict[str, str] = {}   # spec -> module:factory
    for spec in specs:
        try:
            target = backends.resolve(spec)
        except backends.BackendLoadError as exc:
            raise UsageError(f"argument --backend: {exc}") from None
        twin = next((s for s, t in kept.items() if t == target), None)
        if twin is not None:
            print(f"kvconform {command}: note: --backend {spec} names the same backend as {twin} "
                  f"({target}); it is used once", flush=True)
            continue
        kept[spec] = target
    return list(kept)


def _runnable_here(timeout: float) -> list[str]:
    """The entry-point backends that load and can run here (`kvconform run` without --backend), each
    loaded in its worker (loading.py) and handed over to the run; one note for each left out."""
    from kvconform import backends

    from . import loading
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
    from . import loading
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
    from . import expectations, outdir, profiles
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
    try:   # before loading any backend: a second run into this folder stops here, in one line
        outdir.lock(out)
    except outdir.FolderError as exc:
        raise UsageError(str(exc)) from None
    timeout = args.timeout or profile.call_timeout
    if not specs:
        specs = _runnable_here(timeout)
        if not specs:
            outdir.unlock(out)
            print("kvconform run: NOT CHECKED no backend can run here (see `kvconform list`)", flush=True)
            return EXIT_NOT_CHECKED
    if profile.native_only:
        specs = _native_backends(specs, profile.name, chosen=bool(args.backend), timeout=timeout)
    suite = Path(args.suite) if args.suite else Path(__file__).resolve().parent / profile.suite
    jobs = _clamp_jobs(args.jobs, specs, ops, suite, _cpus())
    config_dir = tempfile.TemporaryDirectory(prefix="kvconform-run-")   # an empty pytest config, outside --out
    ini = Path(config_dir.name) / "pytest.ini"
    ini.write_text("[pytest]\n")
    pytest_args = [str(suite), "-c", str(ini), "--rootdir", str(suite.parent.parent), "-p", "no:cacheprovider",
                   "-q", "--kvc-out", str(out), "--kvc-profile", args.profile]
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
    from .interrupt import STOP
    try:
        code = int(pytest.main(pytest_args))
    finally:
        config_dir.cleanup()
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


# --- list ------------------------------------------------------------------------------------------

def cmd_list(args) -> int:
    """Every backend found (or those named with --backend), each loaded in its worker: its line, or the
    one line saying why it cannot be loaded. Exit 3 when a backend named with --backend cannot."""
    from kvconform import backends
    if args.profile is not None:
        return _list_profile(args.profile)
    from . import loading
    specs = _named_backends(args.backend, "list") if args.backend else list(backends.entry_points())
    loaded = loading.load_all(specs, timeout=args.timeout)
    for spec in specs:
        _print_backend(loaded[spec])
        loaded[spec].stop()
    unusable = [spec for spec in specs if loaded[spec].description.get("load_error")
                or loaded[spec].description.get("claims_error")]
    return EXIT_NOT_CHECKED if args.backend and unusable else EXIT_OK


def _list_profile(name: str) -> int:
    """`list --profile models`: its table of model x op x shape (the other profiles draw their cases)."""
    from . import profiles
    if name not in profiles.PROFILES:
        raise UsageError(f"unknown profile {name!r}: choose one of {', '.join(profiles.PROFILES)}")
    if name != "models":
        raise UsageError(f"--profile {name}: only the models profile has a table of named cases (profile {name} "
                         f"draws its cases within each backend's claims)")
    from . import models
    for line in models.table():
        print(line)
    return EXIT_OK


def _print_backend(loaded) -> None:
    """One backend's line (version, where it runs) and one line per claimed op with the claim fields that
    op reads (backends/base.py CLAIM_FIELDS; features, layouts and limits where the op registers any)."""
    desc = loaded.description
    if desc.get("load_error") or desc.get("claims_error"):
        print(f"{loaded.spec:<10} {loaded.problem}")
        return
    where = desc["device"] if desc["available"] else f"cannot run here: {desc['reason']}"
    print(f"{loaded.spec:<10} {desc['version']:<10} {where}")
    for op, claims in desc["capabilities"].items():
        print(f"    {op:<24} {_claim_text(op, claims) or '(reads no claim fields: every drawn case is claimed)'}")


def _claim_text(op: str, claims: dict) -> str:
    """`dtypes=float32,bfloat16 page_sizes=any ...`: the fields `op` reads; an unknown op shows them all."""
    from kvconform.backends.base import CLAIM_FIELDS, FEATURES, LAYOUTS, OPS
    fields = CLAIM_FIELDS.get(op, ("dtypes", "kv_dtypes", "page_sizes", "head_dims"))
    names = {"dtypes": "dtypes", "kv_dtypes": "kv", "page_sizes": "page_sizes", "head_dims": "head_dims"}
    parts = []
    for name in fields:
        value = claims.get(name)
        if name in ("page_sizes", "head_dims"):
            parts.append(f"{names[name]}={','.join(map(str, value)) if value else 'any'}")
        else:
            parts.append(f"{names[name]}={','.join(value or []) or '-'}")
    if FEATURES.get(op) or op not in OPS or claims.get("features"):
        parts.append(f"features={','.join(claims.get('features') or []) or '-'}")
    if LAYOUTS.get(op) or claims.get("layouts"):
        parts.append(f"layouts={','.join(claims.get('layouts') or []) or '-'}")
    if claims.get("limits"):
        parts.append("limits=" + json.dumps(claims["limits"], separators=(",", ":")))
    return " ".join(parts)


def cmd_check_backend(args) -> int:
    from kvconform import backends

    from .backend_check import check_backend
    try:
        backends.resolve(args.backend)
    except backends.BackendLoadError as exc:
        raise UsageError(str(exc)) from None
    check = check_backend(args.backend, timeout=args.timeout)
    for note in check.notes:
        print(f"ok    {note}")
    for f in check.findings:
        print(f"WRONG {f.op + ': ' if f.op else ''}{f.problem}")
    for reason in check.not_checked:
        print(f"NOT CHECKED {args.backend}: {reason}")
    if check.findings:
        print(f"kvconform check-backend: {len(check.findings)} problem(s) found (exit 1)")
    elif check.not_checked:
        print("kvconform check-backend: NOT CHECKED (exit 3): the backend could not be checked, see above")
    else:
        print("kvconform check-backend: no problem found (now run `kvconform run --backend "
              f"{args.backend} --profile ci`)")
    return check.exit_code


# --- coverage --------------------------------------------------------------------------------------

def cmd_coverage(args) -> int:
    from kvconform.backends.base import did_you_mean

    from . import coverage
    clauses = coverage.defined_clauses()
    if args.suite is not None and not Path(args.suite).is_dir():
        raise UsageError(f"--suite {args.suite}: no such directory (it must hold the suite's test_*.py modules)")
    families = sorted({c.split("-")[0] for c in clauses})
    if args.family is not None and args.family.upper() not in families:
        raise UsageError(f"--family {args.family!r}: no spec clause has that prefix"
                         f"{did_you_mean(args.family.upper(), families)}")
    tests = coverage.suite_tests(Path(args.suite) if args.suite else None)
    table = coverage.coverage_table(clauses, tests)
    prefixes = (args.family.upper(),) if args.family else ()
    permissions = coverage.permission_table()
    if args.json:
        print(json.dumps({"clauses": clauses, "coverage": table, "marked": coverage.marked_clauses(),
                          "permissions": permissions}, indent=1))
    else:
        for line in coverage.render(table, clauses, prefixes, coverage.marked_clauses()):
            print(line)
        if not prefixes:    # the permissions of spec/numerics.md, each with its backends
            print()
            for line in coverage.render_permissions(permissions):
                print(line)
    return 0


# --- replay ----------------------------------------------------------------------------------------

def _replay_backend(args, meta: dict) -> str:
    """The backend a replay runs: --backend, else the one case.json records if it is an installed
    entry-point name. A reproducer is data: a `package.module:factory` written in case.json (which anyone
    who hands over a reproducer can edit) is never imported unless the user names it."""
    from kvconform import backends
    from .backend_text import visible
    if args.backend:
        return args.backend
    recorded = meta.get("backend")
    if recorded is None:
        return "numpy"
    if isinstance(recorded, str) and recorded in backends.entry_points():
        return recorded
    raise UsageError(f"the reproducer names the backend {visible(repr(recorded))}, which is not an installed "
                     f"entry point; replay imports such a backend only when you name it: add --backend SPEC")


def cmd_replay(args) -> int:
    from . import case as case_io
    from . import flaky
    from .worker import BackendUnavailable, InProcess, Worker
    from kvconform import backends, reference
    try:
        case, meta = case_io.load(Path(args.directory))
    except case_io.NoReproducer as exc:
        raise UsageError(str(exc)) from None
    except case_io.CorruptReproducer as exc:
        raise UsageError(f"corrupted reproducer: {exc}") from None
    spec = _replay_backend(args, meta)
    if not hasattr(reference, case.op):
        raise UsageError(f"reproducer op {case.op!r} is not implemented by this kvconform's reference")
    if case.rejection is not None:
        from . import rejection as rej
        try:
            expected = rej.run_reference(getattr(reference, case.op), case)
        except rej.InvalidErrorCase as exc:
            raise UsageError(f"corrupted reproducer: it expects a rejection, but {exc}") from None
    else:
        try:
            expected = getattr(reference, case.op)(**case.inputs)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"corrupted reproducer: the reference rejects its inputs: {exc}") from None
    before = _history(Path(args.directory), meta)
    try:
        backends.resolve(spec)
        worker = InProcess(spec) if args.no_isolation else Worker(spec)
        worker.describe()
    except (backends.BackendLoadError, BackendUnavailable) as exc:
        raise UsageError(str(exc)) from None
    print(f"replay {args.directory}: op {case.op}, backend {spec}, clauses {', '.join(meta.get('clauses') or [])}")
    print(f"  case: {case.shape_summary()}")
    if (meta.get("diagnosis") or {}).get("summary"):
        print(f"  diagnosis (when recorded): {meta['diagnosis']['summary']}")
    if case.rejection is not None:
        print(f"  expected: a {expected.describe()}")
        print(f"  reference: {expected.error}: {expected.reference_message}")
    if before:
        print(f"  after {len(before)} earlier call(s) recorded with the failure (call history)")
    recorded = meta.get("flaky") if isinstance(meta.get("flaky"), dict) else None
    times = flaky.REPLAYS if recorded else 1
    runs = []
    try:
        for _ in range(times):
            runs.append(_replay_once(case, meta, before, expected, worker))
            if runs[-1][0] == "crash":
                break
    finally:
        worker.stop()
    failed = [r for r in runs if r[0] != "ok"]
    shown = failed[0] if failed else runs[0]
    for line in shown[1]:
        print(line)
    if recorded:
        rate = f"failed {len(failed)} of {len(runs)} replays"
        was = f"recorded flaky: failed {recorded.get('failed')} of {recorded.get('replays')} replays"
        print(f"  FLAKY: {rate} ({was})" if failed else
              f"  NOT REPRODUCED: passed {len(runs)} of {len(runs)} replays ({was}; a flaky failure may need more)")
    return 1 if failed else 0


def _replay_once(case, meta: dict, before: list, expected, worker) -> tuple[str, list[str]]:
    """One replay: ("ok" | "fail" | "crash", the lines that say what happened)."""
    from . import rejection as rej
    from .backend_text import cap, visible
    from .harness import compare_outputs, raised_lines
    from .strided import layouts_of
    from .worker import BackendCrash, BackendDeclined, BackendError, BackendProtocolError, EngineError
    try:
        for earlier in before:   # a call-history failure: the calls that came first, in order
            worker.call(earlier.op, earlier.inputs, layouts=layouts_of(earlier))
        actual, mutated = worker.call(case.op, case.inputs, layouts=layouts_of(case))
    except BackendCrash as exc:
        return "crash", [f"  CRASH: {visible(exc)}"] + _printed(worker)
    except BackendError as exc:
        if case.rejection is not None:
            problem = rej.judge(expected, exc.type_name, exc.mro, exc.message)
            if problem is None:
                return "ok", [f"  ok   rejected: {exc.type_name}: {cap(visible(exc.message), 1000)}"]
            return "fail", [f"  FAIL: {cap(visible(problem), 2000)}"] + _printed(worker)
        error, detail = raised_lines(exc)
        return "fail", ([f"  FAIL: backend raised {exc.type_name}: {cap(visible(error), 2000)}"]
                        + [f"        {cap(visible(line), 1000)}" for line in detail if line] + _printed(worker))
    except BackendDeclined as exc:
        return _declined(case, meta, worker, str(exc))
    except BackendProtocolError as exc:
        what = "accepted invalid input, and the backend " if case.rejection is not None else "the backend "
        return "fail", [f"  FAIL: {what}{visible(exc)}"]
    except EngineError as exc:
        return "fail", [f"  ERROR (the engine's, not the backend's): {visible(exc)}"]
    if case.rejection is not None:
        return "fail", [f"  FAIL: {cap(visible(rej.accepted(expected, actual)), 2000)}"]
    if mutated:
        return "fail", [f"  FAIL: the backend modified or aliased its inputs: {'; '.join(mutated)}"]
    lines, ok = [], True
    for res in compare_outputs(case, expected, actual):
        status = "ok  " if res.ok else "FAIL"
        extra = f", max ulp {res.max_ulp:.3g}" if res.max_ulp is not None else ""
        lines.append(f"  {status} {res.name}: {res.n_bad}/{res.compared} elements out of tolerance, "
                     f"max abs error {res.max_abs:.3g}{extra}, error/allowed {res.error_ratio:.3g} ({res.kind})")
        if not res.ok:
            lines.append(f"       {res.summary()}")
            ok = False
    return ("ok", lines) if ok else ("fail", lines + _printed(worker))


def _printed(worker) -> list[str]:
    """What the backend printed during the failing call, capped (the worker captures it)."""
    from .backend_text import OUTPUT_CAP, cap, visible
    output = worker.crash_output if getattr(worker, "crash_output", None) is not None else worker.output()
    if output is None:
        return []
    output.discard()
    text = cap(visible(output.text), OUTPUT_CAP)
    return [f"  the backend printed {output.size:,} bytes:"] + [f"    | {line}" for line in text.splitlines()]


def _declined(case, meta: dict, worker, reason: str) -> tuple[str, list[str]]:
    """The backend raised kvconform.Unsupported: as in a run, `unsupported` for a case outside its claims
    (not a failure), a failure for a case inside them."""
    from kvconform.backends.base import OpClaims
    from .backend_text import visible
    from .strategies.constraints import case_space, outside
    raw = (worker.describe().get("capabilities") or {}).get(case.op)
    if raw is None:
        reasons = [f"does not claim op {case.op}"]
    else:
        reasons = [f"does not claim feature {f}" for f in meta.get("features") or []
                   if f != "base" and f not in raw.get("features", [])]
        reasons += outside(OpClaims.from_json(raw), case_space(case.params))
    if reasons:
        return "ok", [f"  unsupported: the backend declined a case outside its claims ({'; '.join(reasons)}): "
                      f"kvconform.Unsupported({visible(repr(reason))}); not a failure"]
    what = "instead of rejecting the malformed call" if case.rejection is not None else \
        "for a case inside its claims (state the limit in its OpClaims instead)"
    return "fail", [f"  FAIL: raised kvconform.Unsupported({visible(repr(reason))}) {what}"]


def _history(directory: Path, meta: dict) -> list:
    """The cases called before the failing one (case.json "before": their sub-directories, in order)."""
    from . import case as case_io
    cases = []
    for name in meta.get("before") or []:
        if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith("."):
            raise UsageError(f"corrupted reproducer: case.json 'before' entry {name!r} is not a sub-directory name")
        try:
            cases.append(case_io.load(directory / name)[0])
        except case_io.CorruptReproducer as exc:
            raise UsageError(f"corrupted reproducer: {exc}") from None
    return cases


# --- report DIR, report merge ---------------------------------------------------------------------

def cmd_report(args) -> int:
    if args.target == "merge":
        if not args.reports or not args.out:
            raise UsageError("report merge needs report files and --out DIR: kvconform report merge A.json B.json "
                             "... --out DIR")
        return _report_merge(args)
    if args.reports or args.out:
        raise UsageError(f"report {args.target}: rebuilds the reports in that folder and takes nothing else "
                         f"(to join reports: kvconform report merge A.json B.json ... --out DIR)")
    return _report_rebuild(Path(args.target))


def _report_rebuild(out: Path) -> int:
    """`kvconform report DIR`: write DIR's four reports again from results.jsonl and run.json (after a
    killed run, a full disk, or a kvconform with better reports). Exit status: the gate's verdict over
    what DIR holds (gate.py; a partial run is NOT CHECKED)."""
    from . import gate, outdir
    from .report import build
    if not (out / outdir.RESULTS).is_file():
        raise UsageError(f"{out} holds no {outdir.RESULTS}: not the output folder of a kvconform run")
    try:
        outdir.lock(out)
        report = build.write_all(out)
    except outdir.FolderError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write the reports in {out}: {exc.strerror or exc}") from None
    finally:
        outdir.unlock(out)
    for line in build.summary_lines(report) + gate.lines(report["gate"]):
        print(line)
    print(f"rebuilt {out}/report.json, report.md, report.html, junit.xml from {len(report['results'])} results")
    return report["gate"]["exit_code"]


def _report_merge(args) -> int:
    """Merge reports and judge the whole (gate.py): every shard of a run present, every claimed op checked."""
    from . import gate
    from .report import build
    try:
        reports = [build.load_report(p) for p in args.reports]
        merged = build.merge(reports, names=list(args.reports))
    except build.ReportError as exc:
        raise UsageError(str(exc)) from None
    out = _check_out(args.out)
    build.write_all(out, merged)
    for line in build.summary_lines(merged) + gate.lines(merged["gate"]):
        print(line)
    print(f"merged {len(reports)} reports into {out}/report.json, report.md, report.html, junit.xml")
    return merged["gate"]["exit_code"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
