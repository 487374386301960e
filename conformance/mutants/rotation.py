"""Mutants of the rotation family: realistic re-rotation kernel bugs, each wrapping the reference."""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.reference import dtypes

from . import Mutant, mutant


@mutant(op="rotate_keys", clause="RO-7",
        description="per-block deltas not broadcast: the [n, 1] row is applied to token 0 only")
class BlockDeltasNotBroadcast(Mutant):
    def rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, **kw):
        out = reference.rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut, **kw)
        if np.asarray(rotation_deltas).shape[1] == 1:
            idx = np.asarray(rotated_block_indices, dtype=np.int64)
            out[idx, 1:] = dtypes.upcast(np.asarray(k_pages)[idx, 1:])   # a kernel that loops over t < width
        return out


@mutant(op="rotate_keys", clause="RO-5",
        description="sign of the sine flipped: (x c + y s, -x s + y c), the inverse rotation")
class RotateSignFlipped(Mutant):
    def rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, **kw):
        lut = np.array(trig_lut, copy=True)
        half = lut.shape[1] // 2
        lut[:, half:] = -lut[:, half:]
        return reference.rotate_keys(k_pages, rotated_block_indices, rotation_deltas, lut, **kw)


@mutant(op="shift_keys", clause="RO-10",
        description="theta form shifts by -delta (moves keys back instead of forward)")
class ShiftSignFlipped(Mutant):
    def shift_keys(self, k_pages, rotated_block_indices, position_deltas, **kw):
        return reference.shift_keys(k_pages, rotated_block_indices, -np.asarray(position_deltas), **kw)


@mutant(op="rotate_keys", clause="RO-2",
        description="wrong pair layout: always pairs (j, j + h) (rotate_half), ignoring layout=interleaved")
class WrongPairLayout(Mutant):
    def rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, *, layout="half",
                    rotary_dim=None):
        return reference.rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut, layout="half",
                                     rotary_dim=rotary_dim)


@mutant(op="shift_keys", clause="RO-1",
        description="partial rotary ignored: the theta form rotates all D dims")
class ShiftRotatesAllDims(Mutant):
    def shift_keys(self, k_pages, rotated_block_indices, position_deltas, *, theta, layout="half",
                   rotary_dim=None):
        return reference.shift_keys(k_pages, rotated_block_indices, position_deltas, theta=theta, layout=layout)


@mutant(op="rotate_keys", clause="RO-1",
        description="an in-place kernel returns its input buffer itself when no block is listed (output aliases "
                    "k_pages)", diagnosis="share memory")
class ReturnsInputWhenIdle(Mutant):
    def rotate_keys(self, k_pages, rotated_block_indices, *args, **kw):
        if len(rotated_block_indices) == 0:
            return k_pages
        return reference.rotate_keys(k_pages, rotated_block_indices, *args, **kw)


@mutant(op="rotate_keys", clause="RO-13",
        description="LUT rows read through a fixed 4-row table: rows past 3 are clamped to 3, so a block behind "
                    "4+ evicted blocks is moved back by 3 blocks (the OpenVINO reference clamps the row to the "
                    "LUT size); the short rows of the base columns stay right: caught by the evict -> rotate -> "
                    "attend machine (RO-13) and by the reach columns' far rows")
class LutRowsClampedToFour(Mutant):
    def rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, **kw):
        # validated as given first: an out-of-range row must still be rejected (RO-12)
        reference.rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut, **kw)
        return reference.rotate_keys(k_pages, rotated_block_indices, np.minimum(rotation_deltas, 3), trig_lut, **kw)


@mutant(op="rotate_keys", clause="NU-RO2",
        description="trig LUT rounded to the cache's dtype before the pair update (a kernel that loads cos/sin "
                    "in the key dtype): with a bfloat16 or float16 cache each coefficient carries that dtype's "
                    "rounding, far more than float32 arithmetic does (issue 31's regression)")
class LutRoundedToCacheDtype(Mutant):
    def rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, **kw):
        reference.rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut, **kw)   # RO-12 as given
        cache = np.asarray(k_pages).dtype
        lut = np.asarray(trig_lut)
        if cache.itemsize < lut.dtype.itemsize:
            lut = lut.astype(cache)
        return reference.rotate_keys(k_pages, rotated_block_indices, rotation_deltas, lut, **kw)


@mutant(op="shift_keys", clause="RO-3",
        description="token shifts converted to float32 before the float64 angle (a float32 position table): exact "
                    "below 2^24, off by up to |delta| 2^-24 past it, a radian and more at int32 extremes",
        only_caught_by="range|_crossed_")
class ShiftThroughFloat32Positions(Mutant):
    def shift_keys(self, k_pages, rotated_block_indices, position_deltas, **kw):
        reference.shift_keys(k_pages, rotated_block_indices, position_deltas, **kw)   # RO-12 as given
        rounded = np.asarray(position_deltas).astype(np.float32).astype(np.float64)
        clipped = np.clip(rounded, -2.0 ** 31, 2.0 ** 31 - 1)   # fl32(2^31 - 1) = 2^31 leaves int32
        return reference.shift_keys(k_pages, rotated_block_indices, clipped.astype(np.int64), **kw)
