"""Mutants of the recurrent family that need BOTH a size threshold and a value regime or an option (issue
"Reach by principle"; spec/recurrent.md RS-42, RS-45): a long sequence alone (tame values) and the range
column alone (one short chunk) pass each of them; the `crossed` tier of the long column (range regimes over
several chunks, strategies/recurrent/crossed.py) and, for the slot ids, the `slots` tier are what catch them.
The last two need an option met at a large dimension: the gated delta rule's `use_qk_l2norm` at K past one
64-key block (the `heads` tier), SSD's `has_initial_state` past 64 sequences (the `sequences` tier); the
size tiers draw their claimed options on in their first example for that.

Each wraps the reference so that exactly one rule is broken, and only where its threshold and its values
meet; elsewhere it returns the reference's result unchanged (or the same up to the order of its sums).
"""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.reference.recurrent import gated_delta as gd
from kvconform.reference.recurrent.slots import gather_rows, scatter_rows

from . import Mutant, mutant
from .recurrent_gated_delta import _chunk_split_decays, _chunked_with_step


@mutant(op="rwkv6_wkv", clause="RS-20", only_caught_by="long", max_size=160,
        description="16-token windows rebase their decays on a running log-decay prefix of the whole "
                    "sequence, exp(L_t - L_start): once a decay of exactly 0 (log -inf) has passed in an "
                    "earlier window, every later window's decays are exp(-inf + inf) = NaN (a zero decay "
                    "inside one window, or long sequences of decays in (0, 1), are fine)")
class ZeroDecayBreaksLaterWindows(Mutant):
    WINDOW = 16

    def rwkv6_wkv(self, r, k, v, w, u, state, cu_seqlens, **kw):
        result = reference.rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, **kw)    # validates
        call = reference.validate_rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, **kw)
        idx, cu = call.state_indices, call.cu_seqlens
        zero = np.asarray(call.w) == 0                                          # [T, H, K]
        if not zero.any():
            return result
        start = gather_rows(call.state, idx, call.has_initial_state)
        out = np.array(result.out, copy=True)
        final = np.zeros_like(start)
        arrays = [np.asarray(a) for a in (r, k, v, w)]
        for s in np.flatnonzero(idx >= 0):
            S = start[s]
            seen = np.zeros(S.shape[:2], dtype=bool)                            # [H, K]: a zero passed
            lo, hi = int(cu[s]), int(cu[s + 1])
            for t0 in range(lo, hi, self.WINDOW):
                t = slice(t0, min(t0 + self.WINDOW, hi))
                S = np.where(seen[:, :, None], np.nan, S)                        # exp(-inf - -inf)
                piece = reference.rwkv6_wkv(*(a[t] for a in arrays), u, S[None],
                                            np.array([0, t.stop - t0], np.int32))
                out[t] = piece.out
                S = piece.state[0]
                seen |= zero[t].any(axis=0)
            final[s] = S
        return type(result)(out, scatter_rows(call.state, idx, final))


@mutant(op="gated_delta_rule_chunked", clause="RS-33", only_caught_by="long", max_size=160,
        description="past a sequence's first 64-token chunk, the kernel's second path rebases each chunk's "
                    "decays with exp(gam_i) * exp(-gam_j) in float32 instead of exp(gam_i - gam_j): steep "
                    "gates (a chunk's summed log gate below -88.7) overflow exp(-gam) and give NaN / inf, "
                    "which a single short chunk, or a long sequence of gates near 0, never shows")
