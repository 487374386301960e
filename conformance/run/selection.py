"""pytest options that change what a run runs, as the gate reads them.

A green gate says every claimed case was checked. Some pytest options run fewer tests than the run
selected, without the user choosing tests: pytest's cache picks them (`--lf`, `--sw`, `--sw-skip`: only
the tests that failed last time, or those from the last failure on) or the session stops early (`-x`,
`--maxfail`, `--sw` at a failure). A run narrowed so is NOT CHECKED, and the reason names the option and
how many of the selected tests ran. Tests chosen by hand (`-k`, `-m`, `--deselect`, node ids) keep their
rule (gate.py: a claimed op without a numerical test is then a warning). `--ff` and `--nf` only reorder:
every test still runs, and the verdict is the usual one.

Collect-only (`--co`) runs nothing: it is not judged, and the output folder is left as it is.

pytest-timeout's limit would end a conformance test from outside the engine (a `Failed` charged to the
backend, or, with its thread method, the whole process): for the suite's tests it is switched off
(`pytest.mark.timeout(0)`), each backend call being bounded by the engine's own `--timeout`, whose
expiry is a `crash` with the backend named.
"""
from __future__ import annotations

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


def stopped_early(config, planned: int, ran: int) -> str | None:
    """The NOT CHECKED line when the session stopped before running its `planned` conformance tests (`ran`
    of them recorded); None when every one ran."""
    if ran >= planned:
        return None
    flags = stop_flags(config) or ["a stop of the session"]
    return (f"{' / '.join(flags)} stopped the run after {ran} of its {planned} tests: the rest were not run, "
            f"so not everything claimed was checked")
