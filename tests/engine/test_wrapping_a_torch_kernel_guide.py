"""docs/wrapping-a-torch-kernel.md works as written (issue 28 item 2): its `# file:` blocks are written out,
the torch backend (under 40 lines, no dtype or layout code of its own) passes the quick profile of the op
it claims with the summary the guide quotes, and the other examples run their own checks."""
from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "wrapping-a-torch-kernel.md"
RUN = "kvconform run --backend sdpa_backend:make_backend --profile quick --ops ragged_paged_attention"


def test_the_guides_torch_backend_passes_and_its_examples_run(cli, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    guide = GUIDE.read_text()
    blocks = dict(re.findall(r"```python\n# file: (\S+)\n(.*?)```", guide, re.S))
    assert list(blocks) == ["sdpa_backend.py", "sglang_style_write.py", "keep_strides.py", "flash_varlen_backend.py"]
    for name, code in blocks.items():
        (tmp_path / name).write_text(code)
    backend = blocks["sdpa_backend.py"]
    assert len(backend.splitlines()) < 40
    # what the adapters do instead: bit views, host transfers, copies of inputs, page arithmetic
    assert not re.search(r"from_numpy|\.numpy\(|\.view\(|\.cpu\(|\.copy\(|ascontiguousarray|page_size|// ", backend)

    assert f"PYTHONPATH=. {RUN}" in guide
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    out = tmp_path / "out"
    proc = cli(*RUN.split()[1:], "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    results = cli.report(out)["results"]
    assert {r["status"] for r in results} == {"pass", "unsupported"}
    assert any(r["layer"] == "differential" and r["status"] == "pass" and "kv_dtype=bfloat16" in r["dtypes"]
               for r in results)
    summary = next(line for line in proc.stdout.splitlines() if line.startswith("torch-sdpa: numerical tests"))
    assert f"    {summary}" in guide          # the guide quotes this run

    monkeypatch.syspath_prepend(str(tmp_path))
    for example in ("sglang_style_write.py", "keep_strides.py", "flash_varlen_backend.py"):   # each asserts what the guide says
        if example == "flash_varlen_backend.py":   # the varlen conversions come from the adapters, none by hand
            assert re.search(r"varlen_metadata\(.*flash_window\(.*flash_soft_cap\(", blocks[example], re.S)
            assert not re.search(r"cumsum|W - 1|- 1, 0\)|== 0\.0", blocks[example])
        runpy.run_path(str(tmp_path / example))
