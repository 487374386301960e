"""Strategies and comparison contract for the rotation family (spec/rotation.md).

Ops: `rotate_keys` (LUT form, RO-9) and `shift_keys` (theta form, RO-10). Drawn within the backend's
claims: cache dtypes (`kv_dtypes`), LUT dtypes (`dtypes`), page sizes, head dims, pair layouts
(`layouts`: "half", "interleaved") and the features "per_block_deltas" ([n, 1]), "per_token_deltas"
([n, page_size]), "partial_rotary" (rotary_dim < D) and "negative_deltas" (shift_keys, delta < 0).
Block indices are a shuffled subset of the pool (RO-8). Cases are drawn clean; the poison regions sit
only where RO-1 says the data is copied unchanged (unlisted pages, dims >= rotary_dim of listed pages),
so those are compared exactly, and in one whole token slot of a listed page (an unfilled slot is rotated,
RO-1), whose rotated pairs are left out of the comparison (NU-RO5), which still checks that NaN does not
spread.

Two reach columns (spec/rotation.md, "Reach: sizes and values drawn"): `long` draws real page sizes, head
dims, partial rotary dims, KV head counts and tens of listed pages (a few examples); `range` draws keys
over the whole exponent range of the cache dtype up to its largest finite value, LUTs of real models'
theta bases and Llama-3 frequency scaling, and token shifts past 2^24 up to int32's extremes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import strategies as st

from kvconform import reference
from kvconform.backends.base import OpClaims
from kvconform.reference import dtypes
from kvconform.reference.rotation import inverse_frequencies

from kvconform.conformance.engine import strided
from kvconform.conformance.engine.case import Case, PoisonRegion
from .variations import widened
from . import constraints
from . import dimension_reach as dr
from .values import floats, pick, sampled_from, seeds, shuffled
from .rotation_contract import rotate_checks, shift_checks
from .constraints import claimed as _claimed

CACHE_DTYPES = ("float32", "bfloat16", "float16", "float64")
LUT_DTYPES = ("float32", "float64", "bfloat16", "float16")
LAYOUTS = ("half", "interleaved")
DEFAULT_PAGE_SIZES = (2, 1, 4, 3)     # used when any page size is claimed; 3 is not a power of two
DEFAULT_HEAD_DIMS = (4, 8, 6)
THETAS = (10000.0, 100.0, 500000.0)

# --- reach (spec/rotation.md "Reach: sizes and values drawn"; each threshold's source is there) -----
#: long: page sizes of serving stacks (vLLM/FlashInfer 16, OpenVINO CPU 32, TPU 64/128) and 48, which is
#: no power of two; head dims of real models (64 .. 256; 80, 96, 192 pad to the next power of two)
LONG_PAGE_SIZES = (16, 64, 128, 32, 48)
LONG_HEAD_DIMS = (80, 128, 256, 64, 96, 192)
#: partial rotary (head dim, rotary dim): Phi-2 32 of 80, ChatGLM 64 of 128, GPT-J 64 of 256, GPT-NeoX 24 of 96
LONG_PARTIAL = ((80, 32), (128, 64), (256, 64), (96, 24))
LONG_KV_HEADS = (8, 2, 1)
#: listed pages: a power-of-two bucket's padding (5 -> 8, 33 -> 64) and tens of pages
LONG_BLOCKS = (5, 33, 9)
#: LUT rows (rotate_keys): a block behind hundreds of evicted blocks
LONG_LUT_ROWS = (300, 65, 2)
LONG_ELEMENTS = 1 << 20      # the pool's elements at most: each long call stays well under a second
LONG_BUDGET = 0.05           # share of the profile's examples (ci: 1, thorough: 12)
RANGE_BUDGET = 0.12          # ci: 3, thorough: 30
#: range: exponents of the keys per cache dtype, from well above the smallest normal (no subnormal
#: products in float32 arithmetic) to below max / sqrt(2), so that no rotated value can exceed the
#: dtype's largest finite value (the pair norm is kept, RO-5)
RANGE_EXPONENTS = {"float16": (-10, 14), "bfloat16": (-100, 126), "float32": (-100, 126), "float64": (-300, 300)}
#: theta bases of real models: Llama-3 500000, Qwen2 / Gemma-3 global layers 1e6, Llama-2 10000
RANGE_THETAS = (500000.0, 1000000.0, 10000.0)
#: token shifts around float32's integer limit 2^24 and at int32's extremes (RO-3, RO-10)
RANGE_DELTAS = (2 ** 24 + 1, 2 ** 31 - 1, -(2 ** 31), 2 ** 25 + 3, 2 ** 24 - 1, -(2 ** 24 + 1), 0, 1, -1)
#: cache dtypes of the range column, float64 first: only float64 arithmetic is bound tightly at 2^24+ (NU-RO3)
RANGE_CACHE_DTYPES = ("float64", "bfloat16", "float16", "float32")


@dataclass(frozen=True)
class Variant:
    """One column of the features matrix of this family."""
    name: str
    features: tuple[str, ...]
    clauses: tuple[str, ...]
    per_token: bool = False
    partial: bool = False
    negative: bool = False
    reach: str = ""       # "long" or "range": the reach columns (per-token, partial, negative where claimed)
    regime: str = ""      # a crossed column's: the range column's deltas only on the blocks past the first tile

    def __str__(self) -> str:
        return self.name


ROTATE_VARIANTS = (
    Variant("per_block", ("per_block_deltas",), ("RO-7",)),
    Variant("per_token", ("per_token_deltas",), ("RO-7",), per_token=True),
    Variant("partial_rotary", ("per_block_deltas", "partial_rotary"), ("RO-1", "RO-2"), partial=True),
)
LONG = Variant("long", ("per_block_deltas",), ("RO-1", "RO-2", "RO-7"), reach="long")
RANGE = Variant("range", ("per_block_deltas",), ("RO-3", "RO-5"), reach="range")
SHIFT_VARIANTS = ROTATE_VARIANTS + (
    Variant("negative_deltas", ("per_token_deltas", "negative_deltas"), ("RO-10",), per_token=True,
            negative=True),
)
ROTATE_VARIANTS += (LONG, RANGE)
SHIFT_VARIANTS += (LONG, RANGE)
BUDGETS = {"long": LONG_BUDGET, "range": RANGE_BUDGET}
#: the generated reach columns (strategies/dimension_reach.py): `reach_<dimension>`, one dimension of the
#: registry at its tail size past every tile, the others small (per-token deltas, negative shifts and
#: partial rotary where claimed, at random after the first example); ids reach INT32_MAX in `range`
DIM_REACH = "dim:"
for _op, _variants in (("rotate_keys", "ROTATE_VARIANTS"), ("shift_keys", "SHIFT_VARIANTS")):
    _generated = tuple(Variant(f"reach_{d}", ("per_block_deltas",), ("RO-1", "RO-7", "RO-8", "NU-15"),
                               reach=DIM_REACH + d) for d in dr.columns(_op, ids=False)) \
        + tuple(Variant(f"reach_{d}{dr.CROSSED}{r}", ("per_block_deltas",), ("RO-3", "RO-10", "NU-15"),
                        reach=DIM_REACH + d, regime=r)   # crossed (NU-15): shift_keys' range deltas
                for d, r in dr.crossed_columns(_op, ("deltas",) if _op == "shift_keys" else ()))
    globals()[_variants] += _generated
    BUDGETS.update({v.reach: LONG_BUDGET for v in _generated})
del _op, _variants, _generated


def _shape(draw, claims: OpClaims, variant: Variant, max_pages: int) -> dict:
    """page_size, head_dim, rotary_dim (None: the default D), hkv, n listed pages, num_pages."""
    if variant.reach == "long":
        return draw(_long_shape(claims))
    if variant.reach.startswith(DIM_REACH):
        return dim_shape(draw, claims, variant.reach[len(DIM_REACH):], crossed=bool(variant.regime))
    page_size = pick(draw, constraints.allowed(claims, "page_size", claims.page_sizes or DEFAULT_PAGE_SIZES),
                     "page size")
    head_dims = constraints.allowed(claims, "head_dim", claims.head_dims or DEFAULT_HEAD_DIMS)
    if variant.partial:
        head_dims = tuple(d for d in head_dims if d >= 4)
        if not head_dims:
            pytest.skip("unsupported: partial rotary needs a claimed head dim >= 4")
    head_dim = pick(draw, head_dims, "head dim")
    if variant.partial:
        rotary_dim = 2 * draw(st.integers(1, head_dim // 2 - 1))
    else:
        rotary_dim = draw(sampled_from((None, head_dim)))   # RO-2: the default is D
    hkv = pick(draw, constraints.allowed(claims, "num_kv_heads", (1, 2), "KV head count"), "Hkv")
    max_pages = constraints.upper(claims, "max_pages", max_pages)
    if variant.reach:                          # the range column is about values: always rotate something
        n = draw(st.integers(1, max(1, max_pages - 1)))
    else:
        n = draw(st.integers(1, max(1, max_pages - 1))) if draw(st.integers(0, 9)) else 0   # n = 0 allowed (RO-8)
    num_pages = max(min(n + draw(st.integers(0, 2)), max_pages), n, 1)
    return dict(page_size=page_size, head_dim=head_dim, rotary_dim=rotary_dim, hkv=hkv, n=n, num_pages=num_pages)


@st.composite
def _long_shape(draw, claims: OpClaims) -> dict:
    """The long column's shape: claimed page sizes and head dims when the backend names them (a claim
    widens the draw to its own sizes, e.g. page size 544), else LONG_PAGE_SIZES / LONG_HEAD_DIMS; partial
    rotary dims of real models where `partial_rotary` is claimed; tens of listed pages, capped so that the
    pool holds at most LONG_ELEMENTS elements."""
    page_size = pick(draw, constraints.allowed(claims, "page_size", claims.page_sizes or LONG_PAGE_SIZES),
                     "page size")
    head_dims = constraints.allowed(claims, "head_dim", claims.head_dims or LONG_HEAD_DIMS)
    partial = tuple((d, r) for d, r in LONG_PARTIAL if d in head_dims) \
        if "partial_rotary" in claims.features else ()
    head_dim, rotary_dim = pick(draw, tuple((d, None) for d in head_dims) + partial, "(head dim, rotary dim)")
    hkv = pick(draw, constraints.allowed(claims, "num_kv_heads", LONG_KV_HEADS, "KV head count"), "Hkv")
    per_page = page_size * hkv * head_dim
    cap = constraints.upper(claims, "max_pages", max(2, LONG_ELEMENTS // per_page))
    n = min(pick(draw, LONG_BLOCKS, "listed pages"), max(1, cap - 1))
    num_pages = min(n + draw(st.integers(0, 2)), cap)
    return dict(page_size=page_size, head_dim=head_dim, rotary_dim=rotary_dim, hkv=hkv, n=n,
                num_pages=max(num_pages, n))


def dim_shape(draw, claims: OpClaims, dim: str, *, crossed: bool = False) -> dict:
    """The shape of a generated reach column: `dim` at a size of dimension_reach.sizes (even head dims: the
    pairs), everything else small; a pool at real scale lists 4 of its pages, shuffled (past 2^16). A
    crossed column (NU-15) draws only sizes that pass a tile: its extremes lie past the first one."""
    ok = lambda key: (lambda n: constraints.admits(claims.limits.get(key), n))   # noqa: E731
    page_size = min(constraints.allowed(claims, "page_size", claims.page_sizes or DEFAULT_PAGE_SIZES))
    head_dim = min(d for d in constraints.allowed(claims, "head_dim", claims.head_dims or DEFAULT_HEAD_DIMS)
                   if d % 2 == 0)
    # LUT rows >= 2 and deltas >= 1 (rotate_keys_cases, shift_keys_cases): row 0 is the identity, and a
    # column whose every key stays put would show no bug past any tile
    shape = dict(page_size=page_size, head_dim=head_dim, rotary_dim=None, hkv=1, n=2, num_pages=3, lut_rows=8)
    op = "rotate_keys"
    if dim == "pool_pages":
        shape.update(n=4, num_pages=dr.pick_size(draw, op, dim, ok("max_pages")))
    elif dim == "page_size":
        claimed = claims.page_sizes
        shape.update(page_size=dr.pick_size(draw, op, dim, lambda n: (claimed is None or n in claimed)
                                            and ok("page_size")(n)))
    elif dim == "kv_heads":
        shape.update(hkv=dr.pick_size(draw, op, dim, ok("num_kv_heads")))
    elif dim == "head_dim":
        claimed = claims.head_dims
        shape.update(head_dim=dr.pick_size(draw, op, dim, lambda n: n % 2 == 0 and (claimed is None or n in claimed)
                                           and ok("head_dim")(n)))
    elif dim == "rotated_blocks":
        n = dr.pick_size(draw, op, dim, lambda n: ok("max_pages")(n + 2) and (not crossed or dr.past_first_tiles(n) > 0))
        shape.update(n=n, num_pages=n + 2)
    elif dim == "lut_rows":
        shape.update(lut_rows=dr.pick_size(draw, op, dim))
    else:
        raise ValueError(f"no rotation shape for dimension {dim!r}")
    return shape


def _keys(rng, shape, kv_dtype: str, variant: Variant) -> np.ndarray:
    """Clean keys: the usual bounded exponents, or (range) the dtype's whole exponent range (RANGE_EXPONENTS)."""
    if variant.reach != "range":
        return floats(rng, shape, kv_dtype)
    lo, hi = RANGE_EXPONENTS[kv_dtype]
    return floats(rng, shape, kv_dtype, min_exp=lo, max_exp=hi)


