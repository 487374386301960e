"""`kvconform coverage`: clause x layer coverage of the suite, the permissions with their backends
(report/coverage.py), and the spec's latitudes with their backend or reason (report/latitudes.py)."""
from __future__ import annotations

import json
from pathlib import Path

from .arguments import UsageError


def cmd_coverage(args) -> int:
    from kvconform.backends.base import did_you_mean
    from kvconform.conformance.report import coverage
    clauses = coverage.defined_clauses()
    if args.suite is not None and not Path(args.suite).is_dir():
        raise UsageError(f"--suite {args.suite}: no such directory (it must hold the suite's test_*.py modules)")
    families = sorted({c.split("-")[0] for c in clauses})
    if args.family is not None and args.family.upper() not in families:
        raise UsageError(f"--family {args.family!r}: no spec clause has that prefix"
                         f"{did_you_mean(args.family.upper(), families)}")
    try:
        tests = coverage.suite_tests(Path(args.suite) if args.suite else None)
    except coverage.SuiteModuleError as exc:   # as a suite that cannot be collected in a run: not checked
        from kvconform.conformance.engine.backend_text import visible
        print(f"kvconform coverage: NOT CHECKED: {visible(exc)}", flush=True)
        return 3
    table = coverage.coverage_table(clauses, tests)
    prefixes = (args.family.upper(),) if args.family else ()
    permissions = coverage.permission_table()
    from kvconform.conformance.report import latitudes
    latitude_rows = latitudes.latitude_table()
    if args.json:
        print(json.dumps({"clauses": clauses, "coverage": table, "marked": coverage.marked_clauses(),
                          "permissions": permissions, "latitudes": latitude_rows}, indent=1))
    else:
        for line in coverage.render(table, clauses, prefixes, coverage.marked_clauses()):
            print(line)
        if not prefixes:    # the permissions of spec/numerics.md, each with its backends
            print()
            for line in coverage.render_permissions(permissions):
                print(line)
            for line in latitudes.render_latitudes(latitude_rows, latitudes.latitude_reasons()):
                print(line)
    return 0
