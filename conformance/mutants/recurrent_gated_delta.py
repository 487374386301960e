"""Mutants of the gated delta rule ops (spec/recurrent.md RS-28 … RS-35): realistic GDN kernel bugs, each
breaking exactly one rule of the reference."""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.reference.recurrent import gated_delta as gd
from kvconform.reference.recurrent.reductions import ordered_sum
from kvconform.reference.recurrent.slots import gather_rows, scatter_rows

from . import Mutant, mutant
from .recurrent import _final_rows, _restarted, _spliced


def _update_with_step(call, step):
    """`gated_delta_rule_update` with the per-token `step(S, q, k, v, g, beta, scale) -> (out, S)`."""
    idx = call.state_indices
    start = gather_rows(call.state, idx, np.ones(idx.shape[0], dtype=bool))
    qh, kh = gd._prepared_qk(call)
    out = np.zeros(call.v.shape)
    final = np.zeros_like(start)
    for b in np.flatnonzero(idx >= 0):
        out[b], final[b] = step(start[b], qh[b], kh[b], call.v[b], call.g[b], call.beta[b], call.scale)
    return gd.GatedDeltaUpdate(out, scatter_rows(call.state, idx, final))


def _chunked_with(call, piece, width: int):
    """`gated_delta_rule_chunked` run `width` tokens at a time (never across sequences) with
    `piece(S, q, k, v, g, beta, scale) -> (out, S)` on those tokens' arrays (leading token axis)."""
    idx, cu = call.state_indices, call.cu_seqlens
    start = gather_rows(call.state, idx, call.has_initial_state)
    qh, kh = gd._prepared_qk(call)
    out = np.zeros(call.v.shape)
    final = np.zeros_like(start)
    for s in np.flatnonzero(idx >= 0):
        S = start[s]
        for t0 in range(int(cu[s]), int(cu[s + 1]), width):
            t = slice(t0, min(t0 + width, int(cu[s + 1])))
            out[t], S = piece(S, qh[t], kh[t], call.v[t], call.g[t], call.beta[t], call.scale)
        final[s] = S
    return gd.GatedDeltaScan(out, scatter_rows(call.state, idx, final))


def _chunked_with_step(call, step):
    """`gated_delta_rule_chunked` run token by token with the per-token `step`."""
    def one_token(S, q, k, v, g, beta, scale):
        out, S = step(S, q[0], k[0], v[0], g[0], beta[0], scale)
        return out[None], S
    return _chunked_with(call, one_token, 1)


def _decay_after_write(S, q, k, v, g, beta, scale):
    u = beta[:, None] * (v - ordered_sum(S * k[:, :, None], axis=1))      # delta from the undecayed state
    S = np.exp(g)[:, None, None] * (S + k[:, :, None] * u[:, None, :])     # decay after the write
    return scale * ordered_sum(S * q[:, :, None], axis=1), S


def _beta_outside_delta(S, q, k, v, g, beta, scale):
    S = np.exp(g)[:, None, None] * S
    u = v - beta[:, None] * ordered_sum(S * k[:, :, None], axis=1)         # beta scales S^T k only
    S = S + k[:, :, None] * u[:, None, :]
    return scale * ordered_sum(S * q[:, :, None], axis=1), S


@mutant(op="gated_delta_rule_update", clause="RS-30",
        description="the decay exp(g) is applied after the write (S <- exp(g)(S + k u^T), u read from the "
                    "undecayed state) instead of before the delta")
class GDNDecayAfterWrite(Mutant):
    def gated_delta_rule_update(self, q, k, v, g, beta, state, **kw):
        return _update_with_step(reference.validate_gated_delta_rule_update(q, k, v, g, beta, state, **kw),
                                 _decay_after_write)


@mutant(op="gated_delta_rule_chunked", clause="RS-30",
        description="beta multiplies only the read-back S^T k, not the whole delta: u = v - beta S^T k")
class GDNBetaOutsideDelta(Mutant):
    def gated_delta_rule_chunked(self, q, k, v, g, beta, state, cu_seqlens, **kw):
        call = reference.validate_gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, **kw)
        return _chunked_with_step(call, _beta_outside_delta)


@mutant(op="gated_delta_rule_update", clause="RS-29",
        description="use_qk_l2norm is ignored: q and k are not normalised")