class GDNLaterChunksSplitExp(Mutant):
    CHUNK = 64

    def gated_delta_rule_chunked(self, q, k, v, g, beta, state, cu_seqlens, **kw):
        result = reference.gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, **kw)   # validates
        call = reference.validate_gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, **kw)
        idx, cu = call.state_indices, call.cu_seqlens
        if int(np.diff(cu).max(initial=0)) <= self.CHUNK:
            return result
        start = gather_rows(call.state, idx, call.has_initial_state)
        qh, kh = gd._prepared_qk(call)
        out = np.zeros(call.v.shape)
        final = np.zeros_like(start)
        for s in np.flatnonzero(idx >= 0):
            S = start[s]
            for t0 in range(int(cu[s]), int(cu[s + 1]), self.CHUNK):
                t = slice(t0, min(t0 + self.CHUNK, int(cu[s + 1])))
                piece = gd._chunk if t0 == int(cu[s]) else _chunk_split_decays
                out[t], S = piece(S, qh[t], kh[t], call.v[t], call.g[t], call.beta[t], call.scale)
            final[s] = S
        return gd.GatedDeltaScan(out, scatter_rows(call.state, idx, final))


@mutant(op="causal_conv1d_update", clause="RS-2", only_caught_by="long", max_size=12,
        description="the slot index column is narrowed to 16 bits (uint16 conv_state_indices): a slot id "
                    "of 65536 or more reads and writes slot id - 65536, another sequence's window")
class SlotIdsNarrowedTo16Bits(Mutant):
    def causal_conv1d_update(self, x, conv_state, weight, bias=None, *, activation=None, state_indices=None):
        result = reference.causal_conv1d_update(x, conv_state, weight, bias, activation=activation,
                                                state_indices=state_indices)           # validates
        if state_indices is None:
            return result
        idx = np.asarray(state_indices).astype(np.int64)
        narrowed = np.where(idx >= 0, idx % 2 ** 16, idx).astype(np.int32)
        if len(set(narrowed[narrowed >= 0].tolist())) < int((narrowed >= 0).sum()):
            return result                             # two rows on one slot: the kernel's race, not modelled
        return reference.causal_conv1d_update(x, conv_state, weight, bias, activation=activation,
                                              state_indices=narrowed)


def _l2_first_block(x: np.ndarray, block: int) -> np.ndarray:
    """x / sqrt(sum of the first `block` x[..., k]^2 + 1e-6): the norm of one key block applied to all K."""
    head = x[..., :block]
    return x / np.sqrt(np.sum(head * head, axis=-1) + gd.L2NORM_EPS)[..., None]


def _first_block_normed(call, block: int):
    """The validated call with q and k normalised by their first key block, use_qk_l2norm off."""
    return call._replace(q=_l2_first_block(call.q, block), k=_l2_first_block(call.k, block), use_qk_l2norm=False)


@mutant(op="gated_delta_rule_chunked", clause="RS-29", only_caught_by="long", max_size=160,
        description="use_qk_l2norm divides q and k by the norm of their first 64 key elements (a norm "
                    "kernel of one 64-wide block) instead of all K: exact for K <= 64, wrong for the real "
                    "heads of 128 and 256 keys")
class GDNL2NormFirstKeyBlock(Mutant):
    BLOCK = 64

    def gated_delta_rule_chunked(self, q, k, v, g, beta, state, cu_seqlens, **kw):
        call = reference.validate_gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, **kw)
        if not call.use_qk_l2norm or call.q.shape[-1] <= self.BLOCK:
            return reference.gated_delta_rule_chunked(q, k, v, g, beta, state, cu_seqlens, **kw)
        return _chunked_with_step(_first_block_normed(call, self.BLOCK), gd._step)


@mutant(op="ssd_chunked_scan", clause="RS-5", only_caught_by="long", max_size=160,
        description="has_initial_state is loaded for the first 64 sequences only (one block of the flag "
                    "load, the rest left at True): a later fresh sequence starts from its slot's stale state")
class FreshFlagsFirstBlockOnly(Mutant):
    BLOCK = 64

    def ssd_chunked_scan(self, *args, has_initial_state=None, **kw):
        if has_initial_state is not None and np.ndim(has_initial_state) == 1 \
                and np.shape(has_initial_state)[0] > self.BLOCK:
            flags = np.array(has_initial_state, copy=True)
            flags[self.BLOCK:] = True
            has_initial_state = flags
        return reference.ssd_chunked_scan(*args, has_initial_state=has_initial_state, **kw)
