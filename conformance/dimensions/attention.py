"""Dimensions of the attention ops: ragged_paged_attention, its CSR form, write_kv and MLA (spec/paged_attention.md,
spec/metadata.md MD-23, spec/mla.md). Real ranges and sources: sources.py.

Kinds (model.KINDS): output rows, heads and dims past T are left unwritten (a grid that covers the first
tile only); page slots, page-table entries, KV heads and pool pages past T are read from the first tile (a
loop that reloads its first block); keys and windows past T are dropped. One kind per dimension: for an
output axis, "dropped" and "unwritten" leave the same rows wrong; for an input axis read in a loop,
"read from the first tile" is the harder one to catch (the values are real keys, not zeros).
"""
from __future__ import annotations

from .model import Dimension
from . import sources as src

_GRID = "a grid past T leaves its rows unwritten; dropping them is the same output"
_LOOP = "a loop that reloads its first tile reads real values: harder to see than a dropped (zero) part"
#: why kv_lens carries no 16-bit narrowing mutant here: it would need a sequence past 65536 keys, which an
#: interpreted kernel (Triton, Pallas on CPU) takes minutes to attend; kv_len narrowing is caught where the
#: lengths are metadata (block_table_to_csr's range column draws kv_len up to INT32_MAX)
_NO_KEY_NARROWING = ("No 16-bit narrowing of kv_lens here: a 65537-key sequence costs interpreted kernels "
                     "minutes; the metadata ops' range column draws kv_len to INT32_MAX")


def _attention(q: str, pages: tuple[str, ...], dim_axes: tuple[str, ...], cu: str, csr: bool) -> tuple[Dimension, ...]:
    """The dimensions shared by ragged_paged_attention (csr=False) and its CSR form (csr=True)."""
    k, v = pages
    seq_axes = ((f"{cu}[0]", "kv_indptr[0]", "kv_last_page_len[0]") if csr else
                ("kv_lens[0]", "page_indices[0]", f"{cu}[0]", "num_seqs"))
    table = (() if csr else (
        Dimension("pages_per_seq", ("page_indices[1]",), *src.PAGES_PER_SEQ, small_max=16,
                  kind="first_tile", first_tile=("page_indices[1]",), why_kind=_LOOP),
        Dimension("keys", ("max(kv_lens)",), *src.KEYS, small_max=64, kind="dropped", crossed=True,
                  dropped=("kv_lens>=diff(cu_q_lens)",),
                  why_kind="the KV loop stops after T keys; keys past T read from the first tile is the "
                           "pages_per_seq and page_size mutants. " + _NO_KEY_NARROWING),
    )) + ((
        Dimension("table_pages", ("kv_indices[0]",), *src.POOL_PAGES, small_max=64, cheap=True,
                  kind="first_tile", first_tile=("kv_indices[0]",),
                  why_kind=_LOOP + ". No 16-bit narrowing of kv_indptr here: past 2^16 table entries is past "
                           "2^16 keys in one call (minutes for interpreted kernels); csr_to_block_table and "
                           "append_slot_mapping narrow it with tables of 131071 pages"),
        Dimension("pages_per_seq", ("max(diff(kv_indptr))",), *src.PAGES_PER_SEQ, small_max=16,
                  no_mutant="a sequence's pages are a slice of kv_indices: the table_pages mutants cover "
                            "entries past T"),
    ) if csr else ())
    return (
        Dimension("tokens", (f"{q}[0]",), *src.TOKENS, small_max=16, unwritten=("out[0]",), why_kind=_GRID),
        Dimension("sequences", seq_axes, *src.SEQUENCES, small_max=8, unwritten=(f"out[0]@{cu}",),
                  why_kind="the rows of the sequences past T are left unwritten (a grid over the first T "
                           "sequences); a sequence read from the first tile's metadata is not a valid call"),
        *table,
        Dimension("page_size", (f"{k}[1]", f"{v}[1]", "k_scale[1]/3", "v_scale[1]/3"), *src.PAGE_SIZE,
                  small_max=16, kind="first_tile", first_tile=(f"{k}[1]", f"{v}[1]"), why_kind=_LOOP),
        Dimension("pool_pages", (f"{k}[0]", f"{v}[0]", "k_scale[0]/3", "v_scale[0]/3"), *src.POOL_PAGES,
                  small_max=64, cheap=True, kind="first_tile", first_tile=(f"{k}[0]", f"{v}[0]"),
                  ids=("kv_indices",) if csr else ("page_indices",),
                  why_kind="a page id past T addresses the first tile of the pool (an offset wrapped at T)"),
        Dimension("q_heads", (f"{q}[1]", "sinks[0]"), *src.Q_HEADS, small_max=64, unwritten=("out[1]",),
                  why_kind=_GRID),
        Dimension("kv_heads", (f"{k}[2]", f"{v}[2]", "k_scale[0]/1", "v_scale[0]/1", "k_scale[2]/3",
                               "v_scale[2]/3"), *src.KV_HEADS, small_max=32, kind="first_tile",
                  first_tile=(f"{k}[2]", f"{v}[2]"), why_kind=_LOOP),
        Dimension("group", (), *src.GROUP, small_max=64,
                  no_mutant="q_heads / kv_heads, no axis of its own: the q_heads mutants with one KV head (the "
                            "reach_q_heads column draws MQA, group = q_heads) are its threshold mutants"),
        Dimension("head_dim", dim_axes, *src.HEAD_DIM, small_max=16, unwritten=("out[2]",), why_kind=_GRID),
        Dimension("window", ("sliding_window",), *src.WINDOW, small_max=64, kind="dropped",
                  dropped=("sliding_window",), why_kind="a window clipped to T keys"),
    )


