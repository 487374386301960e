"""How the Pallas backend compiles and runs kernels here (backends/pallas/runtime.py, bucketing.py).

The release rule exists because, on CPU, each compiled interpret-mode kernel holds ~150 memory mappings and
a process past vm.max_map_count dies with SIGSEGV inside the next compile (seen in a full conformance run).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from kvconform import reference  # noqa: E402
from kvconform.backends.pallas import bucketing, runtime  # noqa: E402
from kvconform.backends.pallas import make_backend  # noqa: E402

BACKEND = make_backend()


def _conv(channels: int, rng):
    x = rng.standard_normal((2, channels)).astype(np.float32)
    pool = rng.standard_normal((2, channels, 2)).astype(np.float32)
    weight = rng.standard_normal((channels, 3)).astype(np.float32)
    return x, pool, weight


@pytest.mark.skipif(runtime.mapping_count() is None, reason="memory mappings are counted on Linux only")
def test_release_drops_compiled_kernels_and_their_mappings(monkeypatch):
    rng = np.random.default_rng(0)
    for channels in (9, 17, 25):  # three channel buckets (16, 24, 32): three compiled kernels
        BACKEND.causal_conv1d_update(*_conv(channels, rng))
    monkeypatch.setattr(runtime, "MAP_BUDGET", 1.0)
    assert runtime.release_if_needed() is False          # far below vm.max_map_count
    before = runtime.mapping_count()
    monkeypatch.setattr(runtime, "MAP_BUDGET", 0.0)
    assert runtime.release_if_needed() is True
    assert runtime.mapping_count() < before - 100        # the executables' code mappings are gone
    monkeypatch.setattr(runtime, "MAP_BUDGET", 1.0)
    x, pool, weight = _conv(9, rng)                     # and a released kernel simply recompiles
    got = BACKEND.causal_conv1d_update(x, pool, weight)
    np.testing.assert_array_equal(got.conv_state, reference.causal_conv1d_update(x, pool, weight).conv_state)


def test_head_buckets_keep_each_head_in_its_group():
    heads = bucketing.HeadBuckets(6, 3)                  # 3 groups of 2 -> 4 groups of 2
    assert (heads.padded_groups, heads.padded_per_group, heads.padded_heads) == (4, 2, 8)
    a = np.arange(6.0)
    padded = heads.pad(a, 0)
    # head h of group g sits at g * padded_per_group + (h % per_group); padding heads hold zeros
    np.testing.assert_array_equal(padded, [0, 1, 2, 3, 4, 5, 0, 0])
    np.testing.assert_array_equal(heads.unpad(padded, 0), a)
    np.testing.assert_array_equal(bucketing.HeadBuckets(9, 3).pad(np.arange(9.0), 0).reshape(4, 4)[:3, :3],
                                  np.arange(9.0).reshape(3, 3))
    np.testing.assert_array_equal(heads.pad(np.array([7.0, 8.0, 9.0]), 0, per_group=True), [7, 8, 9, 0])


def test_buckets():
    assert [bucketing.pow2(n) for n in (0, 1, 2, 3, 5, 8)] == [1, 1, 2, 4, 8, 8]
    assert bucketing.pow2(3, 4) == 4 and bucketing.pow2(9, 4) == 16
    assert [bucketing.sublanes(n) for n in (0, 1, 8, 9)] == [8, 8, 8, 16]
