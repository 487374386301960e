"""Fake recurrent kernels with real kernels' conventions (tests/engine/test_recurrent_conventions.py).

`Conventional` claims each convention it has (spec/recurrent.md RS-36 … RS-41) and must pass;
`Unconventional` is the same kernels without those claims and must fail; `Violating` claims them but breaks
the part still checked. Each convention is the one of a real kernel:

- conv1d padding rows: the output keeps x (vLLM's causal_conv1d_update returns before any store for a
  PAD_SLOT_ID row, its output comes from torch.empty_like; RS-36);
- gated delta rule padding rows: uninitialised output (vLLM's fused_recurrent o = q.new_empty(...), RS-36),
  and K == V only (ggml's gated_delta_net state [S_v, S_v, H, n_seqs], RS-40);
- selective state update: softplus on every call (ggml ssm_scan, RS-37), D and dt_bias required (mamba_ssm's
  wrapper reads dt_bias.stride(-1) unconditionally, RS-38), group counts powers of two (RS-41);
- SSD prefill: no empty sequences (RS-39) and none of D, z, dt_bias, softplus (declined as Unsupported:
  the goldens must restate themselves without them, issue 31's "claims more than it supports").
"""
import dataclasses

import numpy as np

from kvconform import Unsupported, reference
from kvconform.backends.numpy import NumpyBackend

OPS = ("causal_conv1d_update", "selective_state_update", "ssd_chunked_scan", "gated_delta_rule_update")
LIMITS = {
    "causal_conv1d_update": {"padding_outputs": "unspecified"},
    "selective_state_update": {"dt_softplus": "always", "required_inputs": ["D", "dt_bias"],
                               "num_groups": {"values": [1, 2, 4, 8]}},
    "ssd_chunked_scan": {"seq_len": {"min": 1}},
    "gated_delta_rule_update": {"equal_key_value_dims": True, "padding_outputs": "unspecified"},
}
SSD_FEATURES = ("state_indices", "padding_slots", "initial_states", "snapshots", "grouped_bc")


class Unconventional(NumpyBackend):
    """The kernels, claiming no convention."""
    name = "unconventional"
    claimed: bool = False

    def capabilities(self):
        claims = super().capabilities()
        out = {op: dataclasses.replace(claims[op], limits=dict(LIMITS[op]) if self.claimed else {}) for op in OPS}
        out["ssd_chunked_scan"] = dataclasses.replace(out["ssd_chunked_scan"], features=SSD_FEATURES)
        return out

    def causal_conv1d_update(self, x, conv_state, weight, bias=None, *, activation=None, state_indices=None):
        result = reference.causal_conv1d_update(x, conv_state, weight, bias, activation=activation,
                                                state_indices=state_indices)
        if state_indices is not None:
            out = np.array(result.out, copy=True)
            pad = np.asarray(state_indices) < 0
            out[pad] = np.asarray(x, np.float64)[pad]           # the row keeps x (never written)
            result = result._replace(out=out)
        return result

    def selective_state_update(self, state, x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=False,
                               state_indices=None):
        # validate first, as a real adapter does: malformed input is rejected, not "outside the conventions"
        reference.validate_selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                                                  dt_softplus=dt_softplus, state_indices=state_indices)
        if D is None or dt_bias is None:
            raise AttributeError("'NoneType' object has no attribute 'stride'")
        groups = np.shape(B)[1] if np.ndim(B) == 3 else 1
        if groups & (groups - 1):
            raise RuntimeError(f"ngroups {groups} is not a power of 2")
        return reference.selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=True,
                                                state_indices=state_indices)

    def ssd_chunked_scan(self, state, x, dt, A, B, C, cu_seqlens, **kw):
        reference.validate_ssd_chunked_scan(state, x, dt, A, B, C, cu_seqlens, **kw)
        given = [k for k in ("D", "z", "dt_bias") if kw.get(k) is not None] + (["dt_softplus"] if kw.get("dt_softplus") else [])
        if given:
            raise Unsupported(f"{given} not supported")
        if (np.diff(np.asarray(cu_seqlens)) == 0).any():
            raise IndexError("empty sequence: no chunk to read its state from")
        return reference.ssd_chunked_scan(state, x, dt, A, B, C, cu_seqlens, **kw)

    def gated_delta_rule_update(self, q, k, v, g, beta, state, *, state_indices=None, **kw):
        reference.validate_gated_delta_rule_update(q, k, v, g, beta, state, state_indices=state_indices, **kw)
        if np.shape(state)[2] != np.shape(state)[3]:
            raise RuntimeError("state must be [S_v, S_v, H, n_seqs]")
        result = reference.gated_delta_rule_update(q, k, v, g, beta, state, state_indices=state_indices, **kw)
        if state_indices is not None:
            out = np.array(result.out, copy=True)
            out[np.asarray(state_indices) < 0] = np.nan           # uninitialised memory
            result = result._replace(out=out)
        return result


