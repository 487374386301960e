"""Which suite modules a run needs: each module of a suite declares the ops its tests check.

A run of some ops (`kvconform run --ops`, `--kvc-ops`) collects only the modules whose `SUITE_OPS`
names one of them; importing and parametrizing the other modules was about a fifth of a one-op run's
start-up (a `kvconform run` selecting one op of 21). `SUITE_OPS` is a literal at module level: a tuple of
op names, or "*" for a module with tests of every op. It is read from the module's source, never by
importing it. A module without the declaration (a suite of one's own, `kvconform run --suite DIR`) is
always collected. tests/engine/test_suite_modules.py holds every suite module's declaration to the ops of
the tests it defines, so a declaration that leaves an op out fails there, not as tests silently missing.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

#: SUITE_OPS value of a module with tests of every op
EVERY_OP = "*"


@lru_cache(maxsize=None)
def declared_ops(path: Path) -> frozenset[str] | None:
    """The ops a suite module declares in its module-level `SUITE_OPS`; None when it declares none (or the
    file cannot be read or parsed: then pytest's own collection reports the problem) or declares "*"."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SUITE_OPS"
                                                for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            if value == EVERY_OP or not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
                return None
            return frozenset(value)
    return None


def needed(path: Path, ops) -> bool:
    """Whether a run of `ops` (None: every op) must collect the suite module at `path`."""
    if ops is None:
        return True
    declared = declared_ops(Path(path))
    return declared is None or bool(declared & set(ops))
