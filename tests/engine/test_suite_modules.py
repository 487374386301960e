"""Each suite module's `SUITE_OPS` (conformance/run/suite_modules.py) names exactly the ops of the tests it
defines, so that a run of some ops, which collects only the modules declaring them, runs every test of
those ops: a declaration that left an op out would drop that op's tests from every one-op run."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from kvconform.conformance.harness import profiles
from kvconform.conformance.run import suite_modules

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
    if declared is None:   # "*": every op; the module must then have tests of every op
        from kvconform.backends.base import OPS
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


def _collected(*args) -> set[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "--kvc-backend",
                           "numpy", str(profiles.suite_dir("suite")), *args], capture_output=True, text=True,
                          timeout=300, cwd=profiles.CONFORMANCE_DIR)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {line.strip() for line in proc.stdout.splitlines() if "::" in line}


def test_a_run_of_one_op_collects_every_test_of_that_op():
    """The same write_kv and rotate_keys tests with --kvc-ops as in the whole suite's collection."""
    every = _collected()
    chosen = _collected("--kvc-ops", "write_kv,rotate_keys")
    want = {i for i in every if "write_kv" in i or "rotate" in i or "evict_rotate" in i}
    assert chosen and chosen <= every
    missing = {i for i in want if i not in chosen and ("[numpy" in i or "numpy-" in i)}
    assert not {i for i in missing if "write_kv" in i.split("::")[1] or "rotate_keys" in i.split("::")[1]}, missing
