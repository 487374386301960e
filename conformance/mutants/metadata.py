"""Mutants of the paged-KV metadata family: realistic bugs of arena consumers, page-table conversions
and cache managers (several of them shipped in TVM's PagedKVCache, see spec/metadata.md), each wrapping
the reference."""
from __future__ import annotations

import numpy as np

from kvconform import reference
from kvconform.reference.metadata import ArenaLayout, BlockTable, CsrPageTable

from . import Mutant, mutant

I32 = np.int32


@mutant(op="slot_mapping_from_arena", clause="MD-10",
        description="every metadata view read from the arena start (the view's byte offset ignored)")
class ArenaOffsetIgnored(Mutant):
    def slot_mapping_from_arena(self, arena, offsets, num_seqs, page_size):
        return reference.slot_mapping_from_arena(arena, np.zeros_like(offsets), num_seqs, page_size)


@mutant(op="slot_mapping_from_arena", clause="MD-10",
        description="arrays assumed at the old fixed 256-byte slots (k * 256) instead of their packed offsets")
class FixedSlots256(Mutant):
    def slot_mapping_from_arena(self, arena, offsets, num_seqs, page_size):
        need = 256 * 3 + 4 * (int(num_seqs) + 1) * 64
        padded = np.zeros(max(need, np.asarray(arena).shape[0]), np.uint8)
        padded[:np.asarray(arena).shape[0]] = arena            # reads past the packed arena see zeros
        return reference.slot_mapping_from_arena(padded, np.arange(4, dtype=np.int64) * 256, num_seqs, page_size)


@mutant(op="block_table_to_csr", clause="MD-3",
        description="last-page length from the index of the last token ((kv_len - 1) % page_size): off by one")
class LastPageLenOffByOne(Mutant):
    def block_table_to_csr(self, page_indices, kv_lens, num_seqs, page_size):
        csr = reference.block_table_to_csr(page_indices, kv_lens, num_seqs, page_size)
        lens = np.asarray(kv_lens[:num_seqs], np.int64)
        last = np.where(lens > 0, (lens - 1) % page_size, 0).astype(I32)
        return CsrPageTable(csr.kv_indptr, csr.kv_indices, last)


@mutant(op="csr_to_block_table", clause="MD-5",
        description="CSR indptr read one sequence late: sequence i's pages taken from kv_indptr[i + 1]")
class IndptrOneLate(Mutant):
    def csr_to_block_table(self, kv_indptr, kv_indices, kv_last_page_len, page_size, pages_per_seq):
        bt = reference.csr_to_block_table(kv_indptr, kv_indices, kv_last_page_len, page_size, pages_per_seq)
        table = np.zeros_like(bt.page_indices)
        for i in range(table.shape[0]):
            n = int(kv_indptr[i + 1] - kv_indptr[i])
            row = np.asarray(kv_indices)[int(kv_indptr[i + 1]):int(kv_indptr[i + 1]) + n]
            table[i, :row.shape[0]] = row
        return BlockTable(table, bt.kv_lens)


def _pages(state, seq):
    ids = list(np.asarray(state["seq_ids"]))
    i = ids.index(seq)
    ip = np.asarray(state["kv_indptr"])
    return [int(p) for p in np.asarray(state["kv_indices"])[ip[i]:ip[i + 1]]], i


@mutant(op="page_table_step", clause="MD-15",
        description="fork does not bump the reference count of the shared prefix pages (TVM #16666)")