class GDNNoL2Norm(Mutant):
    def gated_delta_rule_update(self, q, k, v, g, beta, state, *, use_qk_l2norm=False, **kw):
        reference.validate_gated_delta_rule_update(q, k, v, g, beta, state, use_qk_l2norm=use_qk_l2norm, **kw)
        return reference.gated_delta_rule_update(q, k, v, g, beta, state, **kw)


@mutant(op="gated_delta_rule_update", clause="RS-28",
        description="state head h reads q/k head h % Hk (tiled repeat) instead of h // (H / Hk)")
class GDNHeadsModulo(Mutant):
    def gated_delta_rule_update(self, q, k, v, g, beta, state, **kw):
        reference.validate_gated_delta_rule_update(q, k, v, g, beta, state, **kw)
        heads, qk = np.shape(v)[1], np.shape(q)[1]
        tiled = np.arange(heads) % qk
        return reference.gated_delta_rule_update(np.asarray(q)[:, tiled], np.asarray(k)[:, tiled], v, g, beta,
                                                 state, **kw)


@mutant(op="gated_delta_rule_update", clause="RS-31",
        description="row i's new state is stored in slot i instead of slot state_indices[i]")
class GDNStateToRowSlot(Mutant):
    def gated_delta_rule_update(self, q, k, v, g, beta, state, *, state_indices=None, **kw):
        result = reference.gated_delta_rule_update(q, k, v, g, beta, state, state_indices=state_indices, **kw)
        if state_indices is None:
            return result
        idx = np.asarray(state_indices)
        pool = np.array(state, copy=True)
        for i in np.flatnonzero(idx >= 0):
            if i < pool.shape[0]:
                pool[i] = result.state[idx[i]]
        return type(result)(result.out, pool)


@mutant(op="gated_delta_rule_update", clause="RS-3",
        description="a padding row (-1) is updated from a zero state and stored at index -1, which wraps "
                    "to the pool's last slot")
class GDNPaddingWritesState(Mutant):
    def gated_delta_rule_update(self, q, k, v, g, beta, state, *, state_indices=None, **kw):
        result = reference.gated_delta_rule_update(q, k, v, g, beta, state, state_indices=state_indices, **kw)
        if state_indices is None or not (np.asarray(state_indices) < 0).any():
            return result
        pad = int(np.flatnonzero(np.asarray(state_indices) < 0)[0])
        one = slice(pad, pad + 1)
        scratch = reference.gated_delta_rule_update(
            np.asarray(q)[one], np.asarray(k)[one], np.asarray(v)[one], np.asarray(g)[one],
            np.asarray(beta)[one], np.zeros((1,) + np.shape(state)[1:], np.asarray(state).dtype), **kw)
        pool = result.state.copy()
        pool[-1] = scratch.state[0]
        return type(result)(result.out, pool)


@mutant(op="gated_delta_rule_chunked", clause="RS-5",
        description="a fresh sequence's state is row * 0 instead of selected zeros: NaN/inf rows leak "
                    "(only the poisoned cases show it)")
class GDNFreshMultipliesByZero(Mutant):
    def gated_delta_rule_chunked(self, q, k, v, g, beta, state, cu_seqlens, *, has_initial_state=None,
                                 state_indices=None, **kw):
        call = reference.validate_gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens,
                                                           has_initial_state=has_initial_state,
                                                           state_indices=state_indices, **kw)
        pool = np.array(state, copy=True)
        with np.errstate(invalid="ignore"):
            for s, slot in enumerate(call.state_indices):
                if slot >= 0 and not call.has_initial_state[s]:
                    pool[slot] = pool[slot] * 0
        return reference.gated_delta_rule_chunked(q, k, v, g, beta, pool, cu_seqlens,
                                                  state_indices=state_indices, **kw)


@mutant(op="gated_delta_rule_chunked", clause="RS-33", max_size=11, only_caught_by="long",
        description="the kernel's 8-token chunks do not carry the state into the next chunk: every chunk "
                    "of a sequence restarts from the sequence's starting state (invisible below 9 tokens)")
