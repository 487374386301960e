"""A reproduced failure is reproduced, not flaky: the run records its replays' rate under `replays` (case.json
`flaky` only for a flaky failure), and `kvconform replay` says REPRODUCED, FLAKY only when replays disagree."""
from __future__ import annotations

import json
from pathlib import Path

from kvconform.conformance.cli.replay import replay_verdict

from test_run_records import _suite


def test_verdict_words():
    assert replay_verdict(3, 3, None, False) == "REPRODUCED: failed 3 of 3 replays"
    assert replay_verdict(0, 3, {"failed": 3, "replays": 3}, False) == \
        "NOT REPRODUCED: passed 3 of 3 replays (recorded: failed 3 of 3 replays)"
    assert replay_verdict(4, 10, {"failed": 3, "replays": 10}, True) == \
        "FLAKY: failed 4 of 10 replays (recorded flaky: failed 3 of 10 replays)"
    assert replay_verdict(0, 10, {"failed": 3, "replays": 10}, True).endswith("a flaky failure may need more)")


def test_a_deterministic_failure_replays_as_reproduced(cli, tmp_path):
    out = tmp_path / "out"
    spec = "record_backends:make_wrong_always"
    proc = cli("run", "--suite", str(_suite(tmp_path)), "--out", str(out), "--backend", spec, "--", "-k", "test_one_call")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = next(json.loads(line) for line in (out / "results.jsonl").read_text().splitlines())
    assert record["status"] == "fail" and record["replays"]["failed"] == record["replays"]["replays"] == 3
    meta = json.loads((Path(record["repro"]) / "case.json").read_text())
    assert meta["flaky"] is None and meta["replays"]["failed"] == 3, meta
    assert "flaky" not in (Path(record["repro"]) / "failure.txt").read_text()
    replayed = cli("replay", record["repro"], "--backend", spec)
    assert replayed.returncode == 1
    assert "REPRODUCED: failed 3 of 3 replays (recorded: failed 3 of 3 replays)" in replayed.stdout, replayed.stdout
    assert "FLAKY" not in replayed.stdout
    fixed = cli("replay", record["repro"], "--backend", "numpy")
    assert fixed.returncode == 0 and "NOT REPRODUCED: passed 3 of 3 replays" in fixed.stdout, fixed.stdout
