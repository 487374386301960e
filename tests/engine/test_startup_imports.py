"""`import kvconform` and `kvconform --help` load no heavy framework, so both start in a fraction of a second
(benchmarks/engine_startup.py measures the seconds; this test holds the rule that keeps them small, not a
timing). Each runs in a fresh interpreter, the way a user or the CLI starts it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: what neither may import: the kernels' frameworks (hundreds of ms to seconds each), the test machinery
#: (hypothesis, pytest: `kvconform run` imports them when it runs the suite) and numpy (the reference's,
#: imported by the commands that compute)
HEAVY = ("torch", "jax", "jaxlib", "triton", "hypothesis", "pytest", "_pytest", "numpy", "ml_dtypes")

_LOADED_AFTER = """
import json, sys
if sys.argv[1] == "import":
    import kvconform
else:   # the console script `kvconform`, as installed (pyproject.toml [project.scripts])
    from importlib.metadata import entry_points
    main = entry_points(group="console_scripts", name="kvconform")[0].load()
    try:
        main(sys.argv[1].split())
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize("what", ["import", "--help", "run --help", "list --help", "replay --help",
                                  "report --help", "check-backend --help", "coverage --help"])
def test_starting_kvconform_imports_no_heavy_framework(what):
    proc = subprocess.run([sys.executable, "-c", _LOADED_AFTER, what], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = json.loads(proc.stderr.strip().splitlines()[-1])
    assert any(m.startswith("kvconform") for m in loaded)
    heavy = sorted({m.split(".")[0] for m in loaded} & set(HEAVY))
    assert not heavy, f"`{what}` imported {heavy}"