class GDNChunkCarryDropped(Mutant):
    CHUNK = 8

    def gated_delta_rule_chunked(self, q, k, v, g, beta, state, cu_seqlens, **kw):
        result = reference.gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, **kw)   # validates
        call = reference.validate_gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, **kw)
        if int(np.diff(call.cu_seqlens).max(initial=0)) <= self.CHUNK:
            return result
        cu_p, of_seq, pool, idx, flags = _restarted(call, self.CHUNK)
        opts = {n: a for n, a in kw.items() if n not in ("state_indices", "has_initial_state")}
        pieces = reference.gated_delta_rule_chunked(q, k, v, g, beta, pool, cu_p, state_indices=idx,
                                                    has_initial_state=flags, **opts)
        return type(result)(pieces.out, _final_rows(result, pieces.state, call, of_seq))


# --- reach (issue 27): bugs behind a size or value threshold the short columns never cross -------------

def _chunk_split_decays(S, q, k, v, g, beta, scale):
    """The chunk form of RS-33 with every decay exp(gam_i - gam_j) formed as exp(gam_i) * exp(-gam_j) in
    float32: exp(-gam_j) overflows once the chunk's cumulative log gate passes -88.7 (inf * 0 = NaN)."""
    n = q.shape[0]
    gam = np.cumsum(g, axis=0).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        up = np.exp(gam).astype(np.float64)                        # exp(gam_i)
        down = np.exp(-gam).astype(np.float64)                     # exp(-gam_j)
        lower = np.tril(np.ones((n, n), dtype=bool))[:, :, None]
        decay = np.where(lower, up[:, None, :] * down[None, :, :], 0.0)
        kk = np.einsum("ihk,jhk->ijh", k, k)
        strict = np.tril(np.ones((n, n), dtype=bool), -1)[:, :, None]
        L = np.where(strict, beta[:, None, :] * decay * kk, 0.0)
        rhs = beta[:, :, None] * (v - up[:, :, None] * np.einsum("hkv,ihk->ihv", S, k))
        u = np.zeros_like(rhs)
        for i in range(n):
            u[i] = rhs[i] - np.einsum("jh,jhv->hv", L[i, :i], u[:i])
        qk = np.einsum("ihk,jhk->ijh", q, k) * decay
        out = scale * (up[:, :, None] * np.einsum("hkv,ihk->ihv", S, q) + np.einsum("ijh,jhv->ihv", qk, u))
        w = up[-1][None, :] * down
        S_end = up[-1][:, None, None] * S + np.einsum("jh,jhk,jhv->hkv", w, k, u)
    return out, S_end


# caught by the range column, and by the long column's crossed tier (the same regimes over several chunks, RS-45)
@mutant(op="gated_delta_rule_chunked", clause="RS-33", only_caught_by="range|long", max_size=10,
        description="chunk decays exp(gam_i - gam_j) formed as exp(gam_i) * exp(-gam_j) in float32: once a "
                    "chunk's cumulative log gate passes -88.7, exp(-gam) overflows and the outputs become "
                    "NaN / inf")
class GDNDecaysSplitExp(Mutant):
    def gated_delta_rule_chunked(self, q, k, v, g, beta, state, cu_seqlens, **kw):
        call = reference.validate_gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, **kw)
        return _chunked_with(call, _chunk_split_decays, call.chunk_size)


@mutant(op="gated_delta_rule_update", clause="RS-30", only_caught_by="long|_real", max_size=8,
        description="key dims past 64 are never touched (fla's chunk_delta_h keeps the state in 64-key "
                    "blocks b_h1 … b_h4, one per 64 keys; here the blocks past the first are missing): "
                    "state rows k >= 64 unchanged, and they neither feed the delta nor the output")
class GDNKeyBlockDropped(Mutant):
    BLOCK = 64

    def gated_delta_rule_update(self, q, k, v, g, beta, state, **kw):
        call = reference.validate_gated_delta_rule_update(q, k, v, g, beta, state, **kw)
        result = reference.gated_delta_rule_update(q, k, v, g, beta, state, **kw)
        if np.shape(state)[2] <= self.BLOCK:
            return result
        head = slice(0, self.BLOCK)
        opts = dict(kw, scale=call.scale)
        part = reference.gated_delta_rule_update(np.asarray(q)[..., head], np.asarray(k)[..., head], v, g, beta,
                                                 np.asarray(state)[:, :, head], **opts)
        return gd.GatedDeltaUpdate(part.out, _spliced(state, (slice(None), slice(None), head), part.state))
