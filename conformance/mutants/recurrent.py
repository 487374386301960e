"""Mutants of the recurrent family (spec/recurrent.md): realistic slot-pool and scan bugs, each wrapping
the reference so that exactly one rule is broken."""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.reference.recurrent.selective_state import effective_dt
from kvconform.reference.recurrent.slots import gather_rows, scatter_rows

from . import Mutant, mutant


@mutant(op="selective_state_update", clause="RS-3",
        description="a padding row (-1) is not skipped on store: Python-style indexing writes its state "
                    "into the pool's last slot")
class PaddingSlotWritesState(Mutant):
    def selective_state_update(self, state, x, dt, A, B, C, *, state_indices=None, **kw):
        result = reference.selective_state_update(state, x, dt, A, B, C, state_indices=state_indices, **kw)
        if state_indices is None or not (np.asarray(state_indices) < 0).any():
            return result
        # The kernel "updates" the padding row from its (NaN) inputs and a zero state, then stores it
        # at index -1, which wraps to the last slot.
        pad = int(np.flatnonzero(np.asarray(state_indices) < 0)[0])
        row = np.zeros((1,) + state.shape[1:], dtype=state.dtype)
        one = lambda a: None if a is None else a[pad:pad + 1]   # noqa: E731
        scratch = reference.selective_state_update(
            row, x[pad:pad + 1], dt[pad:pad + 1], A, B[pad:pad + 1], C[pad:pad + 1],
            **{k: (one(v) if k == "z" else v) for k, v in kw.items()})
        pool = result.state.copy()
        pool[-1] = scratch.state[0]
        return type(result)(result.out, pool)


@mutant(op="selective_state_update", clause="RS-7",
        description="the cells[i] bug (llama.cpp #12799): batch row i's new state is stored at pool slot i "
                    "instead of its slot state_indices[i]")
class StateStoredAtBatchIndex(Mutant):
    def selective_state_update(self, state, x, dt, A, B, C, *, state_indices=None, **kw):
        result = reference.selective_state_update(state, x, dt, A, B, C, state_indices=state_indices, **kw)
        if state_indices is None:
            return result
        idx = np.asarray(state_indices)
        pool = np.array(state, dtype=result.state.dtype, copy=True)
        for i in np.flatnonzero(idx >= 0):
            if i >= pool.shape[0]:      # a batch larger than the pool: the kernel would write out of bounds
                continue
            pool[i] = result.state[idx[i]]      # cells[i], not cells[state_indices[i]]
        return type(result)(result.out, pool)


@mutant(op="rwkv6_wkv", clause="RS-2",
        description="sequences are sorted by slot for the launch grid and final states are scattered "
                    "back in sorted order: a sequence's state lands in another sequence's slot")
class StateRowsAliasedAfterReorder(Mutant):
    def rwkv6_wkv(self, r, k, v, w, u, state, cu_seqlens, *, state_indices=None, **kw):
        result = reference.rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, state_indices=state_indices, **kw)
        if state_indices is None:
            return result
        idx = np.asarray(state_indices)
        live = np.flatnonzero(idx >= 0)
        pool = result.state.copy()
        # Sequence live[j] writes to the j-th smallest slot instead of its own.
        pool[np.sort(idx[live])] = result.state[idx[live]]
        return type(result)(result.out, pool)


@mutant(op="ssd_chunked_scan", clause="RS-18",
        description="the chunked scan drops the initial state: every sequence starts from zeros")
class ChunkedScanDropsInitialState(Mutant):
    def ssd_chunked_scan(self, state, x, dt, A, B, C, cu_seqlens, *, has_initial_state=None, **kw):
        seqs = np.asarray(cu_seqlens).shape[0] - 1
        return reference.ssd_chunked_scan(state, x, dt, A, B, C, cu_seqlens,
                                          has_initial_state=np.zeros(seqs, dtype=bool), **kw)


@mutant(op="causal_conv1d_update", clause="RS-12",
        description="the conv state stores post-convolution outputs instead of the raw inputs")
