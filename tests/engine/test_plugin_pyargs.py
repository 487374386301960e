"""A backend author runs the suite from their own pytest (conformance/README.md, "From your own pytest"):
the plugin is an installed pytest11 entry point and the suite a package collected with --pyargs."""
from __future__ import annotations

import json
import os
import subprocess
import sys

AUTHOR_BACKEND = '''
from kvconform.backends.numpy import NumpyBackend


class MyKernels(NumpyBackend):
    name = "mykernels"

    def capabilities(self):
        return {"write_kv": super().capabilities()["write_kv"]}


def make_backend():
    return MyKernels()
'''


def test_suite_runs_from_a_backend_authors_pytest(tmp_path):
    (tmp_path / "mykernels.py").write_text(AUTHOR_BACKEND)
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")   # the author's own configuration
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    env.pop("KVCONFORM_PROFILE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "kvconform.conformance.suite", "-p", "no:cacheprovider",
         "--kvc-backend", "mykernels:make_backend", "--kvc-out", "out", "-k", "write_kv_golden"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    # nothing failed; -k left the run's other tests out: NOT CHECKED, as on the CLI route
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "NOT CHECKED -k 'write_kv_golden' selected 11 of the run's " in proc.stdout, proc.stdout[-3000:]
    # 3 goldens, each small and at real sizes in float32/bfloat16/float16 (fp8_rounding: no bfloat16 form)
    assert "mykernels: numerical tests 11 pass" in proc.stdout, proc.stdout[-3000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {r["status"] for r in report["results"]} == {"pass"} and set(report["backends"]) == {"mykernels"}
    assert (tmp_path / "out" / "junit.xml").exists()
