"""Each suite module's `SUITE_OPS` (conformance/run/suite_modules.py) names exactly the ops of the tests it
defines, so that a run of some ops, which collects only the modules declaring them, runs every test of
those ops: a declaration that left an op out would drop that op's tests from every one-op run."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvconform.backends.base import OPS
from kvconform.conformance.harness import profiles
from kvconform.conformance.run import suite_modules

HERE = Path(__file__).resolve().parent
SUITE_MODULES = sorted(profiles.suite_dir("suite").glob("test_*.py"))


def _tested_ops(path) -> set[str]:
    module = importlib.import_module(f"kvconform.conformance.suite.{path.stem}")
    return {meta["op"] for meta in (getattr(value, "kvconform", None) for value in vars(module).values())
            if isinstance(meta, dict)}


@pytest.mark.parametrize("path", SUITE_MODULES, ids=lambda p: p.stem)
def test_a_suite_module_declares_the_ops_of_its_tests(path):
    tested = _tested_ops(path)
    assert tested, f"{path.name} defines no conformance test"
    declared = suite_modules.declared_ops(path)
    if declared is None:   # every op: the module must say so, and have tests of every op
        assert f"SUITE_OPS = \"{suite_modules.EVERY_OP}\"" in path.read_text(), f"{path.name} declares no SUITE_OPS"
        assert tested == set(OPS), f"{path.name} declares every op but tests only {sorted(tested)}"
    else:
        assert declared == tested, (f"{path.name}: SUITE_OPS {sorted(declared)} but its tests check "
                                    f"{sorted(tested)}")


def test_undeclared_and_unreadable_modules_are_always_collected(tmp_path):
    own = tmp_path / "test_own.py"
    own.write_text("def test_x():\n    pass\n")
    broken = tmp_path / "test_broken.py"
    broken.write_text("SUITE_OPS = (\n")
    computed = tmp_path / "test_computed.py"
    computed.write_text("OPS = ('write_kv',)\nSUITE_OPS = OPS\n")
    for path in (own, broken, computed):
        assert suite_modules.needed(path, ["write_kv"]) and suite_modules.needed(path, ["rotate_keys"])
    declared = tmp_path / "test_declared.py"
    declared.write_text("SUITE_OPS = ('write_kv',)\n")
    assert suite_modules.needed(declared, ["write_kv", "rotate_keys"])
    assert not suite_modules.needed(declared, ["rotate_keys"])
    assert suite_modules.needed(declared, None)


def _collected(*args) -> dict[str, str]:
    """test id -> op of the suite's collection (tests/engine/item_ops_plugin.py prints them)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-s", "-p", "no:cacheprovider", "-p",
                           "item_ops_plugin", "--kvc-backend", "numpy", str(profiles.suite_dir("suite")), *args],
                          capture_output=True, text=True, timeout=300, cwd=profiles.CONFORMANCE_DIR, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return dict(line.split()[1:3] for line in proc.stdout.splitlines() if line.startswith("KVC-ITEM "))


def test_a_run_of_some_ops_collects_every_test_of_those_ops():
    """Every test of write_kv and rotate_keys in the whole suite's collection is collected by a run of those
    two ops too (whose collection skips the modules that declare neither), and fewer modules are read."""
    every = _collected()
    chosen = _collected("--kvc-ops", "write_kv,rotate_keys")
    wanted = {test for test, op in every.items() if op in ("write_kv", "rotate_keys")}
    assert wanted and not wanted - set(chosen), sorted(wanted - set(chosen))[:5]
    assert len(chosen) < len(every)