class ForkNoRefBump(Mutant):
    def page_table_step(self, seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows, page_size,
                        command, seq, n=0, parent=-1, pos=0, window=0, sink=0):
        out = reference.page_table_step(seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows,
                                        page_size, command, seq, n, parent, pos, window, sink)
        if command == "fork":
            refs = out.ref_counts.copy()
            pages, _ = _pages(dict(seq_ids=seq_ids, kv_indptr=kv_indptr, kv_indices=kv_indices), parent)
            for p in pages[:pos // page_size]:
                refs[p] -= 1
            out = out._replace(ref_counts=refs)
        return out


@mutant(op="page_table_step", clause="MD-18",
        description="removal only in fork order: a sequence sharing pages with a live fork is refused (TVM #17045)")
class RemoveInForkOrder(Mutant):
    def page_table_step(self, seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows, page_size,
                        command, seq, n=0, parent=-1, pos=0, window=0, sink=0):
        if command == "remove" and seq in list(np.asarray(seq_ids)):
            pages, _ = _pages(dict(seq_ids=seq_ids, kv_indptr=kv_indptr, kv_indices=kv_indices), seq)
            if any(int(ref_counts[p]) > 1 for p in pages):
                raise ValueError(f"seq={seq} shares pages with a live fork: remove the fork first")
        return reference.page_table_step(seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows,
                                         page_size, command, seq, n, parent, pos, window, sink)


@mutant(op="page_table_step", clause="MD-17",
        description="popping the whole last page rejected (n must stay below the last page's length, TVM #16871)")
class PopWholeLastPageRejected(Mutant):
    def page_table_step(self, seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows, page_size,
                        command, seq, n=0, parent=-1, pos=0, window=0, sink=0):
        if command == "pop" and n > 0 and seq in list(np.asarray(seq_ids)):
            i = list(np.asarray(seq_ids)).index(seq)
            L = int(seq_lens[i])
            last = L - (-(-L // page_size) - 1) * page_size if L else 0
            if n >= last:
                raise ValueError(f"n={n} must be smaller than the last page's length {last}")
        return reference.page_table_step(seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows,
                                         page_size, command, seq, n, parent, pos, window, sink)


@mutant(op="page_table_step", clause="MD-21",
        description="fork of a windowed sequence at a position past its sink accepted (sink check missing, TVM #17127)")
class ForkPastSinkAccepted(Mutant):
    def page_table_step(self, seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows, page_size,
                        command, seq, n=0, parent=-1, pos=0, window=0, sink=0):
        if command == "fork" and parent in list(np.asarray(seq_ids)):
            i = list(np.asarray(seq_ids)).index(parent)
            plain_s, plain_w = np.array(sinks, copy=True), np.array(windows, copy=True)
            plain_s[i] = plain_w[i] = 0
            out = reference.page_table_step(seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, plain_s, plain_w,
                                            page_size, command, seq, n, parent, pos, window, sink)
            j = list(out.seq_ids).index(parent)
            s2, w2 = out.sinks.copy(), out.windows.copy()
            s2[j], w2[j] = sinks[i], windows[i]
            return out._replace(sinks=s2, windows=w2)
        return reference.page_table_step(seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows,
                                         page_size, command, seq, n, parent, pos, window, sink)


@mutant(op="page_table_step", clause="MD-21",
        description="fork of a windowed sequence rejected even inside its sink")
class ForkInSinkRejected(Mutant):
    def page_table_step(self, seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows, page_size,
                        command, seq, n=0, parent=-1, pos=0, window=0, sink=0):
        if command == "fork" and parent in list(np.asarray(seq_ids)):
            if int(windows[list(np.asarray(seq_ids)).index(parent)]):
                raise ValueError(f"parent={parent} has a sliding window and cannot be forked")
        return reference.page_table_step(seq_ids, seq_lens, kv_indptr, kv_indices, ref_counts, sinks, windows,
                                         page_size, command, seq, n, parent, pos, window, sink)


@mutant(op="ragged_paged_attention_csr", clause="MD-23",
        description="kv_len from the CSR table as pages * page_size (kv_last_page_len ignored: last page full)")
class CsrLastPageTakenFull(Mutant):
    def ragged_paged_attention_csr(self, q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                                   **options):
        pages = np.diff(np.asarray(kv_indptr))
        full = np.where(pages > 0, np.asarray(k_pages).shape[1], 0).astype(I32)
        return reference.ragged_paged_attention_csr(q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, full,
                                                    **options)


@mutant(op="ragged_paged_attention_csr", clause="PA-24", only_caught_by="poison",
        description="masks slots past kv_last_page_len by multiplying with zero: NaN there leaks (0 * NaN)")
class CsrMaskedTailMultipliedByZero(Mutant):
    """Clean caches hold finite values in the unlisted tail of a last page, so 0 * value is 0 and every
    differential test passes; the poison property puts NaN there."""
    def ragged_paged_attention_csr(self, q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                                   **options):
        result = reference.ragged_paged_attention_csr(q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices,
                                                      kv_last_page_len, **options)
        indptr, indices, last = (np.asarray(a) for a in (kv_indptr, kv_indices, kv_last_page_len))
        qo = np.asarray(qo_indptr)
        for i in range(last.shape[0]):
            if indptr[i + 1] > indptr[i]:
                page = int(indices[indptr[i + 1] - 1])
                tail = np.asarray(v_pages[page, int(last[i]):], np.float64)
                result[qo[i]:qo[i + 1]] += 0.0 * tail.sum()
        return result


@mutant(op="append_slot_mapping", clause="MD-7",
        description="a sequence's page list staged in a 64-entry buffer: logical page p // P is read at "
                    "(p // P) % 64, so a new token past the 64th page is written into an earlier page's slot "
                    "(the reach columns cross 64 pages: long with 130-page sequences, range to reach int32 lengths)",
        only_caught_by="_reach", max_size=700)
class PageListStagedIn64(Mutant):
    def append_slot_mapping(self, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, page_size):
        reference.append_slot_mapping(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, page_size)   # MD-22
        qo, indptr, last = (np.asarray(a, np.int64) for a in (qo_indptr, kv_indptr, kv_last_page_len))
        indices = np.asarray(kv_indices, np.int64)
        pages = np.diff(indptr)
        kv_lens = np.where(pages > 0, (pages - 1) * page_size + last, 0)
        slots = [int(indices[indptr[i] + (p // page_size) % 64]) * page_size + p % page_size
                 for i in range(pages.shape[0]) for p in range(int(kv_lens[i] - (qo[i + 1] - qo[i])), int(kv_lens[i]))]
        return np.array(slots, I32)


@mutant(op="arena_layout", clause="MD-8",
        description="byte offsets and sizes kept in int32: an arena past 2 GiB wraps to negative offsets",
        only_caught_by="range")
class ArenaOffsetsInt32(Mutant):
    def arena_layout(self, nbytes, alignment, start=0):
        lay = reference.arena_layout(nbytes, alignment, start)
        wrap = [(np.asarray(v, np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31 for v in lay]
        return ArenaLayout(*wrap)
