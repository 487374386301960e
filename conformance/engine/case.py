"""One drawn input of one op, and its reproducer form on disk.

`Case.inputs` are the keyword arguments of the reference function (canonical layout, NumPy arrays or
plain scalars). On disk a case is ``inputs.npz`` (every array stored as raw bits for the dtypes NumPy's
format cannot name: bfloat16 and float8 as uint16/uint8, with the real dtype in case.json) plus
``case.json``; loading uses ``allow_pickle=False``, so reading a reproducer can never execute code, and
`kvconform replay` never imports a backend that case.json names as ``package.module:factory`` unless the
user names it with ``--backend`` (an installed entry-point name is used as recorded).

**Poison regions.** A strategy draws a *clean* case (every input finite) and declares the locations whose
values the spec says must not matter (PA-24, PA-25, RS-3, ...) as `PoisonRegion`s: a name that says
what the location is ("v_tail": V slots past kv_len in the last used page), the input argument and a NumPy
index into it. `case.with_poison()` returns a copy with those locations filled with poison (NaN, or the
region's own value, e.g. -128 for int8 pages or a page id that points at a poisoned page);
`with_poison(["v_tail"])` fills one region alone. Differential tests compare clean cases; a separate
poison property per op compares poisoned ones, and a failure's diagnosis re-runs it with each region
alone, so a NaN leak and a numeric error are two findings that each say where they come from.

``case.json`` records the expected outcome under ``"expected"``: ``{"outcome": "result"}`` (compare with
the reference) or, for a malformed input of the "errors" layer, ``{"outcome": "rejected", "clauses",
"arguments", "rule", "error"}`` (the call must raise; see `rejection.py`). `kvconform replay` checks
whichever is recorded; a case.json without the key (older reproducers) expects a result.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvconform.reference import dtypes

from kvconform.conformance.engine.rejection import Rejection

CASE_SCHEMA = "kvconform.case/1"


class CorruptReproducer(ValueError):
    """A reproducer directory that cannot be read; the message is one line."""


class NoReproducer(CorruptReproducer):
    """No reproducer at the path at all (no such directory, or no case.json in it): a wrong path, which
    `kvconform replay` must not call a corrupted reproducer."""


def poison_value(name: str):
    """NaN in the dtype where it has one; for int8 (no NaN) the most negative value, which a kernel
    that reads it would turn into a visibly wrong result."""
    dt = dtypes.resolve_dtype(name)
    if dt == np.int8:
        return np.int8(-128)
    return np.array(np.nan, dtype=np.float32).astype(dt)


@dataclass(frozen=True)
class PoisonRegion:
    """One don't-care location of a case: `inputs[input][index]` may hold anything (spec clause `clause`).

    name:  what the location is, shared by all the pieces of one kind ("k_tail", "unused_pages", ...)
    index: a NumPy index into the input (tuple of ints/slices/arrays, or a boolean mask of its shape)
    value: what to fill it with; None = `poison_value` of the input's dtype (NaN; -128 for int8)
    """
    name: str
    input: str
    index: Any
    clause: str = ""
    what: str = ""
    value: Any = None


@dataclass
class Case:
    op: str
    inputs: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)   # JSON summary: shapes, dtypes, features
    seed: int | None = None
    rejection: Rejection | None = None   # set for malformed input: the call must raise (errors layer)
    poison: tuple[PoisonRegion, ...] = ()    # don't-care locations, clean (finite) in `inputs`
    poisoned: tuple[str, ...] = ()           # names of the regions `inputs` holds poison in

    def poison_names(self) -> tuple[str, ...]:
        """Region names in declaration order, each once; only regions that cover some element."""
        names: list[str] = []
        for region in self.poison:
            if region.name not in names and np.asarray(self.inputs[region.input])[region.index].size:
                names.append(region.name)
        return tuple(names)

    def with_poison(self, names=None) -> "Case":
        """A copy whose regions `names` (default: all) hold poison; the other inputs are shared."""
        chosen = self.poison_names() if names is None else tuple(names)
        unknown = set(chosen) - {r.name for r in self.poison}
        if unknown:
            raise ValueError(f"[{self.op}] unknown poison region(s) {sorted(unknown)}; "
                             f"declared: {list(self.poison_names())}")
        inputs = dict(self.inputs)
        copied: set[str] = set()
        for region in self.poison:
            if region.name not in chosen:
                continue
            if region.input not in copied:
                inputs[region.input] = np.array(inputs[region.input], copy=True)
                copied.add(region.input)
            arr = inputs[region.input]
            value = region.value if region.value is not None else poison_value(dtypes.dtype_name(arr.dtype))
            arr[region.index] = value
        params = dict(self.params, poison=list(chosen)) if chosen else dict(self.params)
        return dataclasses.replace(self, inputs=inputs, params=params,
                                   poisoned=tuple(dict.fromkeys(self.poisoned + chosen)))

    def without_poison_regions(self) -> "Case":
        """The clean case with no declared regions (what a variation of the diagnosis starts from)."""
        return dataclasses.replace(self, poison=(), poisoned=())

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.inputs.items() if isinstance(v, np.ndarray)}

    def scalars(self) -> dict[str, Any]:
        return {k: _json_scalar(v) for k, v in self.inputs.items() if not isinstance(v, np.ndarray)}

    def shape_summary(self) -> str:
        parts = [f"{k}: {dtypes.dtype_name(v.dtype)}{list(v.shape)}" for k, v in self.arrays().items()]
        parts += [f"{k}={v!r}" for k, v in self.scalars().items() if v is not None]
        return ", ".join(parts)


def _json_scalar(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        v = float(v)
    if isinstance(v, float) and not math.isfinite(v):
        return {"float": repr(v)}
    if isinstance(v, (np.bool_,)):
        return bool(v)
    from kvconform.reference.eviction import EvictionConfig
    if isinstance(v, EvictionConfig):   # plan_eviction's config (EV-1): plain fields, rebuilt on load
        return {"EvictionConfig": dataclasses.asdict(v)}
    return v


def _from_json_scalar(v):
    if isinstance(v, dict) and set(v) == {"float"}:
        return float(v["float"])
    if isinstance(v, dict) and set(v) == {"EvictionConfig"} and isinstance(v["EvictionConfig"], dict):
        from kvconform.reference.eviction import EvictionConfig
        return EvictionConfig(**v["EvictionConfig"])
    return v


def _dtype(name: str) -> np.dtype:
    """A dtype named in case.json: canonical float/int8 names or plain NumPy integer/bool names."""
    if name in dtypes.DTYPES:
        return dtypes.DTYPES[name]
    dt = np.dtype(name)
    if dt.kind not in "iub":
        raise ValueError(f"unsupported dtype {name!r} in case.json")
    return dt


def _bits(arr: np.ndarray) -> np.ndarray:
    name = dtypes.dtype_name(arr.dtype)
    if name in ("bfloat16",):
        return arr.view(np.uint16)
    if name in ("float8_e4m3fn", "float8_e5m2"):
        return arr.view(np.uint8)
    return arr


#: inputs larger than this are not written to a reproducer (a scale case's pools are gigabytes); case.json
#: then says so, with the case's `rebuild` param (how to make the case again) when it has one
MAX_INPUT_BYTES = 256 * 2 ** 20


def save(case: Case, directory: Path, extra: dict | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    arrays = case.arrays()
    size = sum(v.nbytes for v in arrays.values())
    omitted = None
    if size > MAX_INPUT_BYTES:
        omitted = (f"inputs of {size / 2 ** 30:.1f} GiB not stored (limit {MAX_INPUT_BYTES // 2 ** 20} MiB); "
                   f"rebuild: {case.params.get('rebuild') or 'not recorded'}")
    else:
        np.savez(directory / "inputs.npz", **{k: _bits(v) for k, v in arrays.items()})
    meta = {
        "schema": CASE_SCHEMA,
        "op": case.op,
        "seed": case.seed,
        "params": case.params,
        "arrays": {k: {"dtype": dtypes.dtype_name(v.dtype), "shape": list(v.shape)} for k, v in arrays.items()},
        "scalars": case.scalars(),
        "order": list(case.inputs),
        "expected": case.rejection.to_json() if case.rejection is not None else {"outcome": "result"},
    }
    if omitted:
        meta["inputs_omitted"] = omitted
    meta.update(extra or {})
    (directory / "case.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")


def load(directory: Path) -> tuple[Case, dict]:
    """(case, the whole case.json); raises CorruptReproducer with a one-line reason."""
    directory = Path(directory)
    if not directory.is_dir():
        raise NoReproducer(f"no reproducer at {directory}")
    try:
        meta = json.loads((directory / "case.json").read_text())
    except FileNotFoundError:
        raise NoReproducer(f"no reproducer at {directory} (it holds no case.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptReproducer(f"{directory}/case.json is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("schema") != CASE_SCHEMA or "op" not in meta:
        raise CorruptReproducer(f"{directory}/case.json is not a {CASE_SCHEMA} file")
    if meta.get("inputs_omitted"):
        raise CorruptReproducer(f"{directory}: {meta['inputs_omitted']}")
    try:
        with np.load(directory / "inputs.npz", allow_pickle=False) as npz:
            raw = {k: npz[k] for k in npz.files}
    except FileNotFoundError:
        raise CorruptReproducer(f"{directory}: inputs.npz is missing") from None
    except Exception as exc:  # zipfile.BadZipFile, ValueError (pickled object arrays), OSError
        raise CorruptReproducer(f"{directory}/inputs.npz cannot be read ({type(exc).__name__}: {exc})") from None
    inputs: dict[str, Any] = {}
    try:
        for name in meta.get("order", []):
            if name in meta["arrays"]:
                spec = meta["arrays"][name]
                arr = raw[name].view(_dtype(spec["dtype"]))
                if list(arr.shape) != list(spec["shape"]):
                    raise CorruptReproducer(f"{directory}: array {name!r} has shape {list(arr.shape)}, "
                                            f"case.json says {spec['shape']}")
                inputs[name] = arr
            else:
                inputs[name] = _from_json_scalar(meta["scalars"][name])
    except CorruptReproducer:
        raise
    except (KeyError, ValueError, TypeError) as exc:
        raise CorruptReproducer(f"{directory}: inputs.npz does not match case.json ({type(exc).__name__}: {exc})") from None
    expected = meta.get("expected", {"outcome": "result"})
    rejection = None
    if not (isinstance(expected, dict) and expected.get("outcome") == "result"):
        try:
            rejection = Rejection.from_json(expected)
        except ValueError as exc:
            raise CorruptReproducer(f"{directory}/case.json: bad 'expected' entry ({exc})") from None
    return Case(meta["op"], inputs, meta.get("params", {}), meta.get("seed"), rejection), meta
