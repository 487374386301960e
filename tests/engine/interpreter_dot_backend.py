"""A correct attention backend whose logits come from a Triton `tl.dot` on the query dtype (bfloat16 queries:
a bfloat16 dot with float32 accumulation, exact products, as on a GPU). Under TRITON_INTERPRET=1 its only
failures are the interpreter's bfloat16 dot (conformance/canary_triton.py): the platform canaries' test
(test_platform_canaries.py). Not part of the package."""
import torch
import triton
import triton.language as tl

from kvconform.adapters import sequence_kv, sequence_spans, to_numpy, to_torch
from kvconform.backends.base import Backend, OpClaims
from kvconform.reference.paged_attention import validate_ragged_paged_attention


@triton.jit
def _logits(q_ptr, k_ptr, s_ptr, M, N, D, BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    """s[h] = q[h] @ k[h]^T for one head h (program id): q [H, M, D], k [H, N, D], s [H, M, N] float32."""
    h = tl.program_id(0)
    m, n, d = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BD)
    q = tl.load(q_ptr + h * M * D + m[:, None] * D + d[None, :], mask=(m[:, None] < M) & (d[None, :] < D), other=0)
    k = tl.load(k_ptr + h * N * D + n[:, None] * D + d[None, :], mask=(n[:, None] < N) & (d[None, :] < D), other=0)
    s = tl.dot(q, tl.trans(k), input_precision="ieee")   # float32: no TF32 on GPUs
    tl.store(s_ptr + h * M * N + m[:, None] * N + n[None, :], s, mask=(m[:, None] < M) & (n[None, :] < N))


def _block(x: int) -> int:
    return max(16, triton.next_power_of_2(x))        # tl.dot needs every dimension >= 16


class InterpreterDot(Backend):
    name, version = "interpreter-dot", "1"

    def capabilities(self):
        return {"ragged_paged_attention": OpClaims(dtypes=("float32", "bfloat16"), kv_dtypes=("float32", "bfloat16"),
                                                   features=("gqa",), limits={"max_head_dim": 64})}

    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **options):
        call = validate_ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                                               **options)
        qt = to_torch(q)
        k, v = (to_torch(p, dtype=qt.dtype) for p in (call.k_pages, call.v_pages))
        out = torch.zeros(qt.shape, dtype=torch.float32)
        group = qt.shape[1] // k.shape[2]
        for seq in sequence_spans(cu_q_lens, kv_lens, page_indices, call.num_seqs, k.shape[1]):
            rows = qt[seq.rows].transpose(0, 1).contiguous()                          # [Hq, M, D]
            if rows.shape[1] == 0 or seq.kv_len == 0:
                continue
            keys, values = (sequence_kv(p, seq.pages, seq.kv_len).transpose(0, 1) for p in (k, v))
            keys = keys.repeat_interleave(group, 0).contiguous()                      # [Hq, N, D]
            m, n, d = rows.shape[1], seq.kv_len, rows.shape[2]
            s = torch.empty(rows.shape[0], m, n, dtype=torch.float32)
            _logits[(rows.shape[0],)](rows, keys, s, m, n, d, _block(m), _block(n), _block(d))
            pos = n - m + torch.arange(m)
            s = torch.where(torch.arange(n)[None, :] <= pos[:, None], s * call.sm_scale, float("-inf"))
            p = torch.softmax(s, dim=-1)
            o = p @ values.repeat_interleave(group, 0).float()
            out[seq.rows] = o.transpose(0, 1)
        return to_numpy(out)


def make_backend():
    return InterpreterDot()
