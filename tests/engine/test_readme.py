"""The top-level README works as written (issue 28 item 1): its Python runs, every `kvconform` command of
"Check my kernel" parses with the CLI as it is, the two setup commands exist, and it stays a page. Its
failure excerpt is checked against a real run in tests/engine/test_writing_a_backend_guide.py."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from kvconform.conformance.cli import parser as cli

README = Path(__file__).resolve().parents[2] / "README.md"
BOOTSTRAP = Path(__file__).resolve().parents[2] / "ci" / "bootstrap.py"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", README.read_text(), re.S)


def test_the_readme_python_runs():
    blocks = _blocks("python")
    assert blocks
    for code in blocks:
        exec(compile(code, str(README), "exec"), {})


def test_the_readme_commands_parse_and_exist():
    commands = [line.split("#")[0].strip() for block in _blocks("sh") for line in block.splitlines()]
    kvconform = [shlex.split(c.replace("<case>", "CASE"))[1:] for c in commands if c.startswith("kvconform ")]
    assert {c[0] for c in kvconform} == {"check-backend", "list", "run", "replay"}
    for argv in kvconform:
        cli._parser().parse_args(argv)      # an option the CLI lost would exit here
    for sub in ("report", "test"):
        assert f"python3 ci/bootstrap.py {sub}" in commands
        assert re.search(rf"['\"]{sub}['\"]", BOOTSTRAP.read_text()), sub


def test_the_readme_is_a_page():
    assert len(README.read_text().splitlines()) <= 125


def test_the_performance_pages_commands_exist():
    """docs/performance.md's command blocks (the models profile's runs, the GPU steps still to run) name
    commands that exist: kvconform lines parse, scripts are in the tree, STEPS are steps native_check.sh has."""
    page = (README.parent / "docs" / "performance.md").read_text()
    lines = [line.split("#")[0].strip() for block in re.findall(r"```(?:sh)?\n(.*?)```", page, re.S)
             for line in block.splitlines()]
    lines = [line for line in lines if line]
    assert lines
    check = (README.parent / "benchmarks" / "triton" / "native_check.sh").read_text()
    for line in lines:
        words = shlex.split(line.replace("[--timeout 300]", "--timeout 300"))
        if words[0] == "kvconform":
            cli._parser().parse_args(words[1:])
        for word in words:
            if word.startswith("STEPS="):
                for step in word.split("=", 1)[1].split():
                    assert re.search(rf"^\s+{step}\)", check, re.M), (step, line)
            elif re.match(r"benchmarks/\S+\.(sh|py)$", word):
                assert (README.parent / word).exists(), word
