"""The reference as a backend passes the whole suite with zero failures, whatever the seed."""
from __future__ import annotations

import pytest
from conftest import IN_PROCESS


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_numpy_backend_has_no_failures(cli, tmp_path, seed):
    """Seed 3 runs as a user's run does, in two pytest-xdist workers with the backend in its worker
    subprocess; the other seeds check more draws, with the backend in process (conftest.IN_PROCESS: the
    isolation changes no verdict, and costs ~30% of a NumPy backend's run)."""
    out = tmp_path / "out"
    extra = ["--jobs", "2"] if seed == 3 else ["--", *IN_PROCESS]
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


DRAW_TWICE = """
import importlib, json, sys
from hypothesis import given, strategies as st
from kvconform.conformance import profiles
if sys.argv[2] == "ignore":
    profiles.ignore_source_constants()
drawn = []

@profiles.hypothesis_settings(profiles.get("ci"))
@given(st.lists(st.integers(0, 10_000), min_size=5, max_size=5))
def draw_cases(xs):
    drawn[-1].append(xs)

drawn.append([])
draw_cases()
sys.path.insert(0, sys.argv[1])
importlib.import_module("kvc_literals_module")
drawn.append([])
draw_cases()
print(json.dumps(drawn))
"""


@pytest.mark.parametrize("mode", ["ignore", "hypothesis_default"])
def test_ci_cases_ignore_the_literals_of_local_modules(tmp_path, mode):
    """The ci profile draws the same cases whatever local modules are loaded: a kvconform process empties
    Hypothesis's pool of literals from local source (conformance/profiles.py:ignore_source_constants), so
    a new module full of integer literals (like an edited kvconform module, a conftest or a backend)
    changes nothing. Without that call the same import does change the cases (the control), which is what
    makes the first check mean something. In a subprocess: the setting is process-wide."""
    import json
    import subprocess
    import sys

    (tmp_path / "kvc_literals_module.py").write_text(
        "VALUES = [" + ", ".join(str(7 * i + 3) for i in range(1000)) + "]\n")
    proc = subprocess.run([sys.executable, "-c", DRAW_TWICE, str(tmp_path), mode], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    before, after = json.loads(proc.stdout)
    assert len(before) == 25
    assert (before == after) == (mode == "ignore")