class ConvStateStoresOutputs(Mutant):
    def causal_conv1d_update(self, x, conv_state, weight, bias=None, *, activation=None, state_indices=None):
        result = reference.causal_conv1d_update(x, conv_state, weight, bias, activation=activation,
                                                state_indices=state_indices)
        # Feed the outputs through as if they were the inputs: the window then ends in outputs.
        shifted = reference.causal_conv1d_update(result.out, conv_state, weight, bias, activation=activation,
                                                 state_indices=state_indices)
        return type(result)(result.out, shifted.conv_state)


@mutant(op="selective_state_update", clause="RS-16",
        description="Mamba2 head h reads group h % G (tiled repeat) instead of h // (H / G)")
class Mamba2GroupsModulo(Mutant):
    def selective_state_update(self, state, x, dt, A, B, C, **kw):
        if np.ndim(state) != 4:
            return reference.selective_state_update(state, x, dt, A, B, C, **kw)
        heads, groups = np.shape(state)[1], np.shape(B)[1]
        tiled = np.arange(heads) % groups        # one group per head, chosen the wrong way
        return reference.selective_state_update(state, x, dt, A, np.asarray(B)[:, tiled],
                                                np.asarray(C)[:, tiled], **kw)


@mutant(op="rwkv6_wkv", clause="RS-5",
        description="a fresh sequence's state is row * 0 instead of selected zeros: NaN/inf rows leak")
class FreshStateMultipliesByZero(Mutant):
    def rwkv6_wkv(self, r, k, v, w, u, state, cu_seqlens, *, state_indices=None, has_initial_state=None):
        if has_initial_state is None:
            return reference.rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, state_indices=state_indices)
        seqs = np.asarray(cu_seqlens).shape[0] - 1
        slots = np.arange(seqs) if state_indices is None else np.asarray(state_indices)
        pool = state.copy()
        with np.errstate(invalid="ignore"):
            for s in range(seqs):
                if slots[s] >= 0 and not has_initial_state[s]:
                    pool[slots[s]] = pool[slots[s]] * 0
        # Only addressed rows were touched, and the call overwrites them all.
        return reference.rwkv6_wkv(r, k, v, w, u, pool, cu_seqlens, state_indices=state_indices)


def _pieces(cu: np.ndarray, width: int) -> tuple[np.ndarray, list[list[int]]]:
    """Every sequence cut into pieces of `width` tokens from its first token (a length-0 sequence: one
    empty piece): the pieces' cu_seqlens (the tokens keep their places) and the pieces of each sequence."""
    bounds, of_seq = [0], []
    for s in range(cu.shape[0] - 1):
        lo, hi = int(cu[s]), int(cu[s + 1])
        of_seq.append([])
        for start in range(lo, max(hi, lo + 1), width):
            of_seq[s].append(len(bounds) - 1)
            bounds.append(min(start + width, hi))
    return np.asarray(bounds, dtype=np.int32), of_seq


def _restarted(call, width: int):
    """The pieces of `_pieces` as separate sequences, each starting from its sequence's starting row
    (slot row or fresh zeros): a one-row-per-piece pool, its indices and has_initial_state flags."""
    cu_p, of_seq = _pieces(np.asarray(call.cu_seqlens), width)
    owner = np.asarray([s for s, pieces in enumerate(of_seq) for _ in pieces])
    slots = np.asarray(call.state_indices)[owner]
    pool = np.zeros((owner.shape[0],) + call.state.shape[1:], dtype=call.state.dtype)
    pool[slots >= 0] = call.state[slots[slots >= 0]]
    idx = np.where(slots >= 0, np.arange(owner.shape[0]), -1).astype(np.int32)
    return cu_p, of_seq, pool, idx, np.asarray(call.has_initial_state)[owner]


def _final_rows(result, piece_state, call, of_seq):
    """The new pool: each live sequence's slot gets the state its last piece ended with."""
    pool = result.state.copy()
    for s, pieces in enumerate(of_seq):
        if call.state_indices[s] >= 0:
            pool[call.state_indices[s]] = piece_state[pieces[-1]]
    return pool


