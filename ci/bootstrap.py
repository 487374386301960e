"""Set up kvconform on a machine with nothing but Python, then run the main job or the tests.

    python3 ci/bootstrap.py report   # conformance report over every backend that runs here -> kvconform-out/
    python3 ci/bootstrap.py test     # the project's tests, then the ci-profile conformance gate (numpy,
                                     # triton, pallas), between two readings of the machine's speed

Creates `.venv/` beside this repository (reused when its install stamp matches the constraints), installs
the package editable with every extra, pinned by `ci/constraints.txt`. Uses only the standard library so it
runs before anything is installed. Exit code: that of the first failing step.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
KVCONFORM = BIN / "kvconform"
STAMP = VENV / "kvconform-install.stamp"


def step(title: str, cmd: list[str], env: dict | None = None) -> None:
    print(f"\n=== {title}\n$ {' '.join(map(str, cmd))}", flush=True)
    start = time.monotonic()
    rc = subprocess.call([str(c) for c in cmd], cwd=ROOT, env=step_environment(env))
    print(f"=== {title}: exit {rc} after {time.monotonic() - start:.0f} s", flush=True)
    if rc != 0:
        sys.exit(rc)


def step_environment(extra: dict | None = None) -> dict:
    """The environment of a step: ours, without PYTHONDONTWRITEBYTECODE. With it set (as on some CI
    machines) every Python process of the run compiles this package from source, and pytest redoes its
    assertion rewriting of every plugin module (hypothesis's included) in each of the ~200 pytest
    processes the tests and the gate start: measured ~3 s of a 20 s `kvconform run` of one op (issue 16).
    Allowing bytecode caches only writes __pycache__ directories inside this checkout and the venv."""
    env = {**os.environ, **(extra or {})}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def install_fingerprint() -> str:
    h = hashlib.sha256()
    for name in ("ci/constraints.txt", "pyproject.toml", "setup.py"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


def setup() -> None:
    if not PY.exists():
        step("create virtual environment", [sys.executable, "-m", "venv", VENV])
    fingerprint = install_fingerprint()
    if STAMP.exists() and STAMP.read_text() == fingerprint:
        print("=== dependencies: up to date (.venv)", flush=True)
    else:
        step("install kvconform and pinned dependencies",
             [PY, "-m", "pip", "install", "--quiet", "-c", "ci/constraints.txt", "-e", ".[all]"])
        STAMP.write_text(fingerprint)
    ensure_browser()


def ensure_browser() -> None:
    """The HTML report is checked in headless Chromium; install Debian's package when we can."""
    if shutil.which("chromium") or shutil.which("chromium-browser"):
        return
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        print("=== installing chromium (Debian package) for the HTML report tests", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        started = time.monotonic()
        subprocess.call(["apt-get", "update", "-qq"], env=env, stdout=subprocess.DEVNULL)
        subprocess.call(["apt-get", "install", "-y", "-qq", "chromium"], env=env, stdout=subprocess.DEVNULL)
        print(f"=== chromium install: {time.monotonic() - started:.0f} s", flush=True)
    if not shutil.which("chromium"):
        print("=== chromium unavailable: the browser test of report.html will be skipped", flush=True)


def main(argv: list[str]) -> None:
    if len(argv) != 1 or argv[0] not in ("report", "test"):
        sys.exit("usage: python3 ci/bootstrap.py report|test")
    setup()
    if argv[0] == "report":
        # every backend that runs here, the third-party adapters (backends/jax_*) included when jax is
        # installed; their known upstream bugs are xfail (with reason and file:line) by the expectations file
        step("conformance report (quick profile, every backend that runs here)",
             [KVCONFORM, "run", "--out", "kvconform-out", "--expectations", "ci/expectations/jax_thirdparty.toml"])
        print(f"\nreport: {ROOT / 'kvconform-out' / 'report.html'} (also report.md, report.json, junit.xml)")
    else:
        # The host's speed changed ~2x within a day (issue 16): readings before and after date the timings
        # between them. A reading never fails the run, and the second is taken even when a step failed.
        log_machine_speed("before")
        try:
            for title, cmd in test_steps():
                step(title, cmd)
        finally:
            log_machine_speed("after")


def test_steps() -> list[tuple[str, list]]:
    """The steps of `test` after the install, as (title, command); benchmarks/ci_cpu.py times the same ones."""
    return [
        # worksteal: an idle worker takes queued tests from the busy one (the mutant meta-tests run 15-130 s
        # each, and xdist's default hand-out left one core idle for minutes at the end)
        ("project tests", [PY, "-m", "pytest", "-n", "2", "--dist", "worksteal", "-q", "tests"]),
        ("conformance gate (ci profile: numpy, triton and pallas backends)",
         [KVCONFORM, "run", "--backend", "numpy", "--backend", "triton", "--backend", "pallas",
          "--profile", "ci", "--jobs", "2", "--out", "ci-out"]),
    ]


def log_machine_speed(when: str) -> None:
    """Print benchmarks/machine_speed.py's reading; its failure is reported, never fatal."""
    print(f"\n=== machine speed ({when})", flush=True)
    rc = subprocess.call([str(PY), "benchmarks/machine_speed.py"], cwd=ROOT, env=step_environment())
    if rc != 0:
        print(f"=== machine speed ({when}): no reading (exit {rc})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
