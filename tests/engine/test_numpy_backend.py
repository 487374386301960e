"""The reference as a backend passes the whole suite with zero failures, whatever the seed."""
from __future__ import annotations

import pytest

@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_numpy_backend_has_no_failures(cli, tmp_path, seed):
    out = tmp_path / "out"
    extra = ["--jobs", "2"] if seed == 3 else []
    proc = cli("run", "--backend", "numpy", "--seed", str(seed), "--out", str(out), *extra)  # every op
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = cli.report(out)
    statuses = {r["status"] for r in report["results"]}
    assert statuses <= {"pass"}, statuses
    assert len(report["results"]) >= 90  # all four families
    assert all(r["examples"] >= 1 for r in report["results"])


def test_ci_profile_is_derandomized(cli, tmp_path):
    runs = []
    for n in range(2):
        out = tmp_path / f"out{n}"
        assert cli("run", "--backend", "numpy", "--ops", "write_kv", "--profile", "ci", "--out", str(out)).returncode == 0
        runs.append({r["id"]: r["dtypes"] for r in cli.report(out)["results"]})
    assert runs[0] == runs[1]
