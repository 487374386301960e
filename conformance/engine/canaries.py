"""Platform canaries: before a backend that runs in the Triton interpreter or Pallas TPU interpret mode is
checked, tiny kernels with known exact answers (engine/canary_triton.py, engine/canary_pallas.py) test the platform's own
dot products, conversions and math library. A failure whose case needs an operation the platform got wrong
then says so in its diagnosis: "the platform's bfloat16 tl.dot is wrong on this machine (canary: ...): this
failure may be the interpreter, not the kernel". A canary never changes a verdict.

When (`platforms_of`): the Triton interpreter when TRITON_INTERPRET=1 is set for the run (what a kernel
author sets to run Triton kernels on a CPU) or the backend's availability names it ("cpu (Triton
interpreter)"); Pallas interpret mode when the backend's availability says "interpret". The canaries of a
platform run once per run, in a subprocess with a timeout (CANARY_TIMEOUT; a canary that cannot run is
recorded with ok None and why), and are kept in the backend's description (`canaries`, in backends/*.json
and report.json) and in run.json; the folder's copy (`canaries/canaries-<platform>.json`) spares the
pytest-xdist processes of the run a second subprocess.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: platform id -> how reports name it
PLATFORMS = {"triton-interpreter": "Triton interpreter", "pallas-interpret": "Pallas TPU interpret mode"}
#: seconds the canaries of one platform may take (imports included)
CANARY_TIMEOUT = 180.0


@dataclass(frozen=True)
class Canary:
    """One known-answer probe: `what` the platform does (as the diagnosis names it), the float dtypes whose
    cases need it (a failure of a case with an input of one of them gets the note) and words that name it
    in a failure's message (a kernel that raised because the function is missing)."""
    platform: str
    name: str
    what: str
    dtypes: tuple[str, ...] = ()
    mentions: tuple[str, ...] = ()


CANARIES: tuple[Canary, ...] = (
    Canary("triton-interpreter", "bf16_dot", "bfloat16 tl.dot", ("bfloat16",)),
    Canary("triton-interpreter", "fp16_dot", "float16 tl.dot", ("float16",)),
    Canary("triton-interpreter", "fp8_e4m3_dot", "float8_e4m3fn tl.dot", ("float8_e4m3fn",)),
    Canary("triton-interpreter", "fp8_e5m2_dot", "float8_e5m2 tl.dot", ("float8_e5m2",)),
    Canary("triton-interpreter", "bf16_store", "float32 -> bfloat16 conversion", ("bfloat16",)),
    Canary("triton-interpreter", "fp8_e4m3_store", "float32 -> float8_e4m3fn conversion", ("float8_e4m3fn",)),
    Canary("triton-interpreter", "fp8_e5m2_store", "float32 -> float8_e5m2 conversion", ("float8_e5m2",)),
    Canary("triton-interpreter", "log1p", "libdevice log1p", (), ("log1p", "libdevice")),
    Canary("pallas-interpret", "bf16_dot", "bfloat16 dot", ("bfloat16",)),
    Canary("pallas-interpret", "fp8_e4m3_dot", "float8_e4m3fn dot", ("float8_e4m3fn",)),
    Canary("pallas-interpret", "bf16_store", "float32 -> bfloat16 conversion", ("bfloat16",)),
    Canary("pallas-interpret", "fp8_e4m3_store", "float32 -> float8_e4m3fn conversion", ("float8_e4m3fn",)),
    Canary("pallas-interpret", "fp8_e5m2_store", "float32 -> float8_e5m2 conversion", ("float8_e5m2",)),
)
_PROBE_MODULES = {"triton-interpreter": "kvconform.conformance.engine.canary_triton",
                  "pallas-interpret": "kvconform.conformance.engine.canary_pallas"}

_memo: dict[str, list[dict]] = {}   # platform -> results, once per process


def platforms_of(description: dict, environ=None) -> list[str]:
    """The interpreted platforms a backend runs on (ids of PLATFORMS), from its description and the run's
    environment."""
    environ = os.environ if environ is None else environ
    device = str(description.get("device") or "").lower()
    found = []
    if environ.get("TRITON_INTERPRET") == "1" or "triton interpreter" in device:
        found.append("triton-interpreter")
    if "interpret" in device and ("pallas" in device or "tpu" in device):
        found.append("pallas-interpret")
    return found


def run_platform(platform: str, timeout: float = CANARY_TIMEOUT) -> list[dict]:
    """The canaries of `platform`, each {"platform", "name", "what", "ok": True | False | None, "detail"},
    run in a subprocess (an interpreter that hangs or crashes costs the timeout, never the run)."""
    env = dict(os.environ)
    if platform == "triton-interpreter":
        env["TRITON_INTERPRET"] = "1"
    mine = [c for c in CANARIES if c.platform == platform]
    try:
        proc = subprocess.run([sys.executable, "-m", "kvconform.conformance.engine.canaries", platform],
                              capture_output=True, text=True, timeout=timeout, env=env)
        found = {}
        for line in proc.stdout.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "name" in entry:
                found[entry["name"]] = entry
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:200]
    except subprocess.TimeoutExpired:
        found, why = {}, f"the canaries took more than {timeout:g} s"
    return [dict(_record(c), **{k: found[c.name][k] for k in ("ok", "detail") if c.name in found})
            if c.name in found else dict(_record(c), ok=None, detail=f"not run: {why}") for c in mine]


