"""main"""
from __future__ import annotations

import argparse
import sys

from kvconform.conformance.run.gate import EXIT_SIGINT, EXIT_USAGE

from .arguments import UsageError

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


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors: `kvconform: error: argument --timeout: <rule>`, exit 2
    (argparse's own prints the whole usage first). Sub-command parsers inherit the class."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"kvconform: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    from kvconform.conformance.harness.profiles import timeout_seconds
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


def command(name: str):
    """The function of command `name`, its module imported only now: `kvconform --help` and every command
    import just what they use (no test framework, no backend)."""
    if name == "run":
        from kvconform.conformance.cli.run import cmd_run
        return cmd_run
    if name == "list":
        from kvconform.conformance.cli.listing import cmd_list
        return cmd_list
    if name == "check-backend":
        from kvconform.conformance.cli.check_backend import cmd_check_backend
        return cmd_check_backend
    if name == "coverage":
        from kvconform.conformance.cli.coverage import cmd_coverage
        return cmd_coverage
    if name == "replay":
        from kvconform.conformance.cli.replay import cmd_replay
        return cmd_replay
    from kvconform.conformance.cli.report import cmd_report
    return cmd_report


def main(argv=None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:   # _Parser already printed its one-line usage error (or --help its text)
        return EXIT_USAGE if exc.code else 0
    try:
        return command(args.command)(args)
    except UsageError as exc:
        print(f"kvconform: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kvconform: interrupted (kvconform run --resume continues a run)", file=sys.stderr)
        return EXIT_SIGINT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
