"""`kvconform`: run the suite, list backends, clause coverage, replay reproducers, merge reports.

Bad input (unknown backend or op, malformed module:factory, an option's value breaking its rule,
unwritable --out, no or a corrupted reproducer) prints one line `kvconform: error: ...` and exits 2; no
traceback reaches the user.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

EXIT_USAGE = 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors: `kvconform: error: argument --timeout: <rule>`, exit 2
    (argparse's own prints the whole usage first). Sub-command parsers inherit the class."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"kvconform: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    from .profiles import timeout_seconds
    p = _Parser(prog="kvconform", description="KV-cache kernel conformance suite")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the conformance suite")
    run.add_argument("--backend", action="append", default=[], metavar="SPEC",
                     help="entry-point name or package.module:factory (repeatable; default: all that run here)")
    run.add_argument("--ops", default=None, help="comma-separated ops (default: all)")
    run.add_argument("--profile", default=None,
                     help="quick, ci, thorough or repro (default: $KVCONFORM_PROFILE or quick; with --resume: the "
                          "resumed run's)")
    run.add_argument("--out", default="kvconform-out",
                     help="output directory (default: kvconform-out); a new run replaces an earlier run's files there")
    run.add_argument("--jobs", "-j", type=int, default=1, help="parallel workers (pytest-xdist)")
    run.add_argument("--shard", default=None, metavar="I/N")
    run.add_argument("--resume", action="store_true",
                     help="continue the run in --out: its options from run.json, only the tests not yet recorded")
    run.add_argument("--expectations", action="append", default=[], metavar="TOML")
    run.add_argument("--seed", type=int, default=None, help="Hypothesis seed (profiles quick/thorough)")
    run.add_argument("--timeout", type=timeout_seconds, default=None, help="seconds per backend call, > 0")
    run.add_argument("--run-unclaimed", action="store_true")
    run.add_argument("--max-crashes", type=int, default=None, metavar="N",
                     help="after N crashes or hangs in a row of one op, record its remaining tests as `not run` "
                          "without running them (default 3; 0: never); the crashes fail the run")
    run.add_argument("--suite", default=None, help=argparse.SUPPRESS)
    run.add_argument("pytest_args", nargs="*", help="extra pytest arguments after --")

    lst = sub.add_parser("list", help="backends found, whether they can run here, their claims")
    lst.add_argument("--backend", action="append", default=[], metavar="SPEC",
                     help="list this backend only (entry-point name or package.module:factory; repeatable)")

    chk = sub.add_parser("check-backend", help="what is wrong with a backend, in plain words: loading, claim "
                                               "names, method signatures, one small case per claimed op")
    chk.add_argument("backend", metavar="SPEC", help="entry-point name or package.module:factory")
    chk.add_argument("--timeout", type=float, default=120.0, help="seconds per backend call (default 120)")

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
                                           "shard reports (report merge A.json B.json ... --out DIR)",
                            usage="kvconform report DIR | kvconform report merge A.json B.json ... --out DIR")
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
        return 130


# --- run -------------------------------------------------------------------------------------------

def _check_out(out: str) -> Path:
    path = Path(out).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UsageError(f"--out {out} is not writable: {exc.strerror or exc}") from None
    return path


def _backends_for_run(requested: list[str]) -> list[str]:
    from kvconform import backends
    if not requested:
        ok = [f.name for f in backends.discover() if f.backend is not None and f.backend.availability().ok]
        if not ok:
            raise UsageError("no backend can run here (see `kvconform list`)")
        return ok
    for spec in requested:
        try:
            backend = backends.load(spec)
        except backends.BackendLoadError as exc:
            raise UsageError(str(exc)) from None
        avail = backend.availability()
        if not avail.ok:
            raise UsageError(f"backend {spec!r} cannot run here: {avail.reason}")
    return requested


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


def _native_backends(specs: list[str], profile: str, *, chosen: bool) -> list[str]:
    """The backends of a native-only profile: each named one must run natively on an accelerator
    (`Availability.native`); without --backend, those of the found ones that do."""
    from kvconform import backends
    native = []
    for spec in specs:
        avail = backends.load(spec).availability()
        if avail.native:
            native.append(spec)
        elif chosen:
            raise UsageError(f"profile {profile} runs natively on a GPU or TPU only: backend {spec!r} runs on "
                             f"{avail.device or 'the CPU'} here (profile scale-smoke runs the same tests at small "
                             f"sizes anywhere)")
    if not native:
        raise UsageError(f"profile {profile} runs natively on a GPU or TPU only: no backend found here does "
                         f"(see `kvconform list`)")
    return native


def cmd_run(args) -> int:
    from kvconform.backends.base import OPS
    from . import outdir, profiles
    if args.resume:
        _resumed(args, Path(args.out).resolve())
    if args.profile is None:
        args.profile = os.environ.get("KVCONFORM_PROFILE", "quick")
    if args.max_crashes is None:
        args.max_crashes = 3
    if args.profile not in profiles.PROFILES:
        raise UsageError(f"unknown profile {args.profile!r}: choose one of {', '.join(profiles.PROFILES)}")
    ops = None
    if args.ops:
        ops = [o.strip() for o in args.ops.split(",") if o.strip()]
        unknown = [o for o in ops if o not in OPS]
        if unknown:
            raise UsageError(f"unknown op(s) {', '.join(unknown)}: known ops are {', '.join(OPS)}")
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
    for path in args.expectations:
        from . import expectations
        try:
            expectations.load([path])
        except expectations.ExpectationError as exc:
            raise UsageError(str(exc)) from None
    profile = profiles.get(args.profile)
    out = _check_out(args.out)
    try:   # before loading any backend: a second run into this folder stops here, in one line
        outdir.lock(out)
    except outdir.FolderError as exc:
        raise UsageError(str(exc)) from None
    specs = _backends_for_run(args.backend)
    if profile.native_only:
        specs = _native_backends(specs, profile.name, chosen=bool(args.backend))
    suite = Path(args.suite) if args.suite else Path(__file__).resolve().parent / profile.suite
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
    if args.timeout is not None:
        pytest_args += ["--kvc-timeout", str(args.timeout)]
    if args.run_unclaimed:
        pytest_args.append("--kvc-run-unclaimed")
    pytest_args += ["--kvc-max-crashes", str(args.max_crashes)]
    if args.seed is not None:
        pytest_args.append(f"--hypothesis-seed={args.seed}")
    if args.jobs > 1:
        pytest_args += ["-n", str(args.jobs)]
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
    if STOP.exit_code() is not None and code in (1, STOP.exit_code()):
        # interrupted (130, 143) or cut short by a record it could not write (3, or 1 if a test failed before)
        if STOP.write_error:
            print(f"kvconform run: NOT CHECKED: the run was cut short: {STOP.write_error}; the reports in {out} "
                  f"are partial (`kvconform report {out}` rebuilds them, `kvconform run --resume --out {out}` "
                  f"continues the run, once there is space)", file=sys.stderr, flush=True)
        else:
            print(f"kvconform run: {STOP.reason()}: the reports in {out} are partial; `kvconform run --resume "
                  f"--out {out}` continues the run", file=sys.stderr, flush=True)
        return code
    if code == 5 and (args.resume or args.shard):   # this shard / the resumed rest holds nothing
        print("kvconform run: no test left to run", flush=True)
        return 0
    code = 0 if code in (0, 5) else (1 if code == 1 else code)
    if not args.shard:
        # Green means checked: claims that cannot be read, or a claimed op with no numerical test run,
        # make the run fail however many tests passed (a skipped suite is never a pass).
        from .report import build
        try:
            report = build.load_report(out)
        except build.ReportError:
            report = None
        problems = build.unchecked(report, ops or list(profile.ops or OPS)) if report is not None else [
            "no report was written: nothing was checked"]
        for problem in problems:
            print(f"kvconform run: NOT CHECKED {problem}", flush=True)
        # extra pytest arguments (-k, -m, node ids) select tests by hand: then the lines are a warning
        if problems and code == 0 and not args.pytest_args:
            code = 1
    return code


# --- list ------------------------------------------------------------------------------------------

def cmd_list(args) -> int:
    from kvconform import backends
    if args.backend:
        found = []
        for spec in args.backend:
            try:
                target = backends.resolve(spec)
            except backends.BackendLoadError as exc:
                raise UsageError(str(exc)) from None
            try:
                found.append(backends.Found(spec, target, backend=backends.load(spec)))
            except backends.BackendLoadError as exc:
                found.append(backends.Found(spec, target, error=str(exc)))
    else:
        found = backends.discover()
    for item in found:
        _print_backend(item)
    return 0


def _print_backend(found) -> None:
    """One backend's line (version, where it runs) and one line per claimed op, limits included."""
    if found.backend is None:
        print(f"{found.name:<10} cannot load: {found.error}")
        return
    try:
        desc = found.backend.describe()
    except Exception as exc:
        print(f"{found.name:<10} cannot describe itself: {type(exc).__name__}: {exc}")
        return
    where = desc["device"] if desc["available"] else f"cannot run here: {desc['reason']}"
    print(f"{found.name:<10} {desc['version']:<10} {where}")
    for op, claims in desc["capabilities"].items():
        feats = ",".join(claims.get("features", [])) or "-"
        line = (f"    {op:<24} dtypes={','.join(claims.get('dtypes', []))} "
                f"kv={','.join(claims.get('kv_dtypes', []))} page_sizes={claims.get('page_sizes') or 'any'} "
                f"head_dims={claims.get('head_dims') or 'any'} features={feats}")
        if claims.get("layouts"):
            line += f" layouts={','.join(claims['layouts'])}"
        if claims.get("limits"):
            line += " limits=" + json.dumps(claims["limits"], separators=(",", ":"))
        print(line)