def _record(c: Canary) -> dict:
    return {"platform": c.platform, "name": c.name, "what": c.what, "ok": None, "detail": ""}


def results_for(description: dict, cache_dir: Path | None = None) -> list[dict]:
    """The canary results of every interpreted platform `description`'s backend runs on ([] when none):
    this process's, else the run folder's copy, else run now (and copied there)."""
    results = []
    for platform in platforms_of(description):
        if platform not in _memo:
            _memo[platform] = _cached(platform, cache_dir)
        results += _memo[platform]
    return results


def _cached(platform: str, cache_dir: Path | None) -> list[dict]:
    path = Path(cache_dir) / f"canaries-{platform}.json" if cache_dir is not None else None
    if path is not None and path.is_file():
        try:
            saved = json.loads(path.read_text())
            if isinstance(saved, list) and all(isinstance(e, dict) for e in saved):
                return saved
        except (OSError, ValueError):
            pass
    results = run_platform(platform)
    if path is not None:   # written whole or not at all: beside it, then renamed over it
        tmp = path.with_name(f".{path.name}.{os.getpid()}.kvconform-tmp")
        try:
            tmp.write_text(json.dumps(results, indent=1) + "\n")
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)   # only a cache: the results are in the description either way
    return results


def wrong(results) -> list[dict]:
    """The canaries that found a defect."""
    return [r for r in results or () if isinstance(r, dict) and r.get("ok") is False]


def implicated(results, case_dtypes, message: str = "") -> list[tuple[Canary, dict]]:
    """The wrong canaries (with their results) whose dtype the case holds (`case_dtypes`: the dtype names of
    its float inputs and its dtype parameters) or whose function the failure's message names."""
    by_key = {(c.platform, c.name): c for c in CANARIES}
    found = []
    for r in wrong(results):
        canary = by_key.get((r.get("platform"), r.get("name")))
        if canary is not None and (set(canary.dtypes) & set(case_dtypes) or any(m in message for m in canary.mentions)):
            found.append((canary, r))
    return found


def failure_notes(results, case_dtypes, message: str = "") -> list[str]:
    """The diagnosis notes of a failure, one per implicated canary."""
    return [f"the platform's {c.what} is wrong on this machine ({PLATFORMS[c.platform]} canary: "
            f"{r.get('detail', '')[:120]}): this failure may be the interpreter, not the kernel"
            for c, r in implicated(results, case_dtypes, message)]


def case_dtypes(case) -> set[str]:
    """The dtype names a case holds: of its float (and quantized) array inputs, and its dtype parameters."""
    from kvconform.reference import dtypes
    names = {dtypes.dtype_name(v.dtype) for v in case.arrays().values() if dtypes.is_float_dtype(v.dtype)}
    names |= {str(v) for k, v in case.params.items() if k.endswith("dtype") and isinstance(v, str)}
    return names


def summary(results) -> str:
    """One line: "Triton interpreter canaries: 2 of 8 wrong (bfloat16 tl.dot, ...); 1 not run"."""
    if not results:
        return ""
    parts = []
    for platform, label in PLATFORMS.items():
        mine = [r for r in results if r.get("platform") == platform]
        if not mine:
            continue
        bad = wrong(mine)
        unknown = [r for r in mine if r.get("ok") is None]
        text = f"{label} canaries: {len(bad)} of {len(mine)} wrong"
        if bad:
            text += " (" + ", ".join(r["what"] for r in bad) + ")"
        if unknown:
            text += f"; {len(unknown)} not run ({unknown[0].get('detail', '')[:120]})"
        parts.append(text)
    return "; ".join(parts)


def _main(platform: str) -> int:
    """In the subprocess: run each probe of `platform`, one JSON line per canary."""
    import importlib
    if platform == "triton-interpreter":
        os.environ["TRITON_INTERPRET"] = "1"     # read when triton is imported: before the probes' import
    probes = importlib.import_module(_PROBE_MODULES[platform]).PROBES
    for c in (c for c in CANARIES if c.platform == platform):
        try:
            ok, detail = probes[c.name]()
        except Exception as exc:
            ok, detail = None, f"the probe raised {type(exc).__name__}: {str(exc)[:160]}"
        print(json.dumps({"name": c.name, "ok": None if ok is None else bool(ok), "detail": detail}), flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in PLATFORMS:
        print(f"usage: python -m kvconform.conformance.engine.canaries {{{','.join(PLATFORMS)}}}", file=sys.stderr)
        sys.exit(2)
    sys.exit(_main(sys.argv[1]))
