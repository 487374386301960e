"""The shrink budget (profiles.ShrinkBudget, issue 31): shrinking a failure against a slow backend stops
after the profile's `shrink_seconds` (here overridden to 0.5 s), keeps the smallest counterexample found
so far, and says so in the failure; without the cap the same test shrinks to the end and says nothing."""
from __future__ import annotations

import time

from kvconform.conformance.harness import profiles


def test_every_shrinking_profile_states_a_budget():
    for profile in profiles.PROFILES.values():
        if profile.shrink:
            assert 0 < profile.shrink_seconds <= 300, profile


def test_shrinking_a_slow_backend_stops_at_the_budget_with_a_counterexample(cli, tmp_path):
    out = tmp_path / "out"
    started = time.monotonic()
    proc = cli("run", "--backend", "fault_backends:make_slow_and_wrong", "--ops", "write_kv", "--profile", "ci",
               "--out", str(out), "--", "-k", "test_write_kv_differential and base", "--kvc-shrink-seconds", "0.5")
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    [record] = [r for r in cli.report(out)["results"] if r["status"] == "fail"]
    assert "shrinking stopped at its 0.5 s budget (profile ci)" in record["message"], record["message"]
    assert record["counterexample"] and record["repro"]
    # unbounded, shrinking this test to its 3-row counterexample takes several seconds of 0.1 s calls (the
    # whole run ~19 s at 0.2 s a call, measured); the message line above is what tells the two apart
    assert took < 60, took
