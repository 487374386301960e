"""The generated reach columns `reach_<dimension>` (spec/numerics.md NU-15 "reach by dimension").

For an op and one dimension of its registry (conformance/dimensions), a column draws that dimension at a
size of `Dimension.reach_values` (past each power-of-two tile from 16, up to its real maximum or the CPU
budget, with a tail that is not a multiple of 16), the tail first: the ci profile's single example takes
it, which passes every tile at once and leaves each tiling a partial last tile; thorough runs take the
others. Every other dimension stays small. Cheap dimensions (pool pages, ...) are drawn at real scale up
to CHEAP_BUDGET, past 2^16 so that 16-bit ids show. The claimed features of the op are all turned on in
the first example (each feature meets each dimension's large value in ci), off or on at random in the
others.

`attention_shape` gives the sizes of one ragged_paged_attention call (used through it by the CSR and MLA
strategies), `write_shape` those of one write_kv call; the rotation and metadata strategies size their own
from `pick_size`.
"""
from __future__ import annotations

import pytest

from kvconform.backends.base import OpClaims

from . import constraints
from kvconform.conformance.dimensions import dimensions
from kvconform.conformance.dimensions.model import TILES
from .values import sampled_from

#: the largest size a long draw gives a dimension that is not cheap: past the largest tile (256) with a tail
#: of 299 (not a multiple of 16); interpreted kernels run a program per sequence or row block, so each extra
#: row costs (the Triton interpreter: 511 sequences took 82 s, ~300 take half that)
BUDGET = 300
#: the longest prefill of a reach_tokens draw (its rows are spread over prefills of this many)
PREFILL_ROWS = 64
#: cheap dimensions: past 2^16 (16-bit ids wrap) at a cost of a few MiB of arrays
CHEAP_BUDGET = 1 << 17


def columns(op: str, *, ids: bool = True) -> tuple[str, ...]:
    """The dimensions of `op` that get a generated column: those with threshold mutants, and (ids=True)
    those whose ids or offsets carry a narrowing mutant (a family whose `range` column already draws ids
    up to INT32_MAX passes ids=False)."""
    return tuple(d.name for d in dimensions(op) if d.thresholds() or (ids and d.ids))


#: the value regimes of the attention range column (attention_reach.RANGE_REGIMES) a crossed column draws
#: past the first tile of a crossed dimension, in the column `reach_<dimension>_crossed_<regime>`
CROSSED = "_crossed_"


def crossed_columns(op: str, regimes) -> tuple[tuple[str, str], ...]:
    """(dimension, regime) of each crossed column of `op`: every registry dimension marked `crossed` (the
    keys of an online softmax, the tokens of a write loop) with every value regime of its range column
    (spec/numerics.md NU-15 "crossed"); the regime's extreme values sit only past the dimension's first
    tile (past every tile of model.TILES below the drawn size)."""
    return tuple((d.name, r) for d in dimensions(op) if d.crossed for r in regimes)


def past_first_tiles(n: int) -> int:
    """The first index of a dimension of size `n` that lies past the first tile of every tiling of
    model.TILES shorter than n (256 for n = 300): a crossed column puts its extremes from there on."""
    return max([t for t in TILES if t < n] + [0])


def sizes(op: str, name: str, admits=lambda n: True) -> tuple[int, ...]:
    """The sizes of `name` a reach column of `op` draws, those `admits` allows: the tail first (past the
    largest tile, not a multiple of 16), then the powers of two from the largest down."""
    dim = next(d for d in dimensions(op) if d.name == name)
    values = dim.reach_values(CHEAP_BUDGET if dim.cheap else BUDGET)
    return tuple(v for v in values[:1] + tuple(sorted(values[1:], reverse=True)) if admits(v))


def pick_size(draw, op: str, name: str, admits=lambda n: True, what: str = "") -> int:
    options = sizes(op, name, admits)
    if not options:
        pytest.skip(f"unsupported: no {what or name} of the reach_{name} column within the claims")
    return draw(sampled_from(options))


def features_on(draw, claims: OpClaims, candidates) -> tuple[str, ...]:
    """The claimed features of `candidates` this example turns on: all of them first, then at random."""
    return tuple(f for f in candidates if f in claims.features and draw(sampled_from((True, False))))


