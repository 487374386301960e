"""The NumPy oracle: an executable form of spec/ (float64 inside, NumPy + ml_dtypes only; where the
optional threadpoolctl is installed, large attention, SSD-scan and RWKV6 calls spread their heads over the CPUs,
head_workers.py).

    from kvconform import reference
    out = reference.ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs)

Each family module cites the spec clauses it implements. This package never imports torch, jax or
triton.
"""
from importlib import import_module
from importlib.util import find_spec

from . import dtypes, validation  # noqa: F401

# One module per family; each declares its public names in `__all__`.
_FAMILY_MODULES = (
    "paged_attention",   # spec/paged_attention.md  PA-*
    "kv_write",          # spec/paged_attention.md  PA-* (KV writes)
    "kv_layouts",        # spec/paged_attention.md  PA-* (layouts)
    "rotation",          # spec/rotation.md         RO-*
    "eviction",          # spec/eviction.md         EV-*
    "recurrent",         # spec/recurrent.md        RS-*
    "metadata",          # spec/metadata.md         MD-*
    "mla",               # spec/mla.md              ML-*
)

__all__ = ["dtypes", "validation"]
for _name in _FAMILY_MODULES:
    if find_spec(f"{__name__}.{_name}") is None:  # families land one issue at a time
        continue
    _module = import_module(f"{__name__}.{_name}")
    globals()[_name] = _module
    for _public in getattr(_module, "__all__", ()):
        globals()[_public] = getattr(_module, _public)
        __all__.append(_public)
del _name
