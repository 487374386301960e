"""The plugin's command-line options (--kvc-*), as `kvconform run` passes them."""
from __future__ import annotations

import pytest

from kvconform.conformance.harness import profiles


def pytest_addoption(parser):
    g = parser.getgroup("kvconform", "kvconform conformance suite")
    g.addoption("--kvc-backend", action="append", default=[], metavar="SPEC",
                help="backend to check: entry-point name or package.module:factory (repeatable)")
    g.addoption("--kvc-profile", default=None, choices=sorted(profiles.PROFILES),
                help="default: $KVCONFORM_PROFILE or quick (with --kvc-resume: the resumed run's)")
    g.addoption("--kvc-out", default=None, help="directory for results.jsonl, reports and reproducers")
    g.addoption("--kvc-ops", default=None, help="comma-separated ops to run (default: all)")
    g.addoption("--kvc-shard", default=None, metavar="I/N", help="run the I-th of N deterministic shards")
    g.addoption("--kvc-resume", action="store_true", help="skip tests already recorded in results.jsonl")
    g.addoption("--kvc-expectations", action="append", default=[], metavar="TOML")
    g.addoption("--kvc-timeout", type=profiles.timeout_seconds, default=None,
                help="seconds per backend call, > 0 (default: profile)")
    g.addoption("--kvc-shrink-seconds", type=profiles.timeout_seconds, default=None,
                help="seconds of shrinking per test, > 0, after which the smallest counterexample so far is "
                     "kept (default: profile)")
    g.addoption("--kvc-run-unclaimed", action="store_true",
                help="also run cases outside the claims (pass -> unclaimed-pass, fail -> unsupported)")
    g.addoption("--kvc-isolation", choices=("subprocess", "none"), default="subprocess")
    g.addoption("--kvc-max-crashes", type=int, default=None, metavar="N",
                help="after N crashes or hangs in a row of one backend's op, record its remaining tests as "
                     "`not run` (default 3; 0: never; counted per pytest process)")
    g.addoption("--kvc-progress", action="store_true",
                help="print where the run stands: one updating line on a terminal, one line per backend x op "
                     "otherwise (conformance/progress.py)")


def _seed(config):
    try:
        return config.getoption("hypothesis_seed")
    except ValueError:
        return None


def _parse_shard(text):
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard must look like I/N (e.g. 2/4), got {text!r}") from None
    if not (n >= 1 and 1 <= i <= n):
        raise pytest.UsageError(f"--shard {text}: need 1 <= I <= N")
    return i, n
