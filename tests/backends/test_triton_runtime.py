"""Triton backend device selection, CUDA-tensor transport and the benchmark's --smoke mode (issue 17).

These run on CPU: the GPU answer of `torch.cuda.is_available` is mocked, the transport is checked on
torch's "meta" device (a non-CPU device that needs no GPU), and the benchmark runs its tiny shapes
under the interpreter. Native GPU runs are not covered here.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

# The backend package must be imported before triton (it sets TRITON_INTERPRET when no GPU exists).
from kvconform.backends.triton import _runtime  # noqa: E402

if _runtime._missing():
    pytest.skip(_runtime._missing(), allow_module_level=True)

import torch  # noqa: E402

from kvconform.backends.triton import convert  # noqa: E402
from kvconform.reference import dtypes  # noqa: E402


@pytest.fixture
def fresh_configure(monkeypatch):
    """configure() is cached per process; clear it around each test and restore the real answer."""
    _runtime.configure.cache_clear()
    yield monkeypatch
    _runtime.configure.cache_clear()


def test_preselect_sets_interpreter_without_gpu_nodes(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("KVCONFORM_TRITON_DEVICE", raising=False)
    monkeypatch.setattr(_runtime, "_GPU_NODES", ("/nonexistent/nvidiactl",))
    _runtime.preselect()
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_preselect_leaves_native_when_gpu_node_exists(monkeypatch, tmp_path):
    node = tmp_path / "nvidiactl"
    node.write_text("")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("KVCONFORM_TRITON_DEVICE", raising=False)
    monkeypatch.setattr(_runtime, "_GPU_NODES", (str(node),))
    _runtime.preselect()
    assert "TRITON_INTERPRET" not in os.environ


def test_preselect_forced_cpu_even_with_gpu_node(monkeypatch, tmp_path):
    node = tmp_path / "nvidiactl"
    node.write_text("")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("KVCONFORM_TRITON_DEVICE", "cpu")
    monkeypatch.setattr(_runtime, "_GPU_NODES", (str(node),))
    _runtime.preselect()
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_configure_without_gpu_is_interpreter(fresh_configure):
    fresh_configure.setattr(torch.cuda, "is_available", lambda: False)
    fresh_configure.setattr(_runtime, "_stdlib_interpreted", lambda: None)   # as in a process on a CPU machine
    fresh_configure.delenv("KVCONFORM_TRITON_DEVICE", raising=False)
    rt = _runtime.configure()
    assert rt.ok and rt.device == "cpu" and rt.interpret
    assert "interpreter" in rt.description


def test_configure_demanding_cuda_without_gpu_refuses(fresh_configure):
    fresh_configure.setattr(torch.cuda, "is_available", lambda: False)
    fresh_configure.setenv("KVCONFORM_TRITON_DEVICE", "cuda")
    rt = _runtime.configure()
    assert not rt.ok and "KVCONFORM_TRITON_DEVICE=cuda" in rt.reason


def test_configure_with_gpu_is_native(fresh_configure):
    fresh_configure.setattr(torch.cuda, "is_available", lambda: True)
    fresh_configure.setattr(torch.cuda, "get_device_name", lambda i=0: "Mock H100")
    fresh_configure.delenv("KVCONFORM_TRITON_DEVICE", raising=False)
    fresh_configure.delenv("TRITON_INTERPRET", raising=False)
    rt = _runtime.configure()
    assert rt.ok and rt.device == "cuda" and not rt.interpret
    assert rt.description == "Mock H100 (CUDA, native Triton)"


def test_configure_with_gpu_but_forced_cpu_is_interpreter(fresh_configure):
    fresh_configure.setattr(torch.cuda, "is_available", lambda: True)
    fresh_configure.setattr(torch.cuda, "get_device_name", lambda i=0: "Mock H100")
    fresh_configure.setenv("KVCONFORM_TRITON_DEVICE", "cpu")
    fresh_configure.setattr(_runtime, "_stdlib_interpreted", lambda: None)   # triton not yet imported
    rt = _runtime.configure()
    assert rt.ok and rt.device == "cpu" and rt.interpret


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8"])
def test_transport_to_a_non_cpu_device_keeps_dtype_and_bits(name):
    """to_torch moves the array to the requested device ("meta" stands in for "cuda") with the torch
    dtype of the same name; on CPU the bit patterns survive the round trip exactly."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5)).astype(np.float32).astype(dtypes.DTYPES.get(name, name))
    t = convert.to_torch(x, "meta")
    assert t.device.type == "meta" and tuple(t.shape) == x.shape
    assert t.dtype == convert._torch_dtype(name)
    back = convert.to_numpy(convert.to_torch(x, "cpu"))
    assert back.dtype == x.dtype
    np.testing.assert_array_equal(back.view(np.uint8), np.ascontiguousarray(x).view(np.uint8))


def test_transport_copy_isolates_the_callers_array():
    x = np.arange(6, dtype=np.float32)
    t = convert.to_torch(x, "cpu", copy=True)
    t += 1
    np.testing.assert_array_equal(x, np.arange(6, dtype=np.float32))


def test_metadata_transport_to_device():
    t = convert.metadata(np.array([1, 2, 3], dtype=np.int16), "meta")
    assert t.device.type == "meta" and t.dtype == torch.int64


def _bench_module():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "triton" / "bench_kernels.py"
    spec = importlib.util.spec_from_file_location("bench_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_kernels"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_smoke_mode_runs_and_writes_json(tmp_path):
    """bench_kernels.py --smoke (issue 30): every measurement runs at tiny shapes, the JSON holds the device,
    the versions and the goals table with its six keys, none of them filled by a smoke timing; fla-core's
    absence (or a missing GPU) is said, not an error."""
    rt = _runtime.configure()
    if not rt.ok:
        pytest.skip(rt.reason)
    out = tmp_path / "bench.json"
    res = _bench_module().main(["--smoke", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["smoke"] is True and saved["device"] == rt.description
    assert {"torch", "triton", "cuda", "driver", "python"} <= set(saved) and saved["errors"] == {}
    figures = saved["smoke_figures"]
    for key in ("copy_GBps", "decode_vs_copy", "decode_b1_vs_copy", "prefill_vs_sdpa", "ssu_vs_copy",
                "mla_decode_vs_copy", "gdn_chunked_vs_copy", "rotation_vs_copy"):
        assert figures[key] > 0 and np.isfinite(figures[key]), key
    assert figures["decode_b1_num_splits"] > 1            # the b1 shape reaches split-KV even when tiny
    assert set(saved["goals"]) == {"prefill_vs_sdpa", "decode_vs_copy", "decode_b1_vs_copy", "ssu_vs_copy",
                                   "mla_decode_vs_copy", "gdn_chunked_vs_fla"}
    for key, entry in saved["goals"].items():
        assert entry["figure"] is None and entry["met"] is None and entry["why"] and entry["goal"] > 0, key
    assert saved["gdn_fla"]["available"] is (rt.device == "cuda" and saved["gdn_fla"].get("version") is not None)
    assert res["figures"] == {}
