"""Device selection for the Triton backend: a CUDA GPU when present, else the Triton interpreter.

The interpreter is chosen by the TRITON_INTERPRET environment variable, which Triton reads when a
`@triton.jit` function is *created* -- including the functions of triton.language itself (tl.sum,
tl.cdiv, ...), created when triton is first imported. So the variable must be set before anything
imports triton: `preselect()` runs at `import kvconform.backends.triton` and sets it when the machine
has no GPU device node (a check that needs neither torch nor triton); `configure()` confirms the choice
with torch and refuses, with a clear reason, if triton was already imported in the other mode.

Override: KVCONFORM_TRITON_DEVICE=cpu forces the interpreter even where a GPU exists (useful to
reproduce CI results on a GPU machine); =cuda refuses to fall back.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Runtime:
    ok: bool
    reason: str = ""
    device: str = ""          # torch device string, "cuda" or "cpu"
    interpret: bool = False   # True when kernels run in the Triton interpreter
    description: str = ""     # for Availability.device


def _missing() -> str:
    for module in ("torch", "triton"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'kvconform[triton]')"
    return ""


_GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia/version")


def preselect() -> None:
    """Set TRITON_INTERPRET=1 early when no NVIDIA device node exists (cheap; imports nothing)."""
    forced_cpu = os.environ.get("KVCONFORM_TRITON_DEVICE", "").strip().lower() == "cpu"
    if "TRITON_INTERPRET" not in os.environ and (forced_cpu or not any(map(os.path.exists, _GPU_NODES))):
        os.environ["TRITON_INTERPRET"] = "1"


def _stdlib_interpreted() -> bool | None:
    """Whether triton.language's own jit functions were created for the interpreter (None: not imported)."""
    import sys
    standard = sys.modules.get("triton.language.standard")
    if standard is None:
        return None
    return type(standard.sum).__name__ == "InterpretedFunction"


@lru_cache(maxsize=1)
def configure() -> Runtime:
    """Decide the device once per process and set TRITON_INTERPRET accordingly (idempotent)."""
    missing = _missing()
    if missing:
        return Runtime(ok=False, reason=missing)
    import torch

    wanted = os.environ.get("KVCONFORM_TRITON_DEVICE", "").strip().lower()
    has_gpu = torch.cuda.is_available()
    if wanted == "cuda" and not has_gpu:
        return Runtime(ok=False, reason="KVCONFORM_TRITON_DEVICE=cuda but no CUDA GPU is visible")
    interpret = (wanted == "cpu") or not has_gpu or os.environ.get("TRITON_INTERPRET") == "1"
    if interpret:
        if _stdlib_interpreted() is False:
            return Runtime(ok=False, reason="triton was imported before TRITON_INTERPRET=1 was set; import "
                                            "kvconform.backends.triton first or export TRITON_INTERPRET=1")
        os.environ["TRITON_INTERPRET"] = "1"
        return Runtime(ok=True, device="cpu", interpret=True, description="cpu (Triton interpreter)")
    name = torch.cuda.get_device_name(0)
    return Runtime(ok=True, device="cuda", interpret=False, description=f"{name} (CUDA, native Triton)")


def runtime() -> Runtime:
    return configure()