@st.composite
def _layout_and_pool(draw, claims: OpClaims, variant: Variant, max_pages: int = 4):
    """Shared part of both ops: pool shape, dims, listed pages (shuffled), the pool with poison."""
    options = RANGE_CACHE_DTYPES if variant.reach == "range" else CACHE_DTYPES
    kv_dtype = pick(draw, _claimed(options, claims.kv_dtypes, "cache dtype", variant), "cache dtype")
    layout = pick(draw, _claimed(LAYOUTS, claims.layouts, "pair layout", variant), "layout")
    shape = _shape(draw, claims, variant, max_pages)
    page_size, head_dim, rotary_dim, hkv, n, num_pages = (shape[k] for k in (
        "page_size", "head_dim", "rotary_dim", "hkv", "n", "num_pages"))
    order = shuffled(draw, num_pages)
    idx = np.asarray(order[:n], dtype=np.int32)
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    k_pages = _keys(rng, (num_pages, page_size, hkv, head_dim), kv_dtype, variant)
    listed = np.zeros(num_pages, dtype=bool)
    listed[idx] = True
    # Copied elements keep poison bit for bit (RO-1): unlisted pages and dims >= rotary_dim.
    junk = rng.random(k_pages.shape) < 0.3
    rd = head_dim if rotary_dim is None else rotary_dim
    junk[listed, :, :, :rd] = False
    unlisted = junk & ~listed[:, None, None, None]
    poison = [PoisonRegion("unlisted_pages", "k_pages", unlisted, "RO-1", "elements of pages not listed"),
              PoisonRegion("unrotated_dims", "k_pages", junk & ~unlisted, "RO-1",
                           "dims >= rotary_dim of listed pages")]
    if n and draw(st.booleans()):
        # An unfilled slot of a listed page is still rotated (RO-1); its pairs are not compared (NU-RO5).
        poison.append(PoisonRegion("unfilled_slot", "k_pages",
                                   (int(idx[rng.integers(0, n)]), int(rng.integers(0, page_size)), slice(None),
                                    slice(0, rd)), "RO-1", "an unfilled token slot of a listed page"))
    per_token = variant.per_token or (variant.reach and "per_token_deltas" in claims.features
                                      and draw(st.booleans()))
    width = page_size if per_token else 1
    return dict(kv_dtype=kv_dtype, layout=layout, page_size=page_size, head_dim=head_dim,
                rotary_dim=rotary_dim, hkv=hkv, n=n, idx=idx, k_pages=k_pages, rng=rng, seed=seed,
                width=width, poison=tuple(poison), lut_rows=shape.get("lut_rows"))


