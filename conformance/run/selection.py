"""pytest options that change what a run runs, as the gate reads them.

A green gate says every claimed case was checked. Some pytest options run fewer of the run's tests:
pytest's cache picks them (`--lf`, `--sw`, `--sw-skip`: only the tests that failed last time, or those
from the last failure on), the session stops early (`-x`, `--maxfail`, `--sw` at a failure), or they
are chosen by hand: `-k`, `-m`, `--deselect` ("-k 'golden'
selected 11 of the run's 42 tests"), and node ids, single modules, `--ignore` / `--ignore-glob` that leave
a module of the suite out of the collection. A run narrowed so is NOT CHECKED, and the reason names the
option and how many of the run's tests ran. The ways to narrow a run that stay checkable are declared
scopes: `--ops` and the profile. `--ff` and `--nf` only reorder: every test still runs, and the verdict is
the usual one.

Collect-only (`--co`) runs nothing: it is not judged, and the output folder is left as it is.

pytest-timeout's limit would end a conformance test from outside the engine (a `Failed` charged to the
backend, or, with its thread method, the whole process): for the suite's tests it is switched off
(`pytest.mark.timeout(0)`), each backend call being bounded by the engine's own `--timeout`, whose
expiry is a `crash` with the backend named.
"""
from __future__ import annotations

from pathlib import Path

#: pytest's option dest -> the flag as users type it: options with which pytest's cache picks the tests
CACHE_SELECTION = {"lf": "--lf", "stepwise": "--sw", "stepwise_skip": "--sw-skip"}


def collect_only(config) -> bool:
    """Whether the session only collects (`--co` / `--collect-only`): nothing runs, nothing is judged."""
    return bool(getattr(config.option, "collectonly", False))


def cache_flags(config) -> list[str]:
    """The options given with which pytest's cache chooses the tests (`--lf`, `--sw`, `--sw-skip`)."""
    return [flag for dest, flag in CACHE_SELECTION.items() if getattr(config.option, dest, False)]


def stop_flags(config) -> list[str]:
    """The options given that stop a session before its last test: `-x` / `--maxfail N` and `--sw`."""
    found = []
    maxfail = getattr(config.option, "maxfail", 0) or 0
    if maxfail == 1:
        found.append("-x")
    elif maxfail > 1:
        found.append(f"--maxfail {maxfail}")
    if getattr(config.option, "stepwise", False):
        found.append("--sw")
    return found


def narrowed_by_cache(config, before: int, after: int) -> str | None:
    """The NOT CHECKED line when pytest's cache left out selected tests: `before` conformance tests of the
    run before pytest's own selection, `after` those left; None when none was left out by it."""
    flags = cache_flags(config)
    if not flags or after >= before:
        return None
    return (f"{' '.join(flags)} (pytest's cache) selected {after} of the run's {before} tests: a run that does "
            f"not run every claimed test is not checked (run again without {' '.join(flags)})")


def chosen_by_hand(config) -> list[str]:
    """The options given that deselect collected tests by their names or marks, as typed: `-k EXPR`,
    `-m EXPR`, `--deselect ID`."""
    opt = config.option
    found = [f"{flag} {value!r}" for flag, value in (("-k", getattr(opt, "keyword", "")),
                                                      ("-m", getattr(opt, "markexpr", ""))) if value]
    found += [f"--deselect {node}" for node in getattr(opt, "deselect", None) or ()]
    return found


def narrowed_by_hand(config, before: int, after: int) -> str | None:
    """The NOT CHECKED line when -k / -m / --deselect left out tests of the run: `before` conformance tests
    of the run's ops and backends before pytest's deselection, `after` those left; None when none was."""
    flags = chosen_by_hand(config)
    if not flags or after >= before:
        return None
    return (f"{' '.join(flags)} selected {after} of the run's {before} tests: a run that does not run every "
            f"claimed test is not checked (narrow a run with --ops or the profile)")


def left_out_modules(suite_dirs, whole: list[Path], ignored) -> list[Path]:
    """The test modules (`test_*.py`) of `suite_dirs` that the collection does not hold whole: no collection
    argument in `whole` (the paths given without a `::` part) is the module or a folder above it, or
    `ignored(path)` (pytest's --ignore / --ignore-glob / collect_ignore) leaves it out. pytest drops a node
    id whose module or folder is also given, so a module is cut only when no whole argument covers it."""
    found = []
    for folder in sorted(set(suite_dirs)):
        for module in sorted(Path(folder).glob("test_*.py")):
            covered = any(module == w or w in module.parents for w in whole)
            if not covered or ignored(module):
                found.append(module)
    return found


def narrowed_collection(given: list[str], ignore_flags: list[str], modules: list[Path], total: int,
                        after: int) -> str | None:
    """The NOT CHECKED line when node ids, module paths (`given`, as typed) or --ignore options
    (`ignore_flags`) left the `modules` of the suite (of its `total`) out of the collection or cut them;
    `after`: the run's tests collected. None when no module was."""
    if not modules:
        return None
    what = " ".join([*given, *ignore_flags]) or "the collection arguments"
    names = ", ".join(m.name for m in modules[:3]) + (f" and {len(modules) - 3} more" if len(modules) > 3 else "")
    return (f"{what} selected {after} tests, leaving out or cutting {len(modules)} of the suite's {total} "
            f"modules ({names}): a run that does not run every claimed test is not checked (narrow a run "
            f"with --ops or the profile)")


def stopped_early(config, planned: int, ran: int) -> str | None:
    """The NOT CHECKED line when the session stopped before running its `planned` conformance tests (`ran`
    of them recorded); None when every one ran."""
    if ran >= planned:
        return None
    flags = stop_flags(config) or ["a stop of the session"]
    return (f"{' / '.join(flags)} stopped the run after {ran} of its {planned} tests: the rest were not run, "
            f"so not everything claimed was checked")
