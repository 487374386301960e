"""A backend for the protocol-output meta-tests (conformance/protocol.py; not part of the package). Each op
returns its reference result in another form: the allowed forms must pass, the others fail in words. One
backend, so that one worker imports torch and jax once."""
from typing import NamedTuple

import numpy as np

from kvconform import reference
from kvconform.adapters import to_torch
from kvconform.backends.numpy import NumpyBackend

#: op -> form returned; the first four are allowed by the protocol, the last three are not
FORMS = {
    "block_table_to_csr": "plain tuple",
    "write_kv": "own NamedTuple of torch tensors",
    "append_slot_mapping": "jax array (a torch tensor without jax)",
    "slot_mapping_from_arena": "an object exporting only __array_interface__",
    "csr_to_block_table": "three fields where the reference returns two",
    "arena_layout": "torch tensors on the meta device (nothing can read them)",
    "page_table_step": "fields the step leaves unchanged returned as torch.from_numpy(input)",
}


class OwnPools(NamedTuple):
    """The backend's own result type: other field names than the reference's KVPages (matched by position)."""
    keys: object
    values: object


class ArrayInterface:
    """An array exported only through `__array_interface__` (as some C extensions do)."""

    def __init__(self, arr: np.ndarray):
        self._arr = arr
        self.__array_interface__ = arr.__array_interface__


class ProtocolForms(NumpyBackend):
    name = "protocol-forms"

    def capabilities(self):
        every = super().capabilities()
        return {op: every[op] for op in FORMS}

    def block_table_to_csr(self, *args, **kw):
        return tuple(reference.block_table_to_csr(*args, **kw))

    def write_kv(self, *args, **kw):
        return OwnPools(*(to_torch(pool) for pool in reference.write_kv(*args, **kw)))

    def append_slot_mapping(self, *args, **kw):
        slots = reference.append_slot_mapping(*args, **kw)
        try:
            import jax.numpy as jnp
        except ImportError:
            return to_torch(slots)
        return jnp.asarray(slots)

    def slot_mapping_from_arena(self, *args, **kw):
        return ArrayInterface(reference.slot_mapping_from_arena(*args, **kw))

    def csr_to_block_table(self, *args, **kw):
        table = reference.csr_to_block_table(*args, **kw)
        return table.page_indices, table.kv_lens, table.kv_lens.copy()

    def arena_layout(self, *args, **kw):
        import torch
        layout = reference.arena_layout(*args, **kw)
        return type(layout)(*(torch.empty(a.shape, dtype=torch.int64, device="meta") for a in layout))

    def page_table_step(self, **kw):
        import torch
        state = reference.page_table_step(**kw)
        return type(state)(*(torch.from_numpy(kw[name]) if name in kw and _same(kw[name], value) else value
                             for name, value in state._asdict().items()))


def _same(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.size > 0 and a.tobytes() == b.tobytes()


def make_backend():
    return ProtocolForms()
