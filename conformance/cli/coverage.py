"""`kvconform coverage`: clause x layer coverage of the suite, and the permissions with their backends
(report/coverage.py)."""
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
