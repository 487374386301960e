"""`kvconform claims OP`: the claim vocabulary of one op in words, from the registries of backends/base.py
(CLAIM_FIELDS, FEATURES, LAYOUTS, LIMITS, LIMIT_KINDS, CONVENTIONS): what a backend may write in its
`OpClaims` for the op, and nothing it may not (an unknown name there is a claims error).
"""
from __future__ import annotations

from kvconform.backends import base

_FIELDS = {
    "dtypes": "dtypes of the floating activations (q, k, x, ...)",
    "kv_dtypes": "storage dtypes of caches / state pools",
    "page_sizes": "page (block) sizes taken; None = any",
    "head_dims": "head dims taken; None = any",
}
_FIELD_NOTES = {
    ("rotate_keys", "dtypes"): "its rotation LUT's dtype",
    ("accumulate_scores", "dtypes"): "its score dtype",
    ("mla_paged_attention", "head_dims"): "the latent dims d_c (spec/mla.md ML-1)",
}
_KINDS = {
    "count": "an integer >= 1",
    "dtype_pairs": "a list of [activation dtype, KV dtype] pairs, in that order: [[\"bfloat16\", \"float8_e4m3fn\"]]",
    "size": "a size constraint: N (upper bound), {\"values\": [...]}, {\"multiple_of\": N}, {\"min\": N, \"max\": M}",
}


def lines(op: str) -> list[str]:
    """The vocabulary of `op`, one item a line. ValueError, naming the closest op, for an unknown one."""
    if op not in base.OPS:
        raise ValueError(f"unknown op {op!r}{base.did_you_mean(op, base.OPS)}")
    family = base.OPS[op]
    out = [f"{op} (spec/{family}.md): OpClaims fields it reads"]
    for name in base.CLAIM_FIELDS.get(op, ()):
        note = _FIELD_NOTES.get((op, name))
        out.append(f"  {name:<11} {_FIELDS[name]}" + (f" ({note})" if note else ""))
    if any(f in base.CLAIM_FIELDS.get(op, ()) for f in ("dtypes", "kv_dtypes")):
        out.append(f"  dtype names: {', '.join(base.dtype_names())}")
    features = base.FEATURES.get(op, ())
    out.append("features: " + (", ".join(features) if features else "(none: every case is drawn)"))
    layouts = base.LAYOUTS.get(op, ())
    if layouts:
        out.append("layouts: " + ", ".join(layouts))
    limits = base.LIMITS.get(op, ())
    if limits:
        out.append("limits (OpClaims.limits):")
        for name in limits:
            if name in base.CONVENTIONS:
                allowed = base.CONVENTIONS[name]
                what = ("a list of " if name == "required_inputs" else "one of ") + ", ".join(map(repr, allowed))
                out.append(f"  {name:<22} convention: {what}")
            else:
                out.append(f"  {name:<22} {_KINDS[base.LIMIT_KINDS.get(name, 'size')]}")
    out.append("A case outside the claims is `unsupported`, never a failure; a name not listed here is a claims "
               "error (kvconform check-backend).")
    return out


def cmd_claims(args) -> int:
    from .arguments import UsageError
    if args.op is None:
        print("ops (kvconform claims OP for one's vocabulary): " + ", ".join(base.OPS))
        return 0
    try:
        print("\n".join(lines(args.op)))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return 0
