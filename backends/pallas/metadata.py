"""The append slot mapping read from a packed arena, as a Pallas TPU kernel (spec/metadata.md MD-7, MD-10).

Kernel shape: the arena (uint8, MD-8) travels as int32 words and is scalar-prefetched into SMEM with the
word offsets of its four arrays (qo_indptr, kv_indptr, kv_indices, kv_last_page_len: ARENA_ORDER) and
(num_seqs, page_size). The kernel reads every array element at `offset + index` inside the words, so a
view's offset is honoured on the device, and it never reads a word outside the four arrays: the indices it
uses are bounded by the arrays themselves (i <= S, a page index below kv_indptr[S]), which the reference's
validators have checked before the call. The slots go to an SMEM output, one scalar store per token.
Words and slots are padded to buckets (pow2) so that arenas of nearby sizes share one compiled kernel;
padding words are never read and padding slots hold -1 and are dropped by the adapter.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .bucketing import pow2

#: the smallest word bucket: arenas up to 256 bytes share one kernel
MIN_WORDS = 64


def arena_words(arena: np.ndarray) -> np.ndarray:
    """i32[pow2(ceil(N / 4), MIN_WORDS)]: the bytes of `arena` (u8[N]) as native int32 words, the way the
    reference views them (word w = bytes 4w .. 4w+3), zero bytes appended to the bucket."""
    buf = np.zeros(4 * pow2(-(-arena.shape[0] // 4), MIN_WORDS), np.uint8)
    buf[:arena.shape[0]] = arena
    return buf.view(np.int32)


def slot_mapping_from_arena_kernel(words, word_offsets, meta, *, num_slots: int, interpret):
    """Run the kernel.

    words:        i32[W] the arena's int32 words (`arena_words`)
    word_offsets: i32[4] byte offset / 4 of qo_indptr, kv_indptr, kv_indices, kv_last_page_len
    meta:         i32[2] = (num_seqs S, page_size P)
    Returns i32[num_slots]: the slot of new token t (t < T = qo_indptr[S], MD-7), -1 past T.
    """
    return pl.pallas_call(
        _kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=3, grid=(1,), in_specs=[],
                                               out_specs=pl.BlockSpec(memory_space=pltpu.SMEM)),
        out_shape=jax.ShapeDtypeStruct((num_slots,), jnp.int32), interpret=interpret,
    )(words, word_offsets, meta)


def _kernel(words_ref, offs_ref, meta_ref, out_ref):
    num_seqs, page_size = meta_ref[0], meta_ref[1]
    qo, indptr, indices, last = (offs_ref[k] for k in range(4))

    def clear(t, carry):
        out_ref[t] = jnp.int32(-1)
        return carry

    lax.fori_loop(0, out_ref.shape[0], clear, 0)

    def sequence(i, carry):
        q_start, q_end = words_ref[qo + i], words_ref[qo + i + 1]
        first_page = words_ref[indptr + i]
        pages = words_ref[indptr + i + 1] - first_page
        # MD-3, MD-4: kv_len = (n - 1) * P + last; an empty sequence has n = 0 and last = 0.
        kv_len = jnp.maximum(pages - 1, 0) * page_size + words_ref[last + i]
        first_pos = kv_len - (q_end - q_start)      # the new tokens are the last q_len positions (MD-7)

        def token(t, c):
            pos = first_pos + (t - q_start)
            page = words_ref[indices + first_page + pos // page_size]
            out_ref[t] = page * page_size + pos % page_size
            return c

        lax.fori_loop(q_start, q_end, token, 0)
        return carry

    lax.fori_loop(0, num_seqs, sequence, 0)


__all__ = ["arena_words", "slot_mapping_from_arena_kernel", "MIN_WORDS"]
