"""Dimensions of the re-rotation ops rotate_keys and shift_keys (spec/rotation.md). The output is the key
cache: "unwritten" along one of its axes is a kernel that leaves the part past T unrotated (the input's
keys come back as they were), the bug the spec's "left unrotated" names."""
from __future__ import annotations

from .model import Dimension
from . import sources as src

_UNROTATED = "the part past T left unrotated (a grid over the first tile); dropping it is the same cache"


def _rotation(deltas: str, lut: bool) -> tuple[Dimension, ...]:
    return (
        Dimension("pool_pages", ("k_pages[0]",), *src.POOL_PAGES, small_max=64, cheap=True,
                  unwritten=("out[0]",), ids=("rotated_block_indices",), why_kind=_UNROTATED),
        Dimension("page_size", ("k_pages[1]", f"{deltas}[1]"), *src.PAGE_SIZE, small_max=16,
                  unwritten=("out[1]",), why_kind=_UNROTATED),
        Dimension("kv_heads", ("k_pages[2]",), *src.KV_HEADS, small_max=8, unwritten=("out[2]",),
                  why_kind=_UNROTATED),
        Dimension("head_dim", ("k_pages[3]",) + (("trig_lut[1]",) if lut else ()) + ("rotary_dim",),
                  *src.HEAD_DIM, small_max=16, unwritten=("out[3]",), why_kind=_UNROTATED),
        Dimension("rotated_blocks", ("rotated_block_indices[0]", f"{deltas}[0]"), *src.PAGES_PER_SEQ,
                  small_max=16, kind="dropped", crossed=True, dropped=("rotated_block_indices[0]", f"{deltas}[0]"),
                  why_kind="the listed blocks past T are not rotated: the same cache as leaving them unrotated"),
    ) + ((
        Dimension("lut_rows", ("trig_lut[0]", f"max({deltas})"), *src.PAGES_PER_SEQ, small_max=16,
                  kind="first_tile", first_tile=("trig_lut[0]",), ids=(deltas,),
                  why_kind="a LUT row past T read from the first tile (rows count evicted blocks)"),
    ) if lut else (
        Dimension("delta_positions", (f"max(abs({deltas}))",), 2 ** 31, "spec/rotation.md: position deltas "
                  "are int32 values (the range column reaches 2^31 - 1 and, negative, -2^31); real contexts: "
                  + src.KEYS[1],
                  small_max=8192, cheap=True,
                  no_mutant="a delta is a value, not an axis: its reach is the 16-bit narrowing", ids=(deltas,)),
    ))


REGISTRY = {"rotate_keys": _rotation("rotation_deltas", True), "shift_keys": _rotation("position_deltas", False)}
