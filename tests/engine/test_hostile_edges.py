"""The smaller edges of the second hostile round (item 7) that are fixed: a suite module that cannot be
imported by `kvconform coverage --suite`, and `to_torch(x, "cuda")` where torch has no CUDA, each one
line in words, never a traceback. (pytest.skip() in an op and NumPy-integer claims: test_hostile_outputs.py;
replay with a list `op` and the replaying backend's claims: test_hostile_reproducers.py.)"""
from __future__ import annotations

import numpy as np
import pytest


def test_coverage_of_a_suite_with_a_broken_module_is_one_line(cli, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_broken.py").write_text("import kvconform_no_such_module_here\n")
    proc = cli("coverage", "--suite", str(suite))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "kvconform coverage: NOT CHECKED:" in proc.stdout and "test_broken.py cannot be imported" in proc.stdout
    assert "ModuleNotFoundError" in proc.stdout


def test_to_torch_on_a_device_torch_does_not_have_is_said_in_words():
    torch = pytest.importorskip("torch")
    from kvconform.adapters.arrays import ConversionError, to_torch
    if not torch.cuda.is_available():
        with pytest.raises(ConversionError, match="device 'cuda': CUDA is not available here"):
            to_torch(np.zeros(2, np.float32), "cuda")
    with pytest.raises(ConversionError, match="device 'cdua' is not a torch device"):
        to_torch(np.zeros(2, np.float32), "cdua")
    assert to_torch(np.zeros(2, np.float32), "cpu").device.type == "cpu"


def test_a_misspelled_kvc_ops_is_a_usage_error_naming_the_close_match(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
                           "kvconform.conformance.suite", "--kvc-backend", "numpy", "--kvc-ops", "write_kvv"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]   # pytest's usage error
    assert "--kvc-ops: unknown op 'write_kvv' (did you mean 'write_kv'?)" in proc.stderr
    assert "no test was selected" not in proc.stdout


def test_a_shard_folder_resumed_as_another_shard_is_refused(cli, tmp_path):
    out = tmp_path / "out"
    first = cli("run", "--backend", "numpy", "--ops", "write_kv", "--out", str(out), "--shard", "1/2", "--",
                "-k", "differential and base")
    assert first.returncode in (0, 3), first.stdout[-2000:]
    other = cli("run", "--resume", "--out", str(out), "--shard", "2/2")
    assert other.returncode == 2, other.stdout[-2000:] + other.stderr[-2000:]
    assert other.stderr.count("\n") == 1 and "--resume continues shard 1/2" in other.stderr
    assert "--shard 2/2 differs" in other.stderr


def test_test_ids_of_two_factories_of_one_name_do_not_depend_on_their_order(cli, tmp_path):
    """Two backends whose factories are both `make`: their tests' ids (JUnit names, reproducer folders)
    are the same whichever is given first, not pytest's `make0` / `make1`."""
    def ids(*specs):
        args = [a for s in specs for a in ("--backend", s)]
        proc = cli("run", *args, "--ops", "write_kv", "--out", str(tmp_path / "out"), "--", "--co", "-k",
                   "differential and base")
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return sorted(line.strip() for line in proc.stdout.splitlines() if "::" in line)
    forward = ids("text_backends:make", "record_tamper:make")
    assert forward == ids("record_tamper:make", "text_backends:make")
    assert any("[text_backends.make-base]" in i for i in forward) and not any("make0" in i for i in forward)
