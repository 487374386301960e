"""Permissions to write anything where the spec leaves a result unspecified (never compared).

Each backend here returns the reference's result with every unspecified location overwritten by the value
most likely to expose a comparison that reads it: an invalid page id, NaN, the dtype's largest finite value,
or the other sign of zero. A suite that compares such a location fails them (a false alarm).

- `block_table_padding_unspecified` (MD-6): `csr_to_block_table`'s `page_indices[i, j]` for `j >= n_i`.
- `free_rows_unspecified` (spec/recurrent.md section 4, RS-24): `recurrent_store_step`'s pool rows of
  slots no sequence refers to after the step.
- `snapshots_past_length_unspecified` (RS-19): `ssd_chunked_scan`'s snapshots `r > L_s` of live sequences.
- `zero_sign_unspecified` (spec/rotation.md "Unspecified"): the sign of a rotated element that is zero.
"""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.reference.rotation import _pair_dims

from . import Permission, permission


def _garbage(dtype) -> np.ndarray:
    """The most conspicuous value of `dtype`: NaN for a float, its smallest value for an integer."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype.kind == "V" or "float" in dtype.name:
        return np.array(np.nan).astype(dtype)
    return np.array(np.iinfo(dtype).min, dtype=dtype)


@permission(id="block_table_padding_unspecified", ops="csr_to_block_table", clause="MD-6",
            description="writes -1 (an invalid page id) in every block-table entry past a sequence's pages")
class BlockTablePaddingGarbage(Permission):
    def csr_to_block_table(self, kv_indptr, kv_indices, kv_last_page_len, page_size, pages_per_seq):
        result = reference.csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, page_size, pages_per_seq)
        table = np.array(result.page_indices, copy=True)
        pages = np.diff(np.asarray(kv_indptr, dtype=np.int64))      # n_i: sequence i's pages (MD-5)
        for i, n in enumerate(pages):
            table[i, n:] = -1
        return result._replace(page_indices=table)


@permission(id="free_rows_unspecified", ops="recurrent_store_step", clause='RS-24, recurrent.md "4. Unspecified (never compared)"',
            description="fills the pool rows of every slot no sequence refers to after the step with NaN "
                        "(integer pools: their smallest value)")
class FreeRowsGarbage(Permission):
    def recurrent_store_step(self, *args, **kw):
        result = reference.recurrent_store_step(*args, **kw)
        slots = np.asarray(result.seq_slot)
        fields = {}
        for name in ("conv_pool", "ssm_pool"):
            pool = np.array(getattr(result, name), copy=True)
            free = np.ones(pool.shape[0], dtype=bool)
            free[slots[(slots >= 0) & (slots < pool.shape[0])]] = False
            pool[free] = _garbage(pool.dtype)
            fields[name] = pool
        return result._replace(**fields)


@permission(id="snapshots_past_length_unspecified", ops="ssd_chunked_scan", clause="RS-19, NU-R4",
            description="writes the pool dtype's largest finite value in every snapshot r > L_s of a live "
                        "sequence (the reference writes NaN there: a finite value shows a comparison of them)")
class SnapshotsPastLengthGarbage(Permission):
    def ssd_chunked_scan(self, *args, **kw):
        result = reference.ssd_chunked_scan(*args, **kw)
        snaps = np.array(result.snapshots, copy=True)
        if not snaps.size:
            return result
        cu = np.asarray(kw["cu_seqlens"] if "cu_seqlens" in kw else args[6], dtype=np.int64)
        idx = kw.get("state_indices")
        live = np.ones(len(cu) - 1, dtype=bool) if idx is None else np.asarray(idx) >= 0
        big = np.finfo(snaps.dtype).max
        for s in np.flatnonzero(live):
            L = int(cu[s + 1] - cu[s])
            snaps[s, L + 1:] = big                  # snapshot r is index r; r > L_s is unspecified (RS-19)
        return result._replace(snapshots=snaps)


def _flip_zero_signs(out, rotated, layout: str, rotary_dim):
    """`out` with every zero of a rotated pair's elements (pages `rotated`) given the other sign of zero."""
    out = np.array(out, copy=True)
    if np.dtype(out.dtype).kind in "iu":
        return out                                  # integers have one zero
    D = out.shape[-1]
    first, second = _pair_dims(layout, rotary_dim or D)
    dims = np.concatenate([first, second])
    pages = np.unique(np.asarray(rotated, dtype=np.int64))
    block = out[pages][..., dims]
    zero = block.astype(np.float64) == 0
    block[zero] = (-block[zero].astype(np.float64)).astype(out.dtype)
    sub = out[pages]
    sub[..., dims] = block
    out[pages] = sub
    return out


@permission(id="zero_sign_unspecified", ops=("rotate_keys", "shift_keys"), clause='rotation.md "Unspecified", NU-RO5',
            description="returns -0 for every rotated element whose value is +0 and +0 for every -0")
class ZeroSignFlipped(Permission):
    def rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, *, layout="half",
                    rotary_dim=None):
        out = reference.rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut, layout=layout,
                                    rotary_dim=rotary_dim)
        return _flip_zero_signs(out, rotated_block_indices, layout, rotary_dim)

    def shift_keys(self, k_pages, rotated_block_indices, position_deltas, *, theta, layout="half",
                   rotary_dim=None):
        out = reference.shift_keys(k_pages, rotated_block_indices, position_deltas, theta=theta, layout=layout,
                                   rotary_dim=rotary_dim)
        return _flip_zero_signs(out, rotated_block_indices, layout, rotary_dim)
