"""Hand-built MLA calls for the kernel tests of our backends (not a test module): ragged batches over
shuffled pages with NaN in every don't-care slot (spec/mla.md ML-7), compared by the tests through
`suite_checks.assert_conforms` (ML-10), never a local tolerance."""
from __future__ import annotations

import numpy as np


def mla_call(seed: int, *, page_size: int, q_lens, kv_lens, H: int, d_c: int, d_r: int, dtype="float32"):
    """A ragged batch over shuffled pages; q_nope / q_pe are strided views into one wider array (the kernel
    must honour their strides); unused pages and slots past kv_len hold NaN (ML-7)."""
    rng = np.random.default_rng(seed)
    used = [-(-n // page_size) for n in kv_lens]
    P = sum(used) + 2
    perm = rng.permutation(P)
    table = np.zeros((len(kv_lens), max(used)), np.int32)
    c = np.full((P, page_size, d_c), np.nan, np.float32)
    r = np.full((P, page_size, d_r), np.nan, np.float32)
    at = 0
    for i, (n, u) in enumerate(zip(kv_lens, used)):
        table[i, :u] = perm[at:at + u]
        at += u
        for j in range(n):
            page, slot = table[i, j // page_size], j % page_size
            c[page, slot] = rng.standard_normal(d_c)
            r[page, slot] = rng.standard_normal(d_r)
    T = sum(q_lens)
    both = rng.standard_normal((T, H, d_c + d_r + 1)).astype(dtype)
    q_nope, q_pe = both[:, :, :d_c], both[:, :, d_c + 1:]          # views with a row stride of d_c + d_r + 1
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    return (q_nope, q_pe, c.astype(dtype), r.astype(dtype), np.array(kv_lens, np.int32), table, cu, len(kv_lens))