@mutant(op="ssd_chunked_scan", clause="RS-18", max_size=11, only_caught_by="long",
        description="the kernel's 8-token chunks do not carry the state into the next chunk: every chunk "
                    "of a sequence restarts from the sequence's starting state (invisible below 9 tokens)")
class ChunkCarryDropped(Mutant):
    CHUNK = 8

    def ssd_chunked_scan(self, state, x, dt, A, B, C, cu_seqlens, **kw):
        result = reference.ssd_chunked_scan(state, x, dt, A, B, C, cu_seqlens, **kw)   # validates
        call = reference.validate_ssd_chunked_scan(state, x, dt, A, B, C, cu_seqlens, **kw)
        if int(np.diff(call.cu_seqlens).max(initial=0)) <= self.CHUNK:
            return result
        cu_p, of_seq, pool, idx, flags = _restarted(call, self.CHUNK)
        k_snap = call.num_snapshots
        opts = {k: v for k, v in kw.items() if k not in ("state_indices", "has_initial_state", "num_snapshots")}
        pieces = reference.ssd_chunked_scan(pool, x, dt, A, B, C, cu_p, state_indices=idx,
                                            has_initial_state=flags,
                                            num_snapshots=self.CHUNK + 1 if k_snap else 0, **opts)
        # Snapshot r is the state after L - r tokens of the mutated trajectory: token m > 0 lies in piece
        # (m - 1) // CHUNK, as that piece's snapshot (piece length - offset); m = 0: the starting state.
        snaps = result.snapshots.copy()
        lengths = np.diff(call.cu_seqlens)
        for s, ps in enumerate(of_seq):
            if call.state_indices[s] < 0:
                continue
            for r in range(min(k_snap, int(lengths[s]) + 1)):
                m = int(lengths[s]) - r
                q = max(0, (m - 1) // self.CHUNK)
                piece_len = int(cu_p[ps[q] + 1] - cu_p[ps[q]])
                snaps[s, r] = pieces.snapshots[ps[q], piece_len - (m - q * self.CHUNK)]
        return type(result)(pieces.out, _final_rows(result, pieces.state, call, of_seq), snaps)


@mutant(op="rwkv6_wkv", clause="RS-20", max_size=68, only_caught_by="long",
        description="the kernel's 64-token windows do not carry the state into the next window: every "
                    "window of a sequence restarts from the sequence's starting state (invisible below 65 "
                    "tokens)")
class WindowCarryDropped(Mutant):
    WINDOW = 64

    def rwkv6_wkv(self, r, k, v, w, u, state, cu_seqlens, **kw):
        result = reference.rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, **kw)   # validates
        call = reference.validate_rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, **kw)
        if int(np.diff(call.cu_seqlens).max(initial=0)) <= self.WINDOW:
            return result
        cu_p, of_seq, pool, idx, flags = _restarted(call, self.WINDOW)
        pieces = reference.rwkv6_wkv(r, k, v, w, u, pool, cu_p, state_indices=idx, has_initial_state=flags)
        return type(result)(pieces.out, _final_rows(result, pieces.state, call, of_seq))


# --- reach (issue 27): bugs behind a size or value threshold the 4-token columns never cross ---------------
# Each is caught only by the op's `long` (sizes) or `range` (values) column (spec/recurrent.md section 6).

def _spliced(pool, block, part) -> np.ndarray:
    """A copy of `pool` whose entries `block` (an index) hold `part`: what a kernel that computes only the
    first block of an axis leaves in the pool (the rest keeps its old values)."""
    out = np.array(pool, copy=True)
    out[block] = part
    return out


@mutant(op="selective_state_update", clause="RS-9", only_caught_by="range", max_size=8,
        description="softplus computed as log(1 + exp(dt)) in float32 with no threshold (state-spaces/mamba "
                    "@33dc96c8 mamba_ssm/ops/triton/selective_state_update.py: `dt = tl.log(1.0 + tl.exp(dt))`): "
                    "exp overflows past dt = 88.7 and dt' becomes inf")
