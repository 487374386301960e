"""Dimensions of the paged-KV metadata ops (spec/metadata.md). Their arrays are small integers, so every
dimension is cheap: the `long` column draws them at serving scale and `range` at the int32 limits, and the
registry's maxima are those limits where the spec accepts them (MD-22: lengths, slots and page ids are
int32 values; arena sizes end before 2^63)."""
from __future__ import annotations

from .model import Dimension
from . import sources as src

INT32_MAX = 2 ** 31 - 1
_INT32 = "spec/metadata.md MD-22: page ids, lengths and slots are int32 values (the range column reaches them)"
_ROWS = "the output rows past T left unwritten (a grid over the first tile)"
_LOOP = "entries past T read from the first tile (a loop that reloads its first block)"
#: page size: a value, not an axis; the range column draws up to 2^27 to bring int32 slots to their limit
PAGE_SIZE = Dimension("page_size", ("page_size",), 1 << 27, _INT32 + "; serving sizes reach 672 "
                      "(vllm-project/vllm#24280)", small_max=16, cheap=True,
                      no_mutant="a scalar, no axis: its reach is the int32 slots it makes (ids of the pages)")
#: kv lengths as values: INT32_MAX (range), 163840 in real models (config.json of DeepSeek-V3)
KV_LENS = Dimension("kv_len", ("max(kv_lens)",), INT32_MAX, _INT32 + "; " + src.KEYS[1], small_max=64, cheap=True,
                    no_mutant="a value, not an axis: its reach is the 16-bit narrowing", ids=("kv_lens",))


def _sequences(axes, unwritten) -> Dimension:
    return Dimension("sequences", axes, *src.SEQUENCES, small_max=8, cheap=True, unwritten=unwritten, why_kind=_ROWS)


