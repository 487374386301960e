"""`kvconform list`: the backends found, whether each runs here, their claims; a profile's fixed cases."""
from __future__ import annotations

import json

from kvconform.conformance.run.gate import EXIT_NOT_CHECKED, EXIT_OK

from .arguments import UsageError, _named_backends


def cmd_list(args) -> int:
    """Every backend found (or those named with --backend), each loaded in its worker: its line, or the
    one line saying why it cannot be loaded. Exit 3 when a backend named with --backend cannot."""
    from kvconform import backends
    if getattr(args, "dimensions", None) is not None:
        return _list_dimensions(args.dimensions)
    if args.profile is not None:
        return _list_profile(args.profile)
    from kvconform.conformance.engine import loading
    specs = _named_backends(args.backend, "list") if args.backend else list(backends.entry_points())
    loaded = loading.load_all(specs, timeout=args.timeout)
    for spec in specs:
        _print_backend(loaded[spec])
        loaded[spec].stop()
    unusable = [spec for spec in specs if loaded[spec].description.get("load_error")
                or loaded[spec].description.get("claims_error")]
    return EXIT_NOT_CHECKED if args.backend and unusable else EXIT_OK


def _list_profile(name: str) -> int:
    """`list --profile models`: its table of model x op x shape (the other profiles draw their cases)."""
    from kvconform.conformance.harness import profiles
    if name not in profiles.PROFILES:
        raise UsageError(f"unknown profile {name!r}: choose one of {', '.join(profiles.PROFILES)}")
    if name != "models":
        raise UsageError(f"--profile {name}: only the models profile has a table of named cases (profile {name} "
                         f"draws its cases within each backend's claims)")
    from kvconform.conformance.strategies import models
    for line in models.table():
        print(line)
    return EXIT_OK


def _list_dimensions(op: str) -> int:
    """`list --dimensions OP`: one line per dimension of the op (conformance/dimensions): name, the argument
    axes it sizes, its range (ordinary draws up to small_max, real sizes up to real_max), cheap or not,
    crossed with the range regimes or not, the threshold mutants planted along it or why none can be, and the source of its real maximum."""
    from kvconform.backends.base import OPS, did_you_mean
    from kvconform.conformance.dimensions import REGISTRY, NARROW_BITS
    if op not in OPS:
        raise UsageError(f"--dimensions: unknown op {op!r}{did_you_mean(op, OPS)}")
    if op not in REGISTRY:
        raise UsageError(f"--dimensions: no dimensions are declared for {op} yet")
    print(f"{op}: {len(REGISTRY[op])} dimensions (range: ordinary draws .. real maximum; mutants: the bug "
          f"planted past each tile T, spec/numerics.md NU-15)")
    for d in REGISTRY[op]:
        tiles = ",".join(map(str, d.thresholds()))
        mutants = f"{d.kind} past T={tiles}" if tiles else f"none: {d.no_mutant}"
        if d.ids and d.real_max >= 1 << NARROW_BITS:
            mutants += f"; {', '.join(d.ids)} narrowed to {NARROW_BITS} bits"
        print(f"  {d.name:16s} {' '.join(d.axes)}")
        marks = ("  cheap" if d.cheap else "") + ("  crossed with the range regimes" if d.crossed else "")
        print(f"  {'':16s} range {d.small_max}..{d.real_max}{marks}; mutants: {mutants}")
        print(f"  {'':16s} source: {d.source}")
    return EXIT_OK


def _print_backend(loaded) -> None:
    """One backend's line (version, where it runs) and one line per claimed op with the claim fields that
    op reads (backends/base.py CLAIM_FIELDS; features, layouts and limits where the op registers any)."""
    desc = loaded.description
    if desc.get("load_error") or desc.get("claims_error"):
        print(f"{loaded.spec:<10} {loaded.problem}")
        return
    where = desc["device"] if desc["available"] else f"cannot run here: {desc['reason']}"
    print(f"{loaded.spec:<10} {desc['version']:<10} {where}")
    for op, claims in desc["capabilities"].items():
        print(f"    {op:<24} {_claim_text(op, claims) or '(reads no claim fields: every drawn case is claimed)'}")


def _claim_text(op: str, claims: dict) -> str:
    """`dtypes=float32,bfloat16 page_sizes=any ...`: the fields `op` reads; an unknown op shows them all."""
    from kvconform.backends.base import CLAIM_FIELDS, FEATURES, LAYOUTS, OPS
    fields = CLAIM_FIELDS.get(op, ("dtypes", "kv_dtypes", "page_sizes", "head_dims"))
    names = {"dtypes": "dtypes", "kv_dtypes": "kv", "page_sizes": "page_sizes", "head_dims": "head_dims"}
    parts = []
    for name in fields:
        value = claims.get(name)
        if name in ("page_sizes", "head_dims"):
            parts.append(f"{names[name]}={','.join(map(str, value)) if value else 'any'}")
        else:
            parts.append(f"{names[name]}={','.join(value or []) or '-'}")
    if FEATURES.get(op) or op not in OPS or claims.get("features"):
        parts.append(f"features={','.join(claims.get('features') or []) or '-'}")
    if LAYOUTS.get(op) or claims.get("layouts"):
        parts.append(f"layouts={','.join(claims.get('layouts') or []) or '-'}")
    if claims.get("limits"):
        parts.append("limits=" + json.dumps(claims["limits"], separators=(",", ":")))
    return " ".join(parts)
