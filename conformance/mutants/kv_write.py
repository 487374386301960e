"""Mutants of write_kv (spec/paged_attention.md PA-40 .. PA-50): realistic cache-write bugs, each wrapping the reference."""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.conformance.mutants import Mutant, mutant
from kvconform.conformance.mutants.edits import narrowed
from kvconform.reference import dtypes


@mutant(op="write_kv", clause="PA-41",
        description="a negative (padding) slot is not skipped: Python-style indexing writes the pool's end")
class WriteKvNegativeSlotWraps(Mutant):
    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **kw):
        total = k_pages.shape[0] * k_pages.shape[1]
        slots = np.where(slot_mapping < 0, slot_mapping % total, slot_mapping).astype(slot_mapping.dtype)
        return reference.write_kv(k_pages, v_pages, k, v, slots, **kw)


@mutant(op="write_kv", clause="PA-44",
        description="quantize-on-write as x * fl32(1/s) instead of the correctly rounded x / s")
class WriteKvReciprocalScale(Mutant):
    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        from kvconform.reference.kv_write import validate_write_kv
        call = validate_write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale, v_scale=v_scale)
        if call.k_scale is None:
            return reference.write_kv(k_pages, v_pages, k, v, slot_mapping)
        hkv = np.shape(k_pages)[2]
        slots = np.where(np.asarray(slot_mapping) >= 0, slot_mapping, 0)

        def prescaled(x, s):   # fl32(x) * fl32(1/s): store at scale 1 what the kernel computed
            s = np.asarray(s, np.float32)
            if s.ndim == 1:      # per KV head (PA-48)
                s = s[None, :, None]
            elif s.ndim == 3:    # per slot and KV head, beside the pages (PA-48)
                s = s.reshape(-1, hkv)[slots][:, :, None]
            inv = np.float32(1.0) / s
            return (np.asarray(x).astype(np.float32) * inv).astype(np.float32)
        return reference.write_kv(k_pages, v_pages, prescaled(k, call.k_scale), prescaled(v, call.v_scale),
                                  slot_mapping, k_scale=1.0, v_scale=1.0)


@mutant(op="write_kv", clause="PA-48",
        description="quantizes every written token with the scales beside the first written slot")
class WriteKvFirstTokenScale(Mutant):
    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        if np.ndim(k_scale) == 3 and (slot_mapping >= 0).any():
            page_size = k_pages.shape[1]
            first = int(slot_mapping[slot_mapping >= 0][0])
            k_scale = np.broadcast_to(k_scale[first // page_size, first % page_size], k_scale.shape).copy()
            v_scale = np.broadcast_to(v_scale[first // page_size, first % page_size], v_scale.shape).copy()
        return reference.write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale, v_scale=v_scale)


@mutant(op="write_kv", clause="PA-44",
        description="float8_e5m2 stores overflow as +-inf instead of saturating to the largest finite value "
                    "(a non-finite stored value where the reference is finite)")
class WriteKvE5m2OverflowToInf(Mutant):
    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        result = reference.write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale, v_scale=v_scale)
        if dtypes.dtype_name(k_pages.dtype) != "float8_e5m2" or np.ndim(k_scale) != 0 or np.ndim(v_scale) != 0:
            return result
        return _unsaturated(result, k, v, slot_mapping, k_scale, v_scale, np.ones(np.shape(slot_mapping), bool))


@mutant(op="write_kv", clause="PA-50", only_caught_by="padded", max_size=12,
        description="the grid follows k's rows instead of the slot mapping's length: each padding row past "
                    "the slot mapping reads the stale (zero) slot-buffer entry and overwrites slot 0")
class WriteKvGridFollowsKeys(Mutant):
    capabilities = narrowed("write_kv", ("float32",), ("float32",))

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **kw):
        result = reference.write_kv(k_pages, v_pages, k, v, slot_mapping, **kw)   # validates first
        n = np.shape(slot_mapping)[0]
        for t in range(n, np.shape(k)[0]):
            result = reference.write_kv(result.k_pages, result.v_pages, k[t:t + 1], v[t:t + 1],
                                        np.zeros(1, np.asarray(slot_mapping).dtype), **kw)
        return result


@mutant(op="write_kv", clause="PA-44", only_caught_by="range|_crossed_", max_size=12,
        description="int8 quantization converts the float32 quotient to int32 before saturating: a quotient "
                    "of 2^31 or more (large values over a scale near the smallest normal) wraps to -2^31 and "
                    "stores -128")
class WriteKvInt8ThroughInt32(Mutant):
    capabilities = narrowed("write_kv", ("float32",), ("int8",), ("quantized_kv",))

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        result = reference.write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale, v_scale=v_scale)
        if np.asarray(k_pages).dtype != np.int8 or np.ndim(k_scale) != 0:
            return result
        live = np.flatnonzero(np.asarray(slot_mapping) >= 0)
        pools = []
        for pool, x, scale in ((result.k_pages, k, k_scale), (result.v_pages, v, v_scale)):
            pool = pool.copy()
            with np.errstate(over="ignore", invalid="ignore"):
                quotient = np.asarray(x[live], np.float32) / np.float32(scale)
            wrapped = ~(np.abs(quotient) < 2.0 ** 31)
            flat = pool.reshape(-1, *pool.shape[2:])
            slots = np.asarray(slot_mapping)[live]
            flat[slots] = np.where(wrapped, np.int8(-128), flat[slots])
            pools.append(pool)
        return type(result)(*pools)


