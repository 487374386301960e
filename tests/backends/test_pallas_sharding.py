"""Head-sharded Pallas attention (shard_map over a mesh axis) equals the unsharded kernel, on 8 simulated
CPU devices, including one KV head per device (issue 7; PA-12 head mapping, PA-21 scores summed over
heads). Runs in its own process: the device count must be set before jax is imported."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")


def test_sharded_equals_unsharded_on_8_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "kvconform.backends.pallas.sharding_check"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines[0] == {"devices": 8}
    cases = lines[1:]
    assert {c["kv_heads_per_device"] for c in cases} >= {1, 2}
    for c in cases:
        assert c["out_diff"] == 0.0, c          # same per-head arithmetic on every device
        assert c["scores_diff"] <= 1e-5, c      # psum reassociates float32 head sums only
        assert c["out_vs_reference"] <= 1e-5 and c["scores_vs_reference"] <= 1e-5, c
