"""Mutants of the recurrent-state store op `recurrent_store_step` (spec/recurrent.md RS-21 … RS-27):
cache-manager bugs of the kind llama.cpp's recurrent cache shipped (#12799: seq_cp / seq_rm / rollback),
each wrapping the reference so that exactly one rule is broken."""
from __future__ import annotations

import numpy as np

from kvconform import reference

from . import Mutant, mutant


@mutant(op="recurrent_store_step", clause="RS-26",
        description="rollback restores the wrong snapshot: snapshot r-1 instead of r (the newest-first "
                    "snapshot index is off by one), with the right position seq_pos - r")
class RollbackWrongSnapshot(Mutant):
    def recurrent_store_step(self, seq_slot, seq_pos, conv_pool, ssm_pool, command, **kw):
        r = kw.get("num_tokens", 0)
        if command != "rollback" or not isinstance(r, (int, np.integer)) or r < 1:
            return reference.recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, **kw)
        snaps = {}
        for name in ("snapshots_conv", "snapshots_ssm"):
            s = np.array(kw[name], copy=True)
            if s.ndim and s.shape[0] > r:
                s[r] = s[r - 1]
            snaps[name] = s
        return reference.recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, **dict(kw, **snaps))


@mutant(op="recurrent_store_step", clause="RS-23",
        description="copy on write missing: assigning slots to a sequence that shares its slot after a copy "
                    "keeps the shared slot, so advancing it writes the other sequence's state")
class CopyOnWriteMissing(Mutant):
    def recurrent_store_step(self, seq_slot, seq_pos, conv_pool, ssm_pool, command, **kw):
        right = reference.recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, **kw)  # validates
        if command != "assign":
            return right
        slot, ids = np.asarray(seq_slot), np.asarray(kw["seq_ids"])
        counts = np.broadcast_to(kw.get("num_tokens", 0), ids.shape)
        live = slot[slot >= 0]
        shared = np.array([slot[s] >= 0 and (live == slot[s]).sum() > 1 for s in ids], bool)
        if not shared.any():
            return right
        # the shared sequences are treated as owners: they keep their slot; the others are assigned as if
        # those needed no slot
        rest = reference.recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, "assign",
                                              seq_ids=ids[~shared], num_tokens=np.asarray(counts[~shared]))
        new_pos = rest.seq_pos.copy()
        new_pos[ids[shared]] += counts[shared]
        indices = np.where(shared, slot[ids], 0).astype(np.int32)
        indices[~shared] = rest.state_indices
        flags = np.ones(ids.shape, bool)
        flags[~shared] = rest.has_initial_state
        return right._replace(seq_slot=rest.seq_slot, seq_pos=new_pos, conv_pool=rest.conv_pool,
                              ssm_pool=rest.ssm_pool, state_indices=indices, has_initial_state=flags)


@mutant(op="recurrent_store_step", clause="RS-5",
        description="a fresh sequence's reused rows are cleared by multiplying them by zero: NaN left in "
                    "the row survives (and negative values become -0.0)")
class FreshRowTimesZero(Mutant):
    def recurrent_store_step(self, seq_slot, seq_pos, conv_pool, ssm_pool, command, **kw):
        right = reference.recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, **kw)
        if command != "assign":
            return right
        fresh = right.state_indices[~right.has_initial_state]
        conv, ssm = right.conv_pool.copy(), right.ssm_pool.copy()
        with np.errstate(invalid="ignore"):
            conv[fresh] = np.asarray(conv_pool)[fresh] * 0
            ssm[fresh] = np.asarray(ssm_pool)[fresh] * 0
        return right._replace(conv_pool=conv, ssm_pool=ssm)


@mutant(op="recurrent_store_step", clause="RS-22", only_caught_by="range", max_size=20,
        description="rows are moved through arithmetic (x + 0.0 with subnormals flushed to zero, as a kernel "
                    "copying with FTZ math does) instead of as bits: -0.0 becomes +0.0 and subnormals 0")
class StoreRowsThroughArithmetic(Mutant):
    def recurrent_store_step(self, seq_slot, seq_pos, conv_pool, ssm_pool, command, **kwargs):
        out = reference.recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, **kwargs)
        pools = {}
        for name in ("conv_pool", "ssm_pool"):
            pool = np.asarray(getattr(out, name))
            tiny = np.finfo(pool.dtype).tiny
            with np.errstate(invalid="ignore"):
                pools[name] = np.where(np.abs(pool) < tiny, 0.0, pool).astype(pool.dtype) + pool.dtype.type(0.0)
        return out._replace(**pools)