ATTENTION = _attention("q", ("k_pages", "v_pages"), ("q[2]", "k_pages[3]", "v_pages[3]"), "cu_q_lens", False)
ATTENTION_CSR = _attention("q", ("k_pages", "v_pages"), ("q[2]", "k_pages[3]", "v_pages[3]"), "qo_indptr", True)

#: write_kv: "unwritten" along a pool axis is what a write kernel that stops at T does (the slots keep
#: their old values); the tokens past T are dropped (slot_mapping sliced to T, PA-50 padding)
WRITE_KV = (
    Dimension("tokens", ("slot_mapping[0]", "k[0]", "v[0]"), *src.TOKENS, small_max=16, kind="dropped", crossed=True,
              dropped=("slot_mapping[0]",), why_kind="tokens past T never written; the same pool as leaving "
                                                      "their slots unwritten"),
    Dimension("pool_slots", ("max(slot_mapping)",), src.POOL_PAGES[0] * 16,
              "pool_pages' 819200 pages x 16 tokens (vLLM vllm/config/cache.py default block_size 16)",
              small_max=256, cheap=True, no_mutant="slots are pages x page_size: the pool_pages and page_size "
                                                   "mutants leave the slots past T unwritten", ids=("slot_mapping",)),
    Dimension("pool_pages", ("k_pages[0]", "v_pages[0]", "k_scale[0]/3", "v_scale[0]/3"), *src.POOL_PAGES,
              small_max=64, cheap=True, unwritten=("k_pages[0]", "v_pages[0]"), why_kind=_GRID),
    Dimension("page_size", ("k_pages[1]", "v_pages[1]", "k_scale[1]/3", "v_scale[1]/3"), *src.PAGE_SIZE,
              small_max=16, unwritten=("k_pages[1]", "v_pages[1]"), why_kind=_GRID),
    Dimension("kv_heads", ("k_pages[2]", "v_pages[2]", "k[1]", "v[1]", "k_scale[0]/1", "v_scale[0]/1",
                           "k_scale[2]/3", "v_scale[2]/3"), *src.KV_HEADS, small_max=8,
              unwritten=("k_pages[2]", "v_pages[2]"), why_kind=_GRID),
    Dimension("head_dim", ("k_pages[3]", "v_pages[3]", "k[2]", "v[2]"), *src.LATENT_ROW, small_max=16,
              unwritten=("k_pages[3]", "v_pages[3]"), why_kind=_GRID),
)

MLA = (
    Dimension("tokens", ("q_nope[0]", "q_pe[0]"), *src.TOKENS, small_max=16, unwritten=("out[0]",), why_kind=_GRID),
    Dimension("sequences", ("kv_lens[0]", "page_indices[0]", "cu_q_lens[0]", "num_seqs"), *src.SEQUENCES,
              small_max=8, unwritten=("out[0]@cu_q_lens",), why_kind="as ragged_paged_attention"),
    Dimension("pages_per_seq", ("page_indices[1]",), *src.PAGES_PER_SEQ, small_max=16, kind="first_tile",
              first_tile=("page_indices[1]",), why_kind=_LOOP),
    Dimension("keys", ("max(kv_lens)",), *src.KEYS, small_max=64, kind="dropped", crossed=True,
              dropped=("kv_lens>=diff(cu_q_lens)",), why_kind="the KV loop stops after T keys. " + _NO_KEY_NARROWING),
    Dimension("page_size", ("c_kv_pages[1]", "k_pe_pages[1]"), *src.PAGE_SIZE, small_max=16, kind="first_tile",
              first_tile=("c_kv_pages[1]", "k_pe_pages[1]"), why_kind=_LOOP),
    Dimension("pool_pages", ("c_kv_pages[0]", "k_pe_pages[0]"), *src.POOL_PAGES, small_max=64, cheap=True,
              kind="first_tile", first_tile=("c_kv_pages[0]", "k_pe_pages[0]"), ids=("page_indices",),
              why_kind="a page id past T addresses the first tile of the pool"),
    Dimension("q_heads", ("q_nope[1]", "q_pe[1]", "sinks[0]"), *src.Q_HEADS, small_max=16,
              unwritten=("out[1]",), why_kind=_GRID),
    Dimension("latent_dim", ("q_nope[2]", "c_kv_pages[2]"), *src.LATENT_DIM, small_max=16,
              unwritten=("out[2]",), why_kind=_GRID + " (the latent output dims past T)"),
    Dimension("rope_dim", ("q_pe[2]", "k_pe_pages[2]"), *src.ROPE_DIM, small_max=16, kind="first_tile",
              first_tile=("k_pe_pages[2]",), why_kind="the RoPE dims past T read from the first tile"),
    Dimension("window", ("sliding_window",), *src.WINDOW, small_max=64, kind="dropped",
              dropped=("sliding_window",), why_kind="a window clipped to T keys"),
)

REGISTRY = {"ragged_paged_attention": ATTENTION, "ragged_paged_attention_csr": ATTENTION_CSR,
            "write_kv": WRITE_KV, "mla_paged_attention": MLA}