def _options(p: dict) -> dict:
    out = {"layout": p["layout"]}
    if p["rotary_dim"] is not None:
        out["rotary_dim"] = p["rotary_dim"]
    return out


def _params(p: dict, variant: Variant, **extra) -> dict:
    return dict(kv_dtype=p["kv_dtype"], page_size=p["page_size"], head_dim=p["head_dim"], hkv=p["hkv"],
                layout=p["layout"], rotary_dim=p["rotary_dim"] or p["head_dim"], blocks=p["n"],
                tokens=p["n"] * p["page_size"], variant=variant.name,
                **({"reach": variant.reach} if variant.reach else {}), **extra)


def llama3_lut(num_rows: int, rotary_dim: int, *, theta: float, block_size: int, factor: float = 8.0,
               low_freq_factor: float = 1.0, high_freq_factor: float = 4.0, original_max_position: int = 8192):
    """float64[num_rows, rotary_dim]: `reference.rerotation_lut` (RO-6) over Llama-3.1's scaled frequencies
    (rope_type "llama3": frequencies whose wavelength exceeds original_max_position / low_freq_factor are
    divided by `factor`, those below original_max_position / high_freq_factor kept, the ones between
    interpolated; huggingface/transformers src/transformers/modeling_rope_utils.py
    `_compute_llama3_parameters`, commit 0044e3b). Row r re-rotates by r * block_size positions; a LUT
    like any other for `rotate_keys` (RO-9)."""
    w = inverse_frequencies(rotary_dim, theta=theta)
    wavelength = 2 * np.pi / w
    smooth = (original_max_position / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    scaled = np.where(wavelength > original_max_position / low_freq_factor, w / factor, w)
    middle = (wavelength >= original_max_position / high_freq_factor) & \
        (wavelength <= original_max_position / low_freq_factor)
    scaled = np.where(middle, (1 - smooth) * w / factor + smooth * w, scaled)
    angle = (np.arange(num_rows, dtype=np.float64) * block_size)[:, None] * scaled[None, :]
    return np.concatenate([np.cos(angle), -np.sin(angle)], axis=1)


@st.composite
def _lut(draw, p: dict, variant: Variant, max_rows: int):
    """(rows, theta, scaling, float64 LUT) of a rotate_keys case."""
    rd = p["rotary_dim"] or p["head_dim"]
    if variant.reach == "range":
        rows = draw(st.integers(1, 1025))
        theta = draw(sampled_from(RANGE_THETAS))
        scaling = draw(sampled_from((None, "llama3")))
        if scaling:
            return rows, theta, scaling, llama3_lut(rows, rd, theta=theta, block_size=p["page_size"])
    else:
        rows = pick(draw, LONG_LUT_ROWS, "LUT rows") if variant.reach == "long" else \
            p["lut_rows"] or draw(st.integers(1, max_rows))
        theta, scaling = draw(sampled_from(THETAS)), None
    return rows, theta, scaling, reference.rerotation_lut(rows, rd, theta=theta, block_size=p["page_size"])


@st.composite
def rotate_keys_cases(draw, claims: OpClaims, variant: Variant, *, max_rows: int = 4):
    """A valid `rotate_keys` call: LUT rows of `reference.rerotation_lut` (RO-6; Llama-3 scaled in the
    range column) stored in a claimed dtype (used as given, RO-9), per-block or per-token rows (RO-7) in
    [0, rows)."""
    p = draw(_layout_and_pool(claims, variant))
    lut_dtype = pick(draw, _claimed(LUT_DTYPES, claims.dtypes, "LUT dtype", variant), "LUT dtype")
    rows, theta, scaling, lut = draw(_lut(p, variant, max_rows))
    lut = lut.astype(dtypes.resolve_dtype(lut_dtype))
    low = 1 if variant.reach.startswith(DIM_REACH) and rows > 1 else 0     # generated columns: no identity row
    deltas = p["rng"].integers(low, rows, size=(p["n"], p["width"])).astype(np.int32)
    if low and deltas.size:
        deltas.flat[0] = rows - 1          # the last LUT row is read (past every tile of the rows)
    inputs = dict(k_pages=p["k_pages"], rotated_block_indices=p["idx"], rotation_deltas=deltas,
                  trig_lut=lut, **_options(p))
    extra = dict(scaling=scaling) if scaling else {}
    return Case("rotate_keys", inputs, _params(p, variant, dtype=lut_dtype, lut_rows=rows, theta=theta, **extra),
                p["seed"], poison=p["poison"])


def _range_deltas(rng, shape, negative: bool) -> np.ndarray:
    """Range-column shifts: half RANGE_DELTAS (2^24 +- 1, int32's extremes), half uniform in int32 (or >= 0)."""
    edges = np.array(RANGE_DELTAS, np.int64)
    uniform = rng.integers(-2 ** 31 if negative else 0, 2 ** 31, size=shape)
    chosen = np.where(rng.random(shape) < 0.5, edges[rng.integers(0, edges.size, size=shape)], uniform)
    if not negative:
        chosen = np.minimum(np.abs(chosen), 2 ** 31 - 1)
    return chosen.astype(np.int32)


@st.composite
def shift_keys_cases(draw, claims: OpClaims, variant: Variant):
    """A valid `shift_keys` call: deltas in tokens, non-negative unless the variant is negative_deltas
    (RO-10; the reach columns: where claimed), mostly small with a few large shifts (the float32 angle error
    grows with |delta|, NU-RO3); the range column's shifts cross 2^24 and reach int32's extremes."""
    p = draw(_layout_and_pool(claims, variant))
    negative = variant.negative or (bool(variant.reach) and "negative_deltas" in claims.features
                                    and draw(st.booleans()))
    if variant.reach == "range":
        theta = draw(sampled_from(RANGE_THETAS))
        deltas = _range_deltas(p["rng"], (p["n"], p["width"]), negative)
    else:
        theta = draw(sampled_from(THETAS))
        big = draw(sampled_from((8, 64, 5000)))
        lo = -big if negative else 1 if variant.reach.startswith(DIM_REACH) else 0   # generated: every key moves
        deltas = p["rng"].integers(lo, big + 1, size=(p["n"], p["width"])).astype(np.int32)
        late = dr.past_first_tiles(p["n"]) if variant.regime else p["n"]     # crossed: the range deltas past it
        deltas[late:] = _range_deltas(p["rng"], deltas[late:].shape, negative)
    inputs = dict(k_pages=p["k_pages"], rotated_block_indices=p["idx"], position_deltas=deltas,
                  theta=theta, **_options(p))
    dtype = p["kv_dtype"]
    return Case("shift_keys", inputs, _params(p, variant, dtype=dtype, theta=theta), p["seed"],
                poison=p["poison"])


def uses(case: Case) -> tuple[set, dict]:
    """What a rotation case's inputs use (conformance/goldens.py): the features (deltas [n, 1] or
    [n, page_size], rotary_dim < D, a negative shift) and the space: the LUT dtype (`dtype`, rotate_keys
    only: shift_keys has no LUT), the cache dtype, page size, head dim and layout."""
    x = case.inputs
    k = np.asarray(x["k_pages"])
    deltas = np.asarray(x["rotation_deltas" if case.op == "rotate_keys" else "position_deltas"])
    features = {"per_token_deltas" if deltas.shape[1] > 1 else "per_block_deltas"}
    if (x.get("rotary_dim") or k.shape[-1]) < k.shape[-1]:
        features.add("partial_rotary")
    if case.op == "shift_keys" and (deltas < 0).any():
        features.add("negative_deltas")
    space = dict(kv_dtype=dtypes.dtype_name(k.dtype), page_size=int(k.shape[1]), head_dim=int(k.shape[-1]),
                 layout=x.get("layout", "half"))
    if case.op == "rotate_keys":
        space["dtype"] = dtypes.dtype_name(np.asarray(x["trig_lut"]).dtype)
    return features, space


#: what a case uses, per op (conformance/goldens.py)
USES = {"rotate_keys": uses, "shift_keys": uses}


CHECKS = {"rotate_keys": rotate_checks, "shift_keys": shift_checks}


# --- diagnosis variations (conformance/diagnosis.py) ----------------------------------------------

def _rotation_diagnosis(case: Case) -> list:
    found = [widened(case, ("trig_lut",), "LUT widened to float32"),
             widened(case, ("k_pages",), "cache widened to float32")]
    return [v for v in found if v is not None]


DIAGNOSIS = {"rotate_keys": _rotation_diagnosis, "shift_keys": _rotation_diagnosis}


# --- the strided column (suite/test_strided.py, spec/numerics.md NU-14) -----------------------------
#: per op, the columns its strided cases are drawn from, the first one claimed (per-token deltas: a
#: [blocks, page_size] table)
STRIDED = {"rotate_keys": strided.columns(rotate_keys_cases, *strided.named(ROTATE_VARIANTS, "per_token", "per_block")),
           "shift_keys": strided.columns(shift_keys_cases, *strided.named(SHIFT_VARIANTS, "per_token", "per_block"))}
