"""Cases at GPU scale and the sampled comparison that judges them (spec/numerics.md NU-13).

The `scale` profile (profiles.py) runs `conformance/scale_suite/` natively on a GPU: KV and recurrent-state
pools past 2**31 elements (an element offset computed in int32 wraps there), sequences of 128k tokens,
256-row decode batches, and more than 65535 rows or sequences (the grid limit of a CUDA grid's y and z
axes). `scale-smoke` runs the same tests at small sizes (`SIZES`), anywhere, to check this machinery.

A backend computes the whole call; the float64 reference cannot (a 2**31-element pool is 17 GB in
float64, a 128k-token prefill 10**16 operations), so each test judges a sample (NU-13):

* `Sampled` holds a small case that the reference computes in full and a `select` that takes the same
  fields out of the backend's result of the large call, so the op's own checks (CHECKS) compare them as
  they would any case. For attention the small case keeps whole sequences, or cuts a sequence into
  one-row sequences whose kv_len ends at the row's position (the row sees exactly the keys it saw:
  PA-6, PA-7, PA-15), over a pool holding only the pages they read. For writes it keeps whole pages (or
  pool rows) with every token that writes into them, so unwritten slots of the sample are unwritten in
  the large call too.
* What is sampled: rows or sequences that touch the pool past the 2**31-element boundary (the highest
  page or slot of the call always), the longest sequence, the first and last rows, tile boundaries of
  the long prefill, and random others (a fixed seed per test).
* Cheap known answers cover the rest in full: every pool page or row no token writes must come back bit
  for bit (PA-45, RS-4); one pass over the result finds those that changed, and the sample takes them in
  (as unwritten pages of the small case, compared exactly by the op's checks).

A failure's reproducer is the small case (it replays the sampled rows in a compacted pool, not the
offsets of the large one); the large case's params name the test that rebuilds it (`rebuild`).
"""
from __future__ import annotations

from .attention import attention_case, attention_sample, mla_case, page_table, touching  # noqa: F401
from .sampling import (INT32_LIMIT, PERIOD, SIZES, Sampled, Sizes, periodic, pick_dtypes,  # noqa: F401
                       sample_indices, sizes_for, spread_pages)
from .writes import (changed_rows, conv_rows_case, gdn_update_case, rows_sample, spread_slots, ssu_case,  # noqa: F401
                     ssu_sample, write_kv_case, write_kv_sample)