def cmd_check_backend(args) -> int:
    from kvconform import backends
    from .backend_check import check_backend
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    try:
        backends.resolve(args.backend)
    except backends.BackendLoadError as exc:
        raise UsageError(str(exc)) from None
    findings, notes = check_backend(args.backend, timeout=args.timeout)
    for note in notes:
        print(f"ok    {note}")
    for f in findings:
        print(f"WRONG {f.op + ': ' if f.op else ''}{f.problem}")
    print(f"kvconform check-backend: {len(findings)} problem(s) found" if findings
          else "kvconform check-backend: no problem found (now run `kvconform run --backend "
               f"{args.backend} --profile ci`)")
    return 1 if findings else 0


# --- coverage --------------------------------------------------------------------------------------

def cmd_coverage(args) -> int:
    from . import coverage
    clauses = coverage.defined_clauses()
    if args.suite is not None and not Path(args.suite).is_dir():
        raise UsageError(f"--suite {args.suite}: no such directory (it must hold the suite's test_*.py modules)")
    tests = coverage.suite_tests(Path(args.suite) if args.suite else None)
    table = coverage.coverage_table(clauses, tests)
    prefixes = (args.family.upper(),) if args.family else ()
    if args.json:
        print(json.dumps({"clauses": clauses, "coverage": table, "marked": coverage.marked_clauses()}, indent=1))
    else:
        for line in coverage.render(table, clauses, prefixes, coverage.marked_clauses()):
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
    from .worker import BackendCrash, BackendDeclined, BackendError, BackendProtocolError, EngineError
    try:
        for earlier in before:   # a call-history failure: the calls that came first, in order
            worker.call(earlier.op, earlier.inputs)
        actual, mutated = worker.call(case.op, case.inputs)
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
                     f"max abs error {res.max_abs:.3g}{extra}, headroom {res.headroom:.3g} ({res.kind})")
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
    killed run, a full disk, or a kvconform with better reports). Exit status as the run's: 1 when a
    result failed, 3 when the run is partial or something claimed was not checked, else 0."""
    from . import outdir
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
    for line in build.summary_lines(report):
        print(line)
    print(f"rebuilt {out}/report.json, report.md, report.html, junit.xml from {len(report['results'])} results")
    if any(r["status"] in build.FAILED for r in report["results"]):
        return 1
    return 3 if report.get("partial") or build.unchecked(report) else 0


def _report_merge(args) -> int:
    from .report import build
    try:
        reports = [build.load_report(p) for p in args.reports]
        merged = build.merge(reports)
    except build.ReportError as exc:
        raise UsageError(str(exc)) from None
    out = _check_out(args.out)
    build.write_all(out, merged)
    for line in build.summary_lines(merged):
        print(line)
    print(f"merged {len(reports)} reports into {out}/report.json, report.md, report.html, junit.xml")
    bad = sum(merged["summary"].get(s, 0) for s in build.FAILED)
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
