"""Head-sharded Pallas attention (PA-49): the kernel under shard_map over several simulated CPU devices
equals the reference, compared through the suite's checks (spec/numerics.md NU-PA1, NU-PA2).

The backend runs where the suite runs it, in a worker process: `make_backend()` asks XLA for several CPU
devices before jax is imported there, which this test process (jax may already be imported) cannot do.
Cases: one KV head per shard with sinks and scores (the psum) on 2 devices, and two KV heads per shard
with a non-power-of-two group on 8 devices, whose per-shard KV pool (256 KiB) deadlocked interpret mode
before the worker sized XLA's CPU thread pool (runtime.py; interpret_shard_deadlock.py reproduces it). The
drawn cases are the conformance suite's `head_sharding` column (2, 4, 8 shards, per-KV-head scales); these
stay as a fast kernel check."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
from kvconform import reference  # noqa: E402
from kvconform.conformance.engine.worker import Worker  # noqa: E402
from suite_checks import assert_conforms  # noqa: E402


@pytest.fixture(scope="module")
def pallas_worker():
    worker = Worker("pallas")
    yield worker
    worker.stop()


def _inputs(rng, hkv: int, group: int, num_shards: int, *, sinks: bool, quantized: bool) -> dict:
    S, pps, ps, D, P, T = 3, 3, 4, 16, 12, 11
    hq = hkv * group
    q = rng.standard_normal((T, hq, D)).astype(np.float32)
    if quantized:
        k = rng.integers(-127, 128, (P, ps, hkv, D)).astype(np.int8)
        v = rng.integers(-127, 128, (P, ps, hkv, D)).astype(np.int8)
    else:
        k, v = (rng.standard_normal((P, ps, hkv, D)).astype(np.float32) for _ in range(2))
    x = dict(q=q, k_pages=k, v_pages=v, kv_lens=np.array([7, 12, 3], np.int32),
             page_indices=rng.permutation(P)[:S * pps].reshape(S, pps).astype(np.int32),
             cu_q_lens=np.array([0, 1, 6, 9], np.int32), num_seqs=S, return_scores=True, num_shards=num_shards)
    if sinks:
        x["sinks"] = rng.standard_normal(hq).astype(np.float32)
    if quantized:   # per KV head (PA-48): a shard must take the scales of its own heads
        x["k_scale"] = rng.choice(np.array([0.5, 0.125, 2.0], np.float32), hkv)
        x["v_scale"] = rng.choice(np.array([0.25, 1.5, 0.0625], np.float32), hkv)
    return x


def test_worker_claims_head_sharding(pallas_worker):
    claims = pallas_worker.describe()["capabilities"]["ragged_paged_attention"]
    assert "head_sharding" in claims["features"]
    assert claims["limits"]["num_shards"] == {"values": [2, 4, 8]}   # runtime.HOST_DEVICES = 8


@pytest.mark.parametrize("hkv, group, num_shards, sinks, quantized",
                         [(2, 2, 2, True, False), (16, 3, 8, True, False)])
def test_sharded_attention_conforms(pallas_worker, hkv, group, num_shards, sinks, quantized):
    x = _inputs(np.random.default_rng(7), hkv, group, num_shards, sinks=sinks, quantized=quantized)
    actual, mutated = pallas_worker.call("ragged_paged_attention", x)
    assert not mutated
    assert_conforms("ragged_paged_attention", x, actual)


def test_shard_count_must_divide_kv_heads():
    x = _inputs(np.random.default_rng(1), 3, 1, 2, sinks=False, quantized=False)
    with pytest.raises(ValueError, match="num_shards=2 must divide the KV heads Hkv=3"):
        reference.ragged_paged_attention(**x)

