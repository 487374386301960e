"""docs/writing-a-backend.md works as written (issue 12 item 5): its `# file:` code blocks are written out,
the worked backend passes `kvconform check-backend` and the ci profile, the buggy variant fails with the
diagnosis the guide quotes, and the summary lines the guide quotes are the ones the runs print."""
from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "writing-a-backend.md"
README = Path(__file__).resolve().parents[2] / "README.md"


def _write_guide_files(into: Path) -> list[str]:
    blocks = re.findall(r"```python\n# file: (\S+)\n(.*?)```", GUIDE.read_text(), re.S)
    for name, code in blocks:
        (into / name).write_text(code)
    return [name for name, _ in blocks]


def _summary_line(stdout: str, backend: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith(f"{backend}: numerical tests"))


def test_the_guides_backend_passes(cli, tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    assert _write_guide_files(lib) == ["tinykernels.py", "tinykernels_backend.py", "tinykernels_buggy.py"]
    monkeypatch.setenv("PYTHONPATH", str(lib))
    guide = GUIDE.read_text()

    checked = cli("check-backend", "tinykernels_backend:make_backend", timeout=600)
    assert checked.returncode == 0 and "no problem found" in checked.stdout, checked.stdout[-2000:]

    out = tmp_path / "out"
    clean = cli("run", "--backend", "tinykernels_backend:make_backend", "--profile", "ci", "--out", str(out),
                timeout=900)
    assert clean.returncode == 0, clean.stdout[-3000:]
    results = cli.report(out)["results"]
    assert not [r["id"] for r in results if r["status"] not in ("pass", "unsupported")]
    assert any(r["layer"] == "differential" and r["status"] == "pass" for r in results)
    assert _summary_line(clean.stdout, "tinykernels") in guide   # the guide quotes this run


def test_the_guides_bug_is_diagnosed_as_the_guide_and_the_readme_show(cli, tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    _write_guide_files(lib)
    monkeypatch.setenv("PYTHONPATH", str(lib))
    guide = GUIDE.read_text()
    out_bug = tmp_path / "out-buggy"
    buggy = cli("run", "--backend", "tinykernels_buggy:make_backend", "--profile", "ci", "--out", str(out_bug),
                timeout=900)
    assert buggy.returncode == 1, buggy.stdout[-3000:]
    failed = [r for r in cli.report(out_bug)["results"] if r["status"] == "fail"]
    poison = [r for r in failed if r["layer"] == "property" and r.get("diagnosis")]
    assert poison, [r["id"] for r in failed]
    summary = poison[0]["diagnosis"]["summary"]
    assert "k_tail" in summary and "v_tail" in summary
    assert f"diagnosis: {summary}" in guide
    # the README's failure excerpt is this failure as the run printed it, the output folder named `out`
    excerpt = re.search(r"## What a failure looks like.*?```text\n(.*?)```", README.read_text(), re.S).group(1)
    printed = buggy.stdout.replace(str(out_bug), "out")
    for line in excerpt.splitlines():
        assert line in printed.splitlines(), line
    assert _summary_line(buggy.stdout, "tinykernels") in guide
    assert cli("replay", poison[0]["repro"], "--backend", "tinykernels_buggy:make_backend").returncode == 1
