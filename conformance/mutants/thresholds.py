"""Threshold mutants generated from the dimension registry (spec/numerics.md "Reach by dimension").

For every op of conformance/dimensions REGISTRY, every dimension and every tile T of model.TILES that the
dimension's real range passes, one mutant: the numpy backend with that op wrong past T along that
dimension, in the dimension's `kind` (left unwritten, read from the first tile, dropped); and, for a
dimension whose `ids` are ids or offsets reaching 2^16, one mutant with them narrowed to 16 bits. Each is
a `Mutant` subclass named like `RaggedPagedAttention_PagesPerSeq_FirstTile_64`, loadable as
`kvconform.conformance.mutants.thresholds:<Name>`, registered with `generated="thresholds"` so the
hand-written mutants' meta-test (tests/engine/test_mutants.py) leaves them to their own
(tests/engine/test_threshold_mutants.py: one run per op with all of its generated mutants).

A mutant below the dimension's `small_max` is caught by ordinary columns too: it carries no
`only_caught_by`. From `small_max` on, only the reach tests (REACH_TESTS) may fail it.
"""
from __future__ import annotations

import inspect
import re

import numpy as np

from kvconform import reference
from kvconform.reference import dtypes
from kvconform.reference.kv_layouts import canonical_kv

from kvconform.conformance.dimensions import REGISTRY, Dimension
from kvconform.conformance.dimensions.model import NARROW_BITS, array_axis
from . import Mutant, mutant

#: the id parts of the reach tests (test ids containing one of them): the long/long_* and range columns of
#: every family, the generated reach_<dimension> columns, the metadata and eviction `test_<op>_reach` tests,
#: and the real-size goldens of the attention family (no bare "reach": pytest's -k matches it in a
#: checkout's folder name)
REACH_TESTS = "long|range|_reach|reach_|real"
#: the clause a generated mutant breaks: the op family's reach section
CLAUSES = {"ragged_paged_attention": "PA-51", "write_kv": "PA-51", "mla_paged_attention": "ML-11",
           "ragged_paged_attention_csr": "MD-23",
           **{op: "RS-42" for op in ("causal_conv1d_update", "selective_state_update", "ssd_chunked_scan",
                                     "rwkv6_wkv", "gated_delta_rule_update", "gated_delta_rule_chunked",
                                     "recurrent_store_step")}}
#: result fields that are an input cache updated in place (their unwritten part keeps the input)
IN_PLACE = ("k_pages", "v_pages")
_LEN_FLOOR = re.compile(r"^(?P<name>\w+)>=diff\((?P<cu>\w+)\)$")
_ROWS = re.compile(r"^(?P<field>\w+)\[0\]@(?P<cu>\w+)$")


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _canonical(op: str, x: dict) -> dict:
    """The call with its KV cache in the separate layout (PA-39), so axis references mean one thing."""
    layout = x.get("kv_layout", "separate")
    if op != "ragged_paged_attention" or layout == "separate":
        return x
    k, v = canonical_kv(x["k_pages"], x.get("v_pages"), layout, np.asarray(x["q"]).shape[2])
    return dict(x, k_pages=k, v_pages=v, kv_layout="separate")


def _first_tile(x: dict, refs, T: int) -> dict:
    """Entries past T along each referenced input axis read from index i % T."""
    x = dict(x)
    for ref in refs:
        name, axis, _ = array_axis(ref)
        a = x.get(name)
        if a is None or np.ndim(a) <= axis or np.shape(a)[axis] <= T:
            continue
        index = np.arange(np.shape(a)[axis])
        x[name] = np.take(np.asarray(a), index % T, axis=axis)
    return x


def _dropped(x: dict, refs, T: int) -> dict:
    """Length values clipped to T (never below the floor a reference names), axes sliced to T."""
    x = dict(x)
    for ref in refs:
        axis = array_axis(ref)
        floor = _LEN_FLOOR.match(ref)
        if axis:
            name, ax, _ = axis
            if x.get(name) is not None and np.ndim(x[name]) > ax:
                x[name] = np.take(np.asarray(x[name]), np.arange(min(T, np.shape(x[name])[ax])), axis=ax)
        elif floor:
            lens = np.asarray(x[floor["name"]])
            q = np.diff(np.asarray(x[floor["cu"]]).astype(np.int64))[:lens.shape[0]]
            clipped = lens.astype(np.int64).copy()
            clipped[:q.shape[0]] = np.maximum(np.minimum(clipped[:q.shape[0]], T), q)
            x[floor["name"]] = clipped.astype(lens.dtype)
        elif x.get(ref) is not None:
            x[ref] = type(x[ref])(min(int(x[ref]), T)) if np.isscalar(x[ref]) else np.minimum(x[ref], T)
    return x


def _narrowed(x: dict, refs) -> dict:
    """Ids and offsets kept in 16 bits: |v| modulo 2^16, the sign kept (a skip of -1 stays -1)."""
    x = dict(x)
    m = 1 << NARROW_BITS
    for name in refs:
        if x.get(name) is None:
            continue
        a = np.asarray(x[name])
        wide = a.astype(np.int64)
        x[name] = np.where(wide >= 0, wide % m, -((-wide) % m)).astype(a.dtype)
    return x


