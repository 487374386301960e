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
def test_ci_cases_ignore_the_literals_of_local_modules(tmp_path, monkeypatch):
    """The ci profile draws the same cases whatever local modules are loaded: Hypothesis's pool of literals
    from local source is emptied (conformance/profiles.py:ignore_source_constants), so a new module full
    of integer literals (like an edited kvconform module, a conftest or a backend) changes nothing."""
    import importlib

    from hypothesis import given
    from hypothesis import strategies as st

    from kvconform.conformance import profiles

    drawn = []

    @profiles.hypothesis_settings(profiles.get("ci"))
    @given(st.lists(st.integers(0, 10_000), min_size=5, max_size=5))
    def draw_cases(xs):
        drawn[-1].append(tuple(xs))

    drawn.append([])
    draw_cases()
    (tmp_path / "kvc_literals_module.py").write_text(
        "VALUES = [" + ", ".join(str(7 * i + 3) for i in range(1000)) + "]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("kvc_literals_module")
    drawn.append([])
    draw_cases()
    assert len(drawn[0]) == 25 and drawn[0] == drawn[1]