REGISTRY = {
    "block_table_to_csr": (
        _sequences(("page_indices[0]", "kv_lens[0]", "num_seqs"), ("kv_last_page_len[0]",)),
        Dimension("pages_per_seq", ("page_indices[1]",), *src.PAGES_PER_SEQ, small_max=16, cheap=True,
                  kind="first_tile", first_tile=("page_indices[1]",), why_kind=_LOOP),
        Dimension("pool_pages", ("max(page_indices)",), INT32_MAX, _INT32, small_max=64, cheap=True,
                  no_mutant="ids, not an axis: their reach is the 16-bit narrowing", ids=("page_indices",)),
        PAGE_SIZE, KV_LENS,
    ),
    "csr_to_block_table": (
        _sequences(("kv_indptr[0]", "kv_last_page_len[0]"), ("kv_lens[0]",)),
        Dimension("table_pages", ("kv_indices[0]",), *src.POOL_PAGES, small_max=64, cheap=True, kind="first_tile",
                  first_tile=("kv_indices[0]",), ids=("kv_indptr",), why_kind=_LOOP),
        Dimension("pages_per_seq", ("pages_per_seq",), *src.PAGES_PER_SEQ, small_max=16, cheap=True,
                  unwritten=("page_indices[1]",), why_kind="the block-table columns past T left unwritten"),
        Dimension("pool_pages", ("max(kv_indices)",), INT32_MAX, _INT32, small_max=64, cheap=True,
                  no_mutant="ids, not an axis: their reach is the 16-bit narrowing", ids=("kv_indices",)),
        PAGE_SIZE,
    ),
    "append_slot_mapping": (
        Dimension("tokens", ("max(qo_indptr)",), *src.TOKENS, small_max=16, cheap=True, unwritten=("out[0]",),
                  why_kind=_ROWS),
        _sequences(("qo_indptr[0]", "kv_indptr[0]", "kv_last_page_len[0]"), ("out[0]@qo_indptr",)),
        Dimension("table_pages", ("kv_indices[0]",), *src.POOL_PAGES, small_max=64, cheap=True, kind="first_tile",
                  first_tile=("kv_indices[0]",), ids=("kv_indptr",), why_kind=_LOOP),
        Dimension("pool_pages", ("max(kv_indices)",), INT32_MAX, _INT32, small_max=64, cheap=True,
                  no_mutant="ids, not an axis: their reach is the 16-bit narrowing", ids=("kv_indices",)),
        PAGE_SIZE,
    ),
    "arena_layout": (
        Dimension("arrays", ("nbytes[0]",), 4096, "one arena holds the per-step metadata arrays; vLLM's "
                  "persistent batch keeps a few per sequence (max_num_seqs 1024 x 4)", small_max=16, cheap=True,
                  unwritten=("offsets[0]",), why_kind="the offsets past T left unwritten"),
        Dimension("array_bytes", ("max(nbytes)",), (1 << 40) - 1, "spec/metadata.md MD-22: any size whose layout "
                  "ends before 2^63 (the range column draws 2^40 - 1)", small_max=4096, cheap=True,
                  no_mutant="a value, not an axis: its reach is the 16-bit narrowing", ids=("nbytes",)),
        Dimension("alignment", ("alignment",), 1 << 31, "MD-8: any power of two (the range column draws 2^31)",
                  small_max=256, cheap=True, no_mutant="a scalar, no axis"),
        Dimension("start", ("start",), 1 << 40, "MD-8: any start >= 0 (the range column draws 2^40)",
                  small_max=4096, cheap=True, no_mutant="a scalar, no axis"),
    ),
    "slot_mapping_from_arena": (
        Dimension("arena_bytes", ("arena[0]",), 1 << 26, "the four arrays of 16384 tokens and 1024 sequences "
                  "over 163840-key tables: kv_indices of 1024 x 10240 int32 = 40 MiB (sources.py)",
                  small_max=4096, cheap=True, kind="first_tile", first_tile=("arena[0]",), ids=("offsets",),
                  why_kind="arena bytes past T read from the first tile; offsets into it narrowed"),
        Dimension("arena_arrays", ("offsets[0]",), 4, "MD-10: four arrays (ARENA_ORDER)", small_max=4,
                  cheap=True, no_mutant="always 4, below every tile"),
        Dimension("sequences", ("num_seqs",), *src.SEQUENCES, small_max=8, cheap=True,
                  no_mutant="the sequences' arrays live in the arena: the arena_bytes mutants cover them"),
        PAGE_SIZE,
    ),
    "page_table_step": (
        _sequences(("seq_ids[0]", "seq_lens[0]", "kv_indptr[0]", "sinks[0]", "windows[0]"), ("seq_lens[0]",)),
        Dimension("table_pages", ("kv_indices[0]",), *src.POOL_PAGES, small_max=64, cheap=True,
                  unwritten=("kv_indices[0]",), ids=("kv_indptr",), why_kind="the page lists past T left unwritten"),
        Dimension("pool_pages", ("ref_counts[0]",), *src.POOL_PAGES, small_max=64, cheap=True,
                  unwritten=("ref_counts[0]",), ids=("kv_indices",),
                  why_kind="the reference counts past T left unwritten; page ids narrowed"),
        Dimension("seq_len", ("max(seq_lens)",), INT32_MAX, _INT32, small_max=64, cheap=True,
                  no_mutant="a value, not an axis: its reach is the 16-bit narrowing", ids=("seq_lens",)),
        Dimension("seq_id", ("max(seq_ids)",), INT32_MAX, "MD-11: sequence ids are int32 values", small_max=64,
                  cheap=True, no_mutant="ids, not an axis: their reach is the 16-bit narrowing", ids=("seq_ids",)),
        # not cheap: the manager appends token by token (a 16384-token append costs the reference ~50 s)
        Dimension("appended", ("n",), *src.TOKENS, small_max=16, unwritten=("slots[0]",),
                  why_kind="the slots of the appended tokens past T left unwritten"),
        PAGE_SIZE,
    ),
}
