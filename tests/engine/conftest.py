"""Helpers for the engine's meta-tests: run the `kvconform` CLI in a subprocess and read its report."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


class Cli:
    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
        env.pop("KVCONFORM_PROFILE", None)
        return subprocess.run([sys.executable, "-m", "kvconform.conformance.cli", *args], capture_output=True,
                              text=True, timeout=timeout, env=env, cwd=self.tmp_path)

    @staticmethod
    def report(out: Path) -> dict:
        return json.loads((Path(out) / "report.json").read_text())


@pytest.fixture
def cli(tmp_path) -> Cli:
    return Cli(tmp_path)
