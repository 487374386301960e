"""Append slot mapping on the device (spec/metadata.md MD-7, MD-10), from separate arrays or a packed arena.

One kernel serves both ops. It takes a base pointer per array (qo_indptr, kv_indptr, kv_indices,
kv_last_page_len), an element offset per array read from device memory, and an element stride per array:
  separate arrays (`append_slot_mapping`): four tensors, offsets 0, their own strides;
  packed arena (`slot_mapping_from_arena`): the four base pointers are the same int32 view of the uint8
      arena, each offset is the array's byte offset / 4 (MD-10: offsets are multiples of 4), strides 1.
So the arena's arrays are read in place through one base pointer plus their offsets, never copied out,
and no byte outside the four arrays is read (MD-10).

One program per sequence i walks its q_len_i new tokens in blocks of BLOCK: token t sits at position
p = kv_len_i - q_len_i + t and its slot is kv_indices[kv_indptr[i] + p // P] * P + p % P (MD-7).
"""
from ._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

BLOCK = 64


@triton.jit
def _slot_mapping_kernel(qo_ptr, ip_ptr, idx_ptr, last_ptr, offs_ptr, out_ptr, page_size,
                         s_qo, s_ip, s_idx, s_last, BLOCK: tl.constexpr):
    """offs_ptr: int64[4] element offsets of the four arrays (ARENA_ORDER); out_ptr: int32[T]."""
    seq = tl.program_id(0)
    o_qo = tl.load(offs_ptr + 0)
    o_ip = tl.load(offs_ptr + 1)
    o_idx = tl.load(offs_ptr + 2)
    o_last = tl.load(offs_ptr + 3)
    q0 = tl.load(qo_ptr + o_qo + seq * s_qo)
    q_len = tl.load(qo_ptr + o_qo + (seq + 1) * s_qo) - q0
    first_page = tl.load(ip_ptr + o_ip + seq * s_ip)
    n_pages = tl.load(ip_ptr + o_ip + (seq + 1) * s_ip) - first_page
    last_len = tl.load(last_ptr + o_last + seq * s_last)
    kv_len = tl.where(n_pages > 0, (n_pages - 1) * page_size + last_len, 0)    # MD-3, MD-4
    for t0 in range(0, q_len, BLOCK):
        t = t0 + tl.arange(0, BLOCK)
        ok = t < q_len
        pos = kv_len - q_len + t                                                   # MD-7
        page = tl.load(idx_ptr + o_idx + (first_page + pos // page_size).to(tl.int64) * s_idx, mask=ok, other=0)
        slot = page.to(tl.int64) * page_size + pos % page_size
        tl.store(out_ptr + q0 + t, slot.to(tl.int32), mask=ok)


def _launch(arrays, offsets, strides, num_seqs: int, page_size: int, num_tokens: int):
    """Run the kernel: `arrays` the four base tensors (reference.metadata.ARENA_ORDER), `offsets` int64 tensor [4] of element
    offsets on their device, `strides` four element strides. Returns the slots, int32 tensor [num_tokens]."""
    import torch
    out = torch.zeros(num_tokens, dtype=torch.int32, device=offsets.device)
    if num_seqs == 0 or num_tokens == 0:
        return out
    _slot_mapping_kernel[(num_seqs,)](*arrays, offsets, out, page_size, *strides, BLOCK=BLOCK)
    return out


def append_slot_mapping(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, page_size: int, num_tokens: int):
    """MD-7 from four separate int32/int64 tensors (any stride, one device) -> int32 tensor [num_tokens]."""
    import torch
    # nnz = 0: every sequence is empty and has no new token (MD-4, MD-7), so kv_indices is never read;
    # a non-empty stand-in keeps the launch free of a zero-size pointer.
    arrays = (qo_indptr, kv_indptr, kv_indices if kv_indices.numel() else qo_indptr, kv_last_page_len)
    offsets = torch.zeros(4, dtype=torch.int64, device=qo_indptr.device)
    strides = tuple(a.stride(0) for a in arrays)
    return _launch(arrays, offsets, strides, kv_last_page_len.shape[0], page_size, num_tokens)


def slot_mapping_from_arena(arena_i32, byte_offsets, num_seqs: int, page_size: int, num_tokens: int):
    """MD-10: `arena_i32` the arena as an int32 tensor (its bytes, viewed), `byte_offsets` int64 tensor [4]
    on the same device (multiples of 4, checked by the caller) -> int32 tensor [num_tokens]."""
    return _launch((arena_i32,) * 4, byte_offsets // 4, (1, 1, 1, 1), num_seqs, page_size, num_tokens)
