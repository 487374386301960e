"""The recurrent family's comparison contract shared by its ops (spec/numerics.md, Recurrent): class R
tolerances, pool checks, padding and fresh rows."""
from __future__ import annotations

import numpy as np

from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.case import Case
from kvconform.reference import dtypes
from kvconform.reference.recurrent.selective_state import effective_dt

from .common import C_R, U_ACC, _live_rows

# --- comparison contract (spec/numerics.md, Recurrent) ---------------------------------------------

def required_out_precision(x: dict, activation: str) -> str:
    """NU-3: kernel outputs hold at least the precision of the activations (`x`, or `r` for RWKV6);
    a wider output is judged by the same bound (tolerance never follows the returned dtype)."""
    return dtypes.dtype_name(x[activation].dtype)


def class_r(out_dtype: str, n, magnitude: float, what: str) -> tolerance.Tolerance:
    """NU-R2: the general class-R bound of NU-6 with the family's reduction length n: atol = c_R * n *
    u_acc * M (gamma_n of a sum of n terms in any order, M the largest term), rtol = 2 * u_out (one
    rounding of the output plus one intermediate); the engine adds the NU-6 aggregate check.
    `n` may be an array broadcastable to the output (per-sequence lengths L_s)."""
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    atol = C_R * n * U_ACC * float(magnitude)
    return tolerance.reduction(out_dtype, atol if atol.ndim else float(atol), 2.0 * tolerance.u(out_dtype),
                               reason=f"NU-R2 class R ({what}): n<={int(n.max(initial=1.0))}, M={magnitude:.3g}, c_R=2, "
                                      f"u_acc=2^-24, rtol=2u({out_dtype})")


def _per_sequence(n_of_seq: np.ndarray, owner: np.ndarray, ndim: int) -> np.ndarray:
    """n of each row's sequence (owner[row] = sequence index, -1 = none), shaped to broadcast over `ndim`
    trailing-axis output rows."""
    n = np.where(owner >= 0, n_of_seq[np.maximum(owner, 0)], 1.0)
    return n.reshape((-1,) + (1,) * (ndim - 1))


def _zero(out_dtype: str, what: str) -> tolerance.Tolerance:
    # A 0-ULP, 0-atol bound: only the value 0.0 passes, whatever dtype the backend returns (RS-3).
    return tolerance.ulp_bounded(out_dtype, 0, 0.0, reason=f"NU-R1 class E: {what} are exactly 0.0 (RS-3)")


def _untouched() -> tolerance.Tolerance:
    return tolerance.exact("NU-R1 class E: rows not addressed and padding rows stay bitwise (RS-4)")


def _amax(*arrays) -> float:
    vals = [np.abs(np.asarray(a, dtype=np.float64)) for a in arrays if a is not None]
    vals = [v[np.isfinite(v)] for v in vals]
    return max((float(v.max()) for v in vals if v.size), default=0.0)


def _split(expected: dict, actual: dict, name: str, part: str, mask, live, rest) -> dict:
    """One field compared two ways: `live` over `mask`, `rest` elsewhere.

    The engine takes one (tolerance, mask) per field name, so the second region is registered as a
    derived field `name[part]` (the same arrays) in the field dicts it passes in."""
    derived = f"{name}[{part}]"
    expected[derived] = expected[name]
    if name in actual:
        actual[derived] = actual[name]
    return {name: (live, mask), derived: (rest, ~mask)}


def _output_checks(case: Case, expected: dict, actual: dict, name: str, mask, live: tolerance.Tolerance,
                   out_dtype: str) -> dict:
    """`name` within `live` on the rows of live rows / sequences (`mask`); padding rows exactly 0.0 (RS-3),
    or not compared at all under the claimed convention padding_outputs "unspecified" (RS-36: the pool
    is still checked untouched for them, `_pool_checks`)."""
    if case.params.get("padding_outputs") == "unspecified":
        return {name: (live, mask)}
    return _split(expected, actual, name, "padding", mask, live, _zero(out_dtype, "padding outputs"))


def _pool_checks(expected, actual, name, slots, written: tolerance.Tolerance) -> dict:
    """Written rows (the non-negative `slots`) within `written`; every other row exact (RS-4)."""
    mask = np.zeros(np.shape(expected[name]), dtype=bool)
    live = np.asarray(slots)
    mask[live[live >= 0]] = True
    return _split(expected, actual, name, "untouched", mask, written, _untouched())


def _start_rows(x: dict, slots, pool_name: str, flags=None) -> np.ndarray:
    """Starting state rows of live rows/sequences that read their slot (magnitudes for M)."""
    pool = x[pool_name]
    keep = [int(s) for i, s in enumerate(slots) if s >= 0 and (flags is None or flags[i])]
    return pool[keep] if keep else np.zeros((0,) + pool.shape[1:], dtype=pool.dtype)


def _slot_n(n_seq: np.ndarray, slots, pool: np.ndarray) -> np.ndarray:
    """n of the sequence writing each pool row (1 for rows no sequence writes: compared exactly anyway)."""
    owner = np.full(pool.shape[0], -1)
    for s, slot in enumerate(slots):
        if slot >= 0:
            owner[int(slot)] = s
    return _per_sequence(np.asarray(n_seq, dtype=np.float64), owner, pool.ndim)


def _varlen(x: dict):
    cu = np.asarray(x["cu_seqlens"])
    seqs = cu.shape[0] - 1
    slots = _live_rows(x.get("state_indices"), seqs)
    flags = x.get("has_initial_state")
    flags = np.ones(seqs, dtype=bool) if flags is None else np.asarray(flags)
    token_live = np.zeros(int(cu[-1]), dtype=bool)
    for s in range(seqs):
        if slots[s] >= 0:
            token_live[cu[s]:cu[s + 1]] = True
    lengths = np.diff(cu)
    longest = int(max((lengths[s] for s in range(seqs) if slots[s] >= 0), default=0))
    return cu, seqs, slots, flags, token_live, lengths, longest


def softplus_conditioning(x: dict, live) -> float:
    """NU-R2's `kappa` of the SSM ops: how much a rounded softplus input grows in dt' = softplus(dt + dt_bias).

    A kernel adding the bias in float32 (RS-8 allows it) rounds z = dt + dt_bias by u|z|; softplus turns an
    absolute error e of z into a relative error z sigma(z) / softplus(z) * e of dt', at most |z| * u for
    z < 0 (softplus(z) ~ e^z far below 0) and u for z >= 0. So kappa = max(0, -min z) over the live tokens
    when a bias is added under softplus, else 0 (dt alone is an input, exact in float32).
    dt: [T, H] (SSD) or [B, D] / [B, H, P] (SSU), dt_bias broadcasting to dt's trailing axes; `live`
    selects the tokens or rows that are compared."""
    if x.get("dt_bias") is None or not x.get("dt_softplus", False):
        return 0.0
    z = effective_dt(np.asarray(x["dt"], np.float64)[live], np.asarray(x["dt_bias"], np.float64), False)
    return float(max(0.0, -z.min(initial=0.0)))


def largest_sequence_total(per_token: np.ndarray, seq_of: np.ndarray) -> float:
    """The largest total of a non-negative per-token quantity over one sequence's tokens, for any head or
    channel: NU-R2's Lambda (log-decays) and NU-R2g's state growth. per_token: [R, ...] over the live
    tokens; seq_of: int[R], each token's sequence."""
    return max((float(per_token[seq_of == s].sum(axis=0).max(initial=0.0)) for s in np.unique(seq_of)),
               default=0.0)