def _fields(result):
    """{field: array} of a result: a NamedTuple's fields, or `out` for a single array."""
    return result._asdict() if hasattr(result, "_asdict") else {"out": result}


def _rebuild(result, fields: dict):
    return type(result)(**fields) if hasattr(result, "_asdict") else fields["out"]


def _unwritten(result, x: dict, refs, T: int):
    """Output entries past T left unwritten: they keep the input where the op updates a cache in place
    (write_kv's pools, the rotated cache `out` of k_pages), else 0 (a fresh output buffer: the manager's
    state is rebuilt, so keeping its old rows would hide nothing a kernel can get wrong)."""
    fields = dict(_fields(result))
    for ref in refs:
        rows = _ROWS.match(ref)
        field, axis = (rows["field"], 0) if rows else array_axis(ref)[:2]
        out = fields.get(field)
        if out is None or np.ndim(out) <= axis:
            continue
        if rows:   # the rows of the sequences past T
            cu = np.asarray(x[rows["cu"]])
            start = int(cu[T]) if cu.shape[0] > T else np.shape(out)[0]
            past = slice(start, None)
        else:
            past = slice(T, None)
        if (np.shape(out)[axis] if not rows else np.shape(out)[0]) <= (T if not rows else past.start):
            continue
        out = np.array(out, copy=True)
        index = (slice(None),) * axis + (past,)
        source = x.get(field) if field in IN_PLACE else x.get("k_pages") if field == "out" and out.ndim == 4 else None
        if source is not None and np.shape(source) == out.shape:
            kept = np.asarray(source)
            out[index] = (dtypes.upcast(kept) if out.dtype == np.float64 else kept)[index]
        else:
            out[index] = 0
        fields[field] = out
    return _rebuild(result, fields)


def _op_method(op: str, dim: Dimension, kind: str, T: int | None):
    fn = getattr(reference, op)
    signature = inspect.signature(fn)

    def method(self, *args, **kwargs):
        x = _canonical(op, dict(signature.bind(*args, **kwargs).arguments))
        if kind == "narrowed":
            return fn(**_narrowed(x, dim.ids))
        if kind == "first_tile":
            return fn(**_first_tile(x, dim.first_tile, T))
        if kind == "dropped":
            return fn(**_dropped(x, dim.dropped, T))
        return _unwritten(fn(**x), x, dim.unwritten, T)

    method.__name__ = op
    return method


def _describe(op: str, dim: Dimension, kind: str, T: int | None) -> str:
    if kind == "narrowed":
        return f"{op}: {', '.join(dim.ids)} ({dim.name} ids/offsets) narrowed to {NARROW_BITS} bits"
    what = {"unwritten": f"{', '.join(dim.unwritten)} left unwritten",
            "first_tile": f"{', '.join(dim.first_tile)} read from the first tile (index % {T})",
            "dropped": f"{', '.join(dim.dropped)} dropped (clipped to {T})"}[kind]
    return f"{op}: past {T} {dim.name}, {what}"


def _generate() -> dict[str, type]:
    classes: dict[str, type] = {}
    for op, dims in REGISTRY.items():
        for dim in dims:
            plans = [(dim.kind, T) for T in dim.thresholds()]
            if dim.ids and dim.real_max >= 1 << NARROW_BITS:
                plans.append(("narrowed", None))
            for kind, T in plans:
                name = f"{_camel(op)}_{_camel(dim.name)}_{_camel(kind)}" + (f"_{T}" if T else f"{NARROW_BITS}")
                only = REACH_TESTS if kind == "narrowed" or T >= dim.small_max else ""
                cls = type(name, (Mutant,), {op: _op_method(op, dim, kind, T), "__module__": __name__,
                                             "__qualname__": name, "__doc__": _describe(op, dim, kind, T),
                                             "dimension": dim.name, "kind": kind, "tile": T})
                classes[name] = mutant(op=op, clause=CLAUSES.get(op, "reach"), description=_describe(op, dim, kind, T),
                                       only_caught_by=only, max_size=10 ** 9, generated="thresholds")(cls)
    return classes


GENERATED = _generate()
globals().update(GENERATED)


def generated(op: str | None = None) -> list[type]:
    """The generated mutant classes (of one op), in registry order."""
    return [c for c in GENERATED.values() if op is None or c.mutant_info.op == op]


def hardest(op: str) -> list[type]:
    """Per dimension of `op`, its mutant at the largest tile and its narrowing mutant: the ones only a draw
    past every tile (or past 2^16) can catch; a draw that catches them passes every smaller tile too."""
    top: dict[str, type] = {}
    for cls in generated(op):
        key = cls.dimension + ("/narrowed" if cls.kind == "narrowed" else "")
        if key not in top or (cls.tile or 0) > (top[key].tile or 0):
            top[key] = cls
    return list(top.values())