class Conventional(Unconventional):
    """The same kernels, each convention claimed."""
    name = "conventional"
    claimed = True


class Violating(Conventional):
    """Claims the conventions but breaks what is still checked: a padding conv row written into the pool
    (index -1 wraps to the last slot), softplus never applied, D ignored."""
    name = "violating"

    def causal_conv1d_update(self, x, conv_state, weight, bias=None, *, activation=None, state_indices=None):
        result = super().causal_conv1d_update(x, conv_state, weight, bias, activation=activation,
                                              state_indices=state_indices)
        if state_indices is None or not (np.asarray(state_indices) < 0).any():
            return result
        pool = np.array(result.conv_state, copy=True)
        pool[-1] = np.nan_to_num(np.asarray(x, np.float64)[np.asarray(state_indices) < 0][0].reshape(-1)[:1])
        return result._replace(conv_state=pool)

    def selective_state_update(self, state, x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=False,
                               state_indices=None):
        if D is None or dt_bias is None:
            raise AttributeError("'NoneType' object has no attribute 'stride'")
        return reference.selective_state_update(state, x, dt, A, B, C, z=z, dt_bias=dt_bias, dt_softplus=False,
                                                state_indices=state_indices)


class RealSizesOnly(NumpyBackend):
    """A decode kernel for head dim 64 (Mamba1: 64 channels) and d_state 128 only (as ggml's CUDA ssm_scan
    takes d_state 128 or 256 only), claimed as limits: every column must draw those sizes, and goldens at
    them run."""
    name = "real-sizes-only"

    def capabilities(self):
        claims = super().capabilities()["selective_state_update"]
        return {"selective_state_update": dataclasses.replace(claims, features=("mamba2", "grouped_bc"), limits={
            "head_dim": {"values": [64]}, "state_size": {"values": [128]}, "max_num_seqs": 2})}

    def selective_state_update(self, state, *args, **kw):
        result = reference.selective_state_update(state, *args, **kw)      # validates first
        if np.shape(state)[-2:] != (64, 128):
            raise RuntimeError(f"called outside the claimed limits: state {np.shape(state)}")
        return result


class RaisesUnlessEmpty(NumpyBackend):
    """An adapter that returns early for a call without tokens and otherwise hits the same compile error on
    every call: a failure of the call itself, never one of call history (issue 31)."""
    name = "raises-unless-empty"

    def capabilities(self):
        claims = super().capabilities()
        return {op: claims[op] for op in ("causal_conv1d_update", "gated_delta_rule_chunked")}

    def causal_conv1d_update(self, x, *args, **kw):
        if np.size(x):
            raise RuntimeError("compile error: unsupported layout")
        return reference.causal_conv1d_update(x, *args, **kw)

    def gated_delta_rule_chunked(self, q, *args, **kw):
        if np.shape(q)[0]:
            raise RuntimeError("compile error: unsupported layout")
        return reference.gated_delta_rule_chunked(q, *args, **kw)


def make_conventional():
    return Conventional()


def make_unconventional():
    return Unconventional()


def make_violating():
    return Violating()


def make_real_sizes_only():
    return RealSizesOnly()


def make_raises_unless_empty():
    return RaisesUnlessEmpty()
