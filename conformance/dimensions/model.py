"""One size dimension of one op, declared once: what it sizes, how far real deployments take it, where that
number comes from, and how a threshold bug along it is planted (spec/numerics.md "Reach by dimension").

An *axis reference* names where a dimension shows in a call, in one small grammar shared by the registry,
the range test (tests/engine/test_dimensions.py) and the generated threshold mutants (mutants/thresholds.py):

    q[0]             axis 0 of the input array `q` (its length is the dimension's size)
    k_scale[0]/3     axis 0 of `k_scale` when it has 3 axes (an argument whose form varies: per-token scales)
    num_seqs         the value of the integer input `num_seqs`
    max(kv_lens)     the largest value of the integer array input `kv_lens`
    max(diff(cu))    the largest step of the integer array `cu` (a per-sequence length from prefix sums)
    max(abs(d))      the largest magnitude of the integer array `d` (signed offsets)
    config.block_size   an integer attribute of an input object
    len(nbytes)      same as nbytes[0]

Output references (`unwritten`) name a result field and an axis: `out[0]`, `k_pages[0]`; a result that is
one array is called `out`. `out[0]@cu_q_lens` names the rows of the sequences past T (rows cu_q_lens[T]:).
`dropped` entries are `name` (a length or window value clipped to T), `kv_lens>=diff(cu_q_lens)` (clipped to
T but never below the sequence's query rows) or `name[i]` (the axis sliced to its first T entries).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

#: the tile sizes a kernel may use along any axis (Triton BLOCK_M/BLOCK_N/BLOCK_K, Pallas block shapes):
#: a generated threshold mutant exists for each T below the dimension's real maximum
TILES = (16, 32, 64, 128, 256)

#: the kinds of planted threshold bug (mutants/thresholds.py):
#:   unwritten   the output entries past T along `unwritten` axes are never written (left 0)
#:   first_tile  input entries past T along `first_tile` axes are read from the first tile (index i % T)
#:   dropped     the `dropped` length inputs are clipped to T (the part past T is skipped), or the entries
#:               past T of the `dropped` axes are sliced off (a loop that stops after its first tile)
KINDS = ("unwritten", "first_tile", "dropped")

#: the 16-bit narrowing: ids or offsets along the dimension kept modulo 2^16 (an int16/uint16 index)
NARROW_BITS = 16

_AXIS = re.compile(r"^(?P<name>[A-Za-z_]\w*)\[(?P<axis>\d+)\](/(?P<rank>\d+))?$")
_CALL = re.compile(r"^(?P<fn>max|len)\((?P<inner>.+)\)$")
_DIFF = re.compile(r"^(?P<fn>diff|abs)\((?P<name>[A-Za-z_]\w*)\)$")
_ATTR = re.compile(r"^(?P<name>[A-Za-z_]\w*)\.(?P<attr>[A-Za-z_]\w*)$")
_NAME = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True)
class Dimension:
    """One size of one op.

    name:       what it counts (tokens, sequences, pages_per_seq, page_size, pool_pages, q_heads, ...)
    axes:       the axis references (module docstring) it sizes in the op's inputs; every axis of every
                array input of a drawn case is some dimension's (tests/engine/test_dimensions.py)
    real_max:   the largest size real models or serving stacks use (`source` says whose)
    source:     the citation of real_max: "config.json of <model>: <field> = <value>" or a serving-stack
                file and limit
    small_max:  the largest size the op's ordinary (non-reach) columns draw; threshold mutants at T below
                it are caught by those columns as well, so they carry no only-reach requirement
    cheap:      True when a CPU draws it at real scale in `long` (indices, ids, pool sizes, counts, lengths
                of small-element arrays)
    no_mutant:  why no threshold mutant can be planted along it ("" when one is)
    kind:       the planted bug's kind (KINDS); the other kinds are equivalent or impossible: `why_kind`
    unwritten:  output axes left unwritten past T (kind "unwritten")
    first_tile: input axes read from the first tile past T (kind "first_tile")
    dropped:    length inputs clipped to T, or input axes sliced to T (kind "dropped")
    ids:        integer inputs whose values are ids or offsets along this dimension (16-bit narrowing)
    crossed:    True when a kernel walks it in tiles that carry state or a per-tile path from one tile to
                the next (an online softmax's running max and sum over the keys): its reach is also drawn
                crossed with the op's value regimes, their extremes only past the first tile (the crossed
                columns, strategies/dimension_reach.py `crossed_columns`)
    """
    name: str
    axes: tuple[str, ...]
    real_max: int
    source: str
    small_max: int
    cheap: bool = False
    no_mutant: str = ""
    kind: str = "unwritten"
    why_kind: str = ""
    unwritten: tuple[str, ...] = ()
    first_tile: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    crossed: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"dimension {self.name}: kind {self.kind!r} is not one of {KINDS}")
        if not self.source:
            raise ValueError(f"dimension {self.name}: source is empty (cite the config or serving limit)")
        if not 0 < self.small_max <= self.real_max:
            raise ValueError(f"dimension {self.name}: small_max {self.small_max} must be in [1, real_max "
                             f"{self.real_max}]")
        if not self.no_mutant and not getattr(self, self.kind):
            raise ValueError(f"dimension {self.name}: kind {self.kind} names no axis ({self.kind}=...) and "
                             f"no_mutant gives no reason")

    def thresholds(self) -> tuple[int, ...]:
        """The tiles T of TILES that real sizes pass (real_max > T): one generated mutant each, unless
        `no_mutant`."""
        return () if self.no_mutant else tuple(t for t in TILES if self.real_max > t)

    def reach_values(self, budget: int) -> tuple[int, ...]:
        """The sizes a `long` draw takes along this dimension: each power of two from 16 up to
        min(real_max, budget) and a tail past the largest of them that is not a multiple of 16 (so the
        last tile of every tiling is partial), the tail first (the ci profile's single example of a column
        takes the first). A caller gives cheap dimensions a budget at real scale (dimension_reach.py)."""
        top = min(self.real_max, budget)
        powers = [t for t in (2 ** k for k in range(4, 40)) if t <= top]
        if not powers:
            return (top,)
        last = powers[-1]
        tail = last + last // 2 + 1
        if tail > top:
            tail = top if top % 16 else top - 1
        return tuple(dict.fromkeys(([tail] if tail > 16 else []) + powers))


def measure(ref: str, inputs: dict[str, Any]) -> int | None:
    """The size an axis reference reads from a case's inputs (None when the input is absent or empty)."""
    m = _AXIS.match(ref)
    if m:
        x = inputs.get(m["name"])
        if x is None or not hasattr(x, "shape") or len(x.shape) <= int(m["axis"]):
            return None
        if m["rank"] and len(x.shape) != int(m["rank"]):
            return None
        return int(x.shape[int(m["axis"])])
    m = _CALL.match(ref)
    if m:
        if m["fn"] == "len":
            x = inputs.get(m["inner"])
            return None if x is None else int(np.asarray(x).shape[0])
        d = _DIFF.match(m["inner"])
        x = inputs.get(d["name"] if d else m["inner"])
        if x is None:
            return None
        x = np.asarray(x).reshape(-1).astype(np.int64)
        if d:
            x = np.diff(x) if d["fn"] == "diff" else np.abs(x)
        return max(0, int(x.max())) if x.size else None     # negative entries (skips, padding) count as 0
    m = _ATTR.match(ref)
    if m:
        x = inputs.get(m["name"])
        return None if x is None else int(getattr(x, m["attr"]))
    if _NAME.match(ref):
        x = inputs.get(ref)
        return None if x is None else int(x)
    raise ValueError(f"axis reference {ref!r} is not one of name[i], name, max(name), max(diff(name)), "
                     f"name.attr, len(name)")


def array_axis(ref: str) -> tuple[str, int, int | None] | None:
    """(input or output name, axis, rank or None) of a `name[i]` or `name[i]/r` reference; None for the
    other forms."""
    m = _AXIS.match(ref)
    return (m["name"], int(m["axis"]), int(m["rank"]) if m["rank"] else None) if m else None


def declares(dims, name: str, axis: int, rank: int) -> bool:
    """Whether some dimension of `dims` declares axis `axis` of the input `name` when it has `rank` axes."""
    for d in dims:
        for a in map(array_axis, d.axes):
            if a and a[0] == name and a[1] == axis and a[2] in (None, rank):
                return True
    return False