class SoftplusWithoutThreshold(Mutant):
    def selective_state_update(self, state, x, dt, A, B, C, *, dt_bias=None, dt_softplus=False, **kw):
        call = reference.validate_selective_state_update(state, x, dt, A, B, C, dt_bias=dt_bias,
                                                         dt_softplus=dt_softplus, **kw)
        if not call.dt_softplus:
            return reference.selective_state_update(state, x, dt, A, B, C, dt_bias=dt_bias, **kw)
        d = call.dt if call.dt_bias is None else call.dt + call.dt_bias
        with np.errstate(over="ignore"):
            dtp = np.log(np.float32(1) + np.exp(d.astype(np.float32)))
        return reference.selective_state_update(state, x, dtp, A, B, C, **kw)


@mutant(op="selective_state_update", clause="RS-15", only_caught_by="long", max_size=8,
        description="the path for state sizes above 128 (mamba_ssm selective_state_update switches its "
                    "launch past dstate 128; ggml's CUDA ssm_scan has a d_state 256 path) drops state "
                    "entries 128 and up: never updated, never read")
class StateTailDropped(Mutant):
    HEAD = 128

    def selective_state_update(self, state, x, dt, A, B, C, **kw):
        result = reference.selective_state_update(state, x, dt, A, B, C, **kw)     # validates
        n = np.shape(state)[-1]
        if n <= self.HEAD:
            return result
        mamba1 = np.ndim(state) == 3
        head = slice(0, self.HEAD)
        part = reference.selective_state_update(
            np.asarray(state)[..., head], x, dt, np.asarray(A)[..., head] if mamba1 else A,
            np.asarray(B)[..., head], np.asarray(C)[..., head], **kw)
        return type(result)(part.out, _spliced(state, (Ellipsis, head), part.state))


@mutant(op="ssd_chunked_scan", clause="RS-18", only_caught_by="long", max_size=320,
        description="chunks above 128 tokens: the second 128-row block of a chunk sums its intra-chunk "
                    "terms from its own first row, dropping the contributions of the chunk's first 128 "
                    "tokens (mamba_ssm ssd_chunk_scan tiles a chunk in BLOCK_SIZE_M <= 128 rows)")
class SecondRowBlockDropped(Mutant):
    BLOCK = 128

    def ssd_chunked_scan(self, state, x, dt, A, B, C, cu_seqlens, **kw):
        result = reference.ssd_chunked_scan(state, x, dt, A, B, C, cu_seqlens, **kw)   # validates
        call = reference.validate_ssd_chunked_scan(state, x, dt, A, B, C, cu_seqlens, **kw)
        Q = call.chunk_size
        if Q <= self.BLOCK:
            return result
        out = np.array(result.out, copy=True)
        dtp = effective_dt(call.dt, call.dt_bias, call.dt_softplus)
        start = gather_rows(call.state, call.state_indices, call.has_initial_state)
        opts = {n: kw[n] for n in ("D", "dt_softplus") if n in kw}
        for s, slot in enumerate(call.state_indices):
            lo, hi = int(call.cu_seqlens[s]), int(call.cu_seqlens[s + 1])
            if slot < 0:
                continue
            for c0 in range(lo, hi, Q):
                if c0 + self.BLOCK >= min(c0 + Q, hi):
                    continue
                # the state entering the chunk, then decayed through its first BLOCK tokens without their inputs
                entering = self._state_after(call, s, start[s], lo, c0, dtp, opts, kw)
                decay = np.exp((dtp[c0:c0 + self.BLOCK] * call.A[None]).sum(axis=0))       # [H]
                rows = slice(c0 + self.BLOCK, min(c0 + Q, hi))
                part = reference.ssd_chunked_scan(
                    (entering * decay[:, None, None])[None], call.x[rows], np.asarray(dt)[rows], A,
                    np.asarray(B)[rows], np.asarray(C)[rows], np.array([0, rows.stop - rows.start], np.int32),
                    chunk_size=Q, z=None if kw.get("z") is None else np.asarray(kw["z"])[rows],
                    dt_bias=kw.get("dt_bias"), **opts)
                out[rows] = part.out
        return type(result)(out, result.state, result.snapshots)

    @staticmethod
    def _state_after(call, s, S0, lo, c0, dtp, opts, kw):
        """The true state of sequence s after its tokens lo .. c0 (float64 [H, P, N])."""
        if c0 == lo:
            return S0
        rows = slice(lo, c0)
        run = reference.ssd_chunked_scan(S0[None], call.x[rows], call.dt[rows], call.A, call.B[rows], call.C[rows],
                                         np.array([0, c0 - lo], np.int32), dt_bias=kw.get("dt_bias"),
                                         dt_softplus=call.dt_softplus)
        return run.state[0].astype(np.float64)


