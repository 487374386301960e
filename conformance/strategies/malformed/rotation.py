"""Malformed inputs for spec/rotation.md: every error RO-12 lists, for `rotate_keys` and `shift_keys`.

The two ops share the block rules (RO-7, RO-8) and differ in the rest: the LUT rules (RO-9) belong to
`rotate_keys`, theta and the int32 range of token shifts (RO-3, RO-10) to `shift_keys`. A rule that needs a
listed block starts from one (an `n = 0` case gets page 0 listed with delta 0). Rules on `rotary_dim`
need the "partial_rotary" claim (any rotary_dim other than D is outside the claims otherwise) and keep the
LUT width equal to the broken rotary_dim, so that only the rotary_dim rule breaks.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from kvconform.backends.base import OpClaims

from .. import rotation as ro
from ..values import sampled_from
from . import as_float, as_int, grown, index, rule

VARIANTS = {"rotate_keys": ro.ROTATE_VARIANTS, "shift_keys": ro.SHIFT_VARIANTS}
PARTIAL = ro.ROTATE_VARIANTS[2]
DELTAS = {"rotate_keys": "rotation_deltas", "shift_keys": "position_deltas"}


def valid(op: str, claims: OpClaims, variant):
    return (ro.rotate_keys_cases if op == "rotate_keys" else ro.shift_keys_cases)(claims, variant)


def _listed(x: dict, deltas: str) -> tuple[np.ndarray, np.ndarray]:
    """Copies of (rotated_block_indices, deltas) with at least one listed block."""
    idx, d = np.array(x["rotated_block_indices"], copy=True), np.array(x[deltas], copy=True)
    if idx.shape[0] == 0:
        idx, d = np.zeros(1, idx.dtype), np.zeros((1, d.shape[1]), d.dtype)
    return idx, d


def _lut_width(x: dict, width: int) -> dict:
    """For rotate_keys, a LUT of `width` columns (cut or zero-padded): keeps the LUT width rule intact
    when rotary_dim is broken; nothing for shift_keys."""
    if "trig_lut" not in x:
        return {}
    lut = x["trig_lut"]
    if lut.shape[1] >= width:
        return {"trig_lut": np.ascontiguousarray(lut[:, :width])}
    return {"trig_lut": grown(lut, 1, width - lut.shape[1])}


def _common(op: str):
    d = DELTAS[op]

    def k_not_float(draw, x, claims):
        return {"k_pages": as_int(x["k_pages"])}

    def indices_not_integer(draw, x, claims):
        return {"rotated_block_indices": as_float(x["rotated_block_indices"])}

    def deltas_not_integer(draw, x, claims):
        return {d: as_float(x[d])}

    def k_rank(draw, x, claims):
        return {"k_pages": np.ascontiguousarray(x["k_pages"][:, :, 0])}

    def indices_rank(draw, x, claims):
        return {"rotated_block_indices": x["rotated_block_indices"][:, None]}

    def deltas_rank(draw, x, claims):
        return {d: x[d].reshape(-1)}

    def index_out_of_range(draw, x, claims):
        idx, dd = _listed(x, d)
        P = x["k_pages"].shape[0]
        idx[index(draw, idx.shape[0])] = draw(sampled_from((P, P + 2, -1, -3)))
        return {"rotated_block_indices": idx, d: dd}

    def duplicate_index(draw, x, claims):
        idx, dd = _listed(x, d)
        i = index(draw, idx.shape[0])
        return {"rotated_block_indices": np.concatenate([idx, idx[i:i + 1]]),
                d: np.concatenate([dd, dd[i:i + 1]])}

    def deltas_rows(draw, x, claims):
        dd = x[d]
        return {d: grown(dd, 0) if dd.shape[0] == 0 or draw(st.booleans()) else dd[:-1]}

    def deltas_width(draw, x, claims):
        n, page_size = x[d].shape[0], x["k_pages"].shape[1]
        return {d: np.zeros((n, page_size + draw(st.integers(1, 2))), x[d].dtype)}

    def unknown_layout(draw, x, claims):
        return {"layout": draw(sampled_from(("neox", "gptj", "HALF", "rotate_half")))}

    def rotary_dim_odd(draw, x, claims):
        D = x["k_pages"].shape[-1]
        rd = 2 * draw(st.integers(1, (D - 2) // 2)) + 1          # odd, 3 <= rd < D (partial: D >= 4)
        return dict({"rotary_dim": rd}, **_lut_width(x, rd))

    def rotary_dim_too_large(draw, x, claims):
        rd = x["k_pages"].shape[-1] + 2 * draw(st.integers(1, 2))   # even, > D
        return dict({"rotary_dim": rd}, **_lut_width(x, rd))

    return (
        rule("k_pages_not_float", ("RO-12",), "k_pages", "k_pages must have a floating dtype", k_not_float),
        rule("indices_not_integer", ("RO-12",), "rotated_block_indices",
             "rotated_block_indices must have an integer dtype", indices_not_integer),
        rule("deltas_not_integer", ("RO-12",), d, f"{d} must have an integer dtype", deltas_not_integer),
        rule("k_pages_rank", ("RO-12", "RO-11"), "k_pages", "k_pages must have rank 4 [P, page_size, Hkv, D]",
             k_rank),
        rule("indices_rank", ("RO-12",), "rotated_block_indices", "rotated_block_indices must have rank 1 [n]",
             indices_rank),
        rule("deltas_rank", ("RO-12", "RO-7"), d, f"{d} must have rank 2 [n, 1] or [n, page_size]", deltas_rank),
        rule("block_index_out_of_range", ("RO-12", "RO-8"), "rotated_block_indices",
             "rotated_block_indices must lie in [0, P)", index_out_of_range),
        rule("duplicate_block_index", ("RO-12", "RO-8"), "rotated_block_indices",
             "rotated_block_indices must be unique", duplicate_index),
        rule("deltas_rows", ("RO-12", "RO-7"), (d, "rotated_block_indices"),
             f"{d} must have one row per rotated block (shape[0] = n)", deltas_rows),
        rule("deltas_width", ("RO-12", "RO-7"), d, f"{d} must be [n, 1] or [n, page_size]", deltas_width),
        rule("unknown_layout", ("RO-12", "RO-2"), "layout", "layout must be 'half' or 'interleaved'",
             unknown_layout),
        rule("rotary_dim_odd", ("RO-12", "RO-2"), "rotary_dim", "rotary_dim must be even", rotary_dim_odd,
             variant=PARTIAL),
        rule("rotary_dim_too_large", ("RO-12", "RO-2"), "rotary_dim", "rotary_dim must be <= D",
             rotary_dim_too_large, variant=PARTIAL),
    )


# --- rotate_keys: the trig LUT (RO-9) -------------------------------------------------------------

def _lut_not_float(draw, x, claims):
    return {"trig_lut": as_int(x["trig_lut"])}


def _lut_rank(draw, x, claims):
    return {"trig_lut": x["trig_lut"][None]}


def _lut_row_out_of_range(draw, x, claims):
    idx, d = _listed(x, "rotation_deltas")
    rows = x["trig_lut"].shape[0]
    d[index(draw, d.shape[0]), index(draw, d.shape[1])] = draw(sampled_from((rows, rows + 3, -1)))
    return {"rotated_block_indices": idx, "rotation_deltas": d}


def _empty_lut(draw, x, claims):
    # no listed block either: with one, its row would be out of range too (a second rule)
    d = x["rotation_deltas"]
    return {"trig_lut": x["trig_lut"][:0], "rotated_block_indices": x["rotated_block_indices"][:0],
            "rotation_deltas": np.zeros((0, d.shape[1]), d.dtype)}


def _lut_wrong_width(draw, x, claims):
    return {"trig_lut": grown(x["trig_lut"], 1, 2 * draw(st.integers(1, 2)))}


ROTATE_RULES = _common("rotate_keys") + (
    rule("lut_not_float", ("RO-12", "RO-9"), "trig_lut", "trig_lut must have a floating dtype", _lut_not_float),
    rule("lut_rank", ("RO-12", "RO-9"), "trig_lut", "trig_lut must have rank 2 [rows, rotary_dim]", _lut_rank),
    rule("lut_row_out_of_range", ("RO-12", "RO-9"), "rotation_deltas",
         "rotation_deltas must be LUT rows in [0, rows) (no clamping)", _lut_row_out_of_range),
    rule("empty_lut", ("RO-12", "RO-9"), "trig_lut", "trig_lut must have at least one row", _empty_lut),
    rule("lut_width", ("RO-12", "RO-9"), ("trig_lut", "rotary_dim"), "trig_lut must have width rotary_dim",
         _lut_wrong_width),
)


# --- shift_keys: theta and the int32 shifts (RO-3, RO-10) -----------------------------------------

def _theta_invalid(draw, x, claims):
    return {"theta": draw(sampled_from((0.0, -10000.0, float("nan"), float("inf"))))}


def _deltas_outside_int32(draw, x, claims):
    idx, d = _listed(x, "position_deltas")
    d = d.astype(np.int64)
    d[index(draw, d.shape[0]), index(draw, d.shape[1])] = draw(sampled_from((2 ** 31, -2 ** 31 - 1, 2 ** 40)))
    return {"rotated_block_indices": idx, "position_deltas": d}


SHIFT_RULES = _common("shift_keys") + (
    rule("theta_invalid", ("RO-12", "RO-3"), "theta", "theta must be finite and > 0", _theta_invalid),
    rule("deltas_outside_int32", ("RO-12", "RO-10"), "position_deltas", "position_deltas must fit in int32",
         _deltas_outside_int32),
)

RULES = {"rotate_keys": ROTATE_RULES, "shift_keys": SHIFT_RULES}
