"""`kvconform report DIR` and `kvconform report merge`: rebuild a run's reports, or join shard reports and judge the whole."""
from __future__ import annotations

from pathlib import Path

from .arguments import UsageError, _check_out


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
    from kvconform.conformance.report import build, causes
    from kvconform.conformance.run import gate, outdir
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
    for line in build.summary_lines(report, causes.listed_lines(report)) + gate.lines(report["gate"]):
        print(line)
    print(f"rebuilt {out}/report.json, report.md, report.html, junit.xml from {len(report['results'])} results")
    return report["gate"]["exit_code"]


def _report_merge(args) -> int:
    """Merge reports and judge the whole (gate.py): every shard of a run present, every claimed op checked."""
    from kvconform.conformance.report import build, causes
    from kvconform.conformance.run import gate, outdir
    try:
        reports = [build.load_report(p) for p in args.reports]
        merged = build.merge(reports, names=list(args.reports))
    except build.ReportError as exc:
        raise UsageError(str(exc)) from None
    out = _check_out(args.out)
    try:   # report.md and junit.xml would replace a user's files of those names
        outdir.refuse_foreign(out, "--out")
    except outdir.FolderError as exc:
        raise UsageError(str(exc)) from None
    build.write_all(out, merged)
    for line in build.summary_lines(merged, causes.listed_lines(merged)) + gate.lines(merged["gate"]):
        print(line)
    print(f"merged {len(reports)} reports into {out}/report.json, report.md, report.html, junit.xml")
    return merged["gate"]["exit_code"]