@mutant(op="causal_conv1d_update", clause="RS-11", only_caught_by="long", max_size=8,
        description="the launch grid covers one block of 256 channels (vLLM's causal_conv1d_update uses "
                    "BLOCK_N = 256): channels 256 and up are never computed, their outputs 0 and windows "
                    "unchanged")
class ChannelBlockDropped(Mutant):
    BLOCK = 256

    def causal_conv1d_update(self, x, conv_state, weight, bias=None, *, activation=None, state_indices=None):
        result = reference.causal_conv1d_update(x, conv_state, weight, bias, activation=activation,
                                                state_indices=state_indices)
        channels = np.shape(x)[-1]
        if channels <= self.BLOCK:
            return result
        block = slice(0, self.BLOCK)
        part = reference.causal_conv1d_update(np.asarray(x)[..., block], np.asarray(conv_state)[:, block],
                                              np.asarray(weight)[block],
                                              None if bias is None else np.asarray(bias)[block],
                                              activation=activation, state_indices=state_indices)
        out = _spliced(np.zeros_like(result.out), (Ellipsis, block), part.out)
        return type(result)(out, _spliced(conv_state, (slice(None), block), part.conv_state))


# caught by the range column, and by the long column's crossed tier (the same regimes over several chunks, RS-45)
@mutant(op="rwkv6_wkv", clause="RS-20", only_caught_by="range|long", max_size=10,
        description="16-token windows in the closed form with float32 prefix products P of the decays and "
                    "their reciprocals 1 / P: strong decays (log w = -50) underflow P, 1 / P overflows, and "
                    "the window's outputs and state become inf / NaN")
class DecayPrefixProducts(Mutant):
    WINDOW = 16

    def rwkv6_wkv(self, r, k, v, w, u, state, cu_seqlens, **kw):
        result = reference.rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, **kw)   # validates
        call = reference.validate_rwkv6_wkv(r, k, v, w, u, state, cu_seqlens, **kw)
        idx, cu = call.state_indices, call.cu_seqlens
        start = gather_rows(call.state, idx, call.has_initial_state)
        out = np.zeros(np.shape(call.v))
        final = np.zeros_like(start)
        with np.errstate(all="ignore"):
            for s in np.flatnonzero(idx >= 0):
                S = start[s]
                for w0 in range(int(cu[s]), int(cu[s + 1]), self.WINDOW):
                    toks = range(w0, min(w0 + self.WINDOW, int(cu[s + 1])))
                    wv = np.asarray(call.w[toks.start:toks.stop], np.float64)               # [n, H, K]
                    P = np.cumprod(wv, axis=0).astype(np.float32)
                    inv = (np.float32(1) / P).astype(np.float64)
                    P = P.astype(np.float64)
                    acc = np.zeros_like(S)
                    for i, t in enumerate(toks):
                        kt, vt, rt = (np.asarray(a[t], np.float64) for a in (call.k, call.v, call.r))
                        kv = kt[:, :, None] * vt[:, None, :]
                        before = (P[i - 1][:, :, None] if i else 1.0) * (S + acc)
                        out[t] = np.einsum("hk,hkv->hv", rt, before + call.u[:, :, None] * kv)
                        acc = acc + inv[i][:, :, None] * kv
                    S = P[-1][:, :, None] * (S + acc)
                final[s] = S
        return type(result)(out, scatter_rows(call.state, idx, final))