@mutant(op="write_kv", clause="PA-40", only_caught_by="long|reach_page_size", max_size=600,
        description="slot s stored at page s >> log2(page_size), offset s & (page_size - 1): right only for "
                    "power-of-two page sizes")
class WriteKvPageByShift(Mutant):
    capabilities = narrowed("write_kv", ("float32",), ("float32",))

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **kw):
        reference.write_kv(k_pages, v_pages, k, v, slot_mapping, **kw)   # validates first
        P, page_size = np.shape(k_pages)[:2]
        shift = page_size.bit_length() - 1
        slots = np.asarray(slot_mapping).astype(np.int64)
        if page_size != 1 << shift:
            moved = (slots >> shift) * page_size + (slots & ((1 << shift) - 1))
            slots = np.where((slots >= 0) & (moved < P * page_size), moved, -1)   # out of the pool: lost
        return reference.write_kv(k_pages, v_pages, k, v, slots.astype(np.asarray(slot_mapping).dtype), **kw)


@mutant(op="write_kv", clause="PA-44", only_caught_by="_crossed_", max_size=10 ** 6,
        description="tokens past the first 256-token tile go through the loop's second path, whose "
                    "conversion does not saturate: an overflowing quotient is stored as inf (e5m2), NaN "
                    "(e4m3fn) or wrapped modulo 256 (int8); the first tile saturates (short calls, or long "
                    "calls of ordinary values, pass)")
class WriteKvUnsaturatedPastFirstTile(Mutant):
    TILE = 256

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        result = reference.write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale, v_scale=v_scale)
        n = np.shape(slot_mapping)[0]
        if dtypes.dtype_name(k_pages.dtype) not in _LARGEST or n <= self.TILE \
                or np.ndim(k_scale) != 0 or np.ndim(v_scale) != 0:   # per-head / per-token scales: as the reference
            return result
        return _unsaturated(result, k, v, slot_mapping, k_scale, v_scale, np.arange(n) >= self.TILE)


#: the largest finite value of each quantized pool format
_LARGEST = {"float8_e5m2": 57344.0, "float8_e4m3fn": 448.0, "int8": 127.0}


def _unsaturated(result, k, v, slot_mapping, k_scale, v_scale, rows: np.ndarray):
    """`result` with the quotients x / scale (scalar scales) of the tokens `rows` (bool[N]) that overflow
    the pool format stored without saturating: +-inf (e5m2), NaN (e4m3fn has no infinity), or the low
    byte of the rounded quotient (int8)."""
    name = dtypes.dtype_name(result.k_pages.dtype)
    slot_mapping = np.asarray(slot_mapping)
    live = rows & (slot_mapping >= 0)
    slots = slot_mapping[live]
    pools = []
    for pool, x, scale in ((result.k_pages, k, k_scale), (result.v_pages, v, v_scale)):
        pool = pool.copy()
        with np.errstate(over="ignore", invalid="ignore"):   # a quotient past float32 is inf: it overflows
            q = np.asarray(x[:slot_mapping.shape[0]][live], np.float32) / np.float32(1.0 if scale is None else scale)
        over = np.abs(q) > _LARGEST[name]
        flat = pool.reshape(-1, *pool.shape[2:])
        if name == "int8":
            wrapped = (np.rint(np.clip(q, -2.0 ** 31, 2.0 ** 31 - 1)).astype(np.int64) & 0xFF).astype(np.uint8)
            flat[slots] = np.where(over, wrapped.view(np.int8), flat[slots])
        else:
            overflow = np.inf if name == "float8_e5m2" else np.nan
            flat[slots] = np.where(over, np.sign(q) * overflow, flat[slots].astype(np.float32)).astype(pool.dtype)
        pools.append(pool)
    return type(result)(*pools)