def attention_shape(draw, claims: OpClaims, op: str, name: str) -> dict:
    """Sizes of one attention call whose dimension `name` is large: page_size, head_dim, hkv, group,
    q_lens, kv_lens, pool (pages in the pool, the sequences' pages taking the highest ids) and window."""
    limits = claims.limits
    ok = lambda key: (lambda n: constraints.admits(limits.get(key), n))   # noqa: E731
    small_pages = constraints.allowed(claims, "page_size", claims.page_sizes or (2, 1, 4))
    page_size = min(small_pages)
    head_dim = min(constraints.allowed(claims, "head_dim", claims.head_dims or (4, 8)))
    row = next((q for q in (1, 2, 3, 4) if ok("q_len")(q)), None)    # query rows of a short sequence
    if row is None:
        pytest.skip(f"unsupported: no query-row count of 1..4 within q_len {limits.get('q_len')}")
    shape = dict(page_size=page_size, head_dim=head_dim, hkv=1, group=1, q_lens=[row], kv_lens=[row + 2], pool=0,
                 window=None)
    if name == "tokens":
        # n rows as prefills of at most PREFILL_ROWS rows each (the rows past T exist; a kernel's cost stays
        # rows x keys of short sequences: one 300-row prefill took an interpreted MLA kernel 103 s)
        chunk = PREFILL_ROWS if ok("q_len")(PREFILL_ROWS) else row
        n = pick_size(draw, op, name, lambda n: ok("max_num_seqs")(-(-n // chunk)))
        q_lens = [chunk] * (n // chunk) + ([n % chunk] if n % chunk and ok("q_len")(n % chunk) else [])
        shape.update(q_lens=q_lens, kv_lens=list(q_lens))
    elif name == "sequences":
        n = pick_size(draw, op, name, ok("max_num_seqs"))
        shape.update(q_lens=[row] * n, kv_lens=[row + i % 3 for i in range(n)])
    elif name == "pages_per_seq":
        n = pick_size(draw, op, name, lambda n: ok("max_pages")(n + 1))
        page_size = min(p for p in small_pages)
        shape.update(page_size=page_size, kv_lens=[max(row, n * page_size - (page_size > 1))])
    elif name == "keys":
        n = pick_size(draw, op, name, ok("max_kv_len"))
        shape.update(kv_lens=[n])
    elif name == "page_size":
        claimed = claims.page_sizes
        n = pick_size(draw, op, name, lambda n: (claimed is None or n in claimed) and ok("page_size")(n))
        shape.update(page_size=n, kv_lens=[n + n // 2 + 1])
    elif name in ("pool_pages", "table_pages"):
        n = pick_size(draw, op, "pool_pages", ok("max_pages"))
        shape.update(pool=n, kv_lens=[max(row, 3 * page_size)])
    elif name == "q_heads":
        n = pick_size(draw, op, name, lambda n: ok("num_q_heads")(n) and ok("group_size")(n))
        if n > 1 and "gqa" not in claims.features:
            shape.update(hkv=n)    # MHA: as many KV heads
        else:
            shape.update(group=n)
    elif name == "kv_heads":
        shape.update(hkv=pick_size(draw, op, name, lambda n: ok("num_kv_heads")(n) and ok("num_q_heads")(n)))
    elif name == "head_dim":
        top = limits.get("max_head_dim")
        claimed = claims.head_dims
        shape.update(head_dim=pick_size(draw, op, name, lambda n: (claimed is None or n in claimed)
                                        and (top is None or n <= top) and ok("head_dim")(n)))
    elif name == "window":
        if "sliding_window" not in claims.features:
            pytest.skip("unsupported: the reach_window column needs the sliding_window feature")
        n = pick_size(draw, op, name, lambda n: ok("max_kv_len")(n + n // 2) and ok("sliding_window")(n))
        shape.update(window=n, kv_lens=[n + n // 2], q_lens=[2 if ok("q_len")(2) else row])
    elif name not in ("latent_dim", "rope_dim"):    # MLA's: the caller sizes head_dim = d_c + d_r
        raise ValueError(f"no attention shape for dimension {name!r} of {op}")
    return shape


def write_shape(draw, claims: OpClaims, op: str, name: str) -> dict:
    """Sizes of one write_kv call whose dimension `name` is large: page_size, head_dim, hkv, tokens and
    num_pages (a pool at real scale writes its highest pages: slots past 2^16)."""
    ok = lambda key: (lambda n: constraints.admits(claims.limits.get(key), n))   # noqa: E731
    page_size = min(constraints.allowed(claims, "page_size", claims.page_sizes or (2, 1, 4)))
    head_dim = min(constraints.allowed(claims, "head_dim", claims.head_dims or (4, 8)))
    shape = dict(page_size=page_size, head_dim=head_dim, hkv=1, tokens=8, num_pages=4)
    if name == "tokens":
        n = pick_size(draw, op, name)
        shape.update(tokens=n, num_pages=-(-n // page_size) + 1)
    elif name == "pool_pages":
        shape.update(num_pages=pick_size(draw, op, name, ok("max_pages")))
    elif name == "page_size":
        claimed = claims.page_sizes
        n = pick_size(draw, op, name, lambda n: (claimed is None or n in claimed) and ok("page_size")(n))
        shape.update(page_size=n, tokens=n + 3, num_pages=2)
    elif name == "kv_heads":
        shape.update(hkv=pick_size(draw, op, name, ok("num_kv_heads")))
    elif name == "head_dim":
        claimed = claims.head_dims
        shape.update(head_dim=pick_size(draw, op, name, lambda n: (claimed is None or n in claimed)
                                        and ok("head_dim")(n)))
    else:
        raise ValueError(f"no write_kv shape for dimension {name!r}")
    return shape
