"""The launch policy of ragged paged attention (paged_attention.py's kernels): the dot dtype, which kernel
takes a sequence (decode or prefill), tile shapes and the split-KV rule, natively and under the
interpreter. Host-side Python only: no kernel here."""
from ._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


def attention_dot_dtype(q_dtype, kv_dtype, interpret: bool):
    """Operand dtype of Q.K^T. Casting K to a 16-bit q dtype is exact for 16-bit, fp8 and int8 caches
    (their values are all representable), so on GPUs the tensor-core path loses nothing; the
    interpreter always computes in float32 (same exact products)."""
    import torch
    if interpret or q_dtype not in (torch.float16, torch.bfloat16):
        return tl.float32
    if kv_dtype in (q_dtype, torch.float8_e4m3fn, torch.float8_e5m2, torch.int8):
        return tl.bfloat16 if q_dtype == torch.bfloat16 else tl.float16
    return tl.float32


#: Decode launch, from the H100 sweep of the decode kernel before its P.V product moved to the 16-bit dot
#: dtype (benchmarks/triton/sweep_attention.py, results/h100_sweep_attention.json; bf16, Hq 32, Hkv 8,
#: D 128, page 16): 64 x 4096 fastest with block_n 32 and no split (512 programs already fill the GPU);
#: 1 x 32768 with 32 splits of block_n 64 (0.36 of copy bandwidth against 0.18 with 64 splits). To be
#: swept again on a GPU (benchmarks/triton/native_check.sh with SWEEP=1).
DECODE_BLOCK_N = 32
SPLIT_BLOCK_N = 64
SPLIT_PROGRAMS_PER_SM = 2       # split until the decode grid holds about two programs per SM
NATIVE_SM_COUNT = 132           # an H100's SMs, when the device cannot be asked (launch_defaults' sm_count)
NATIVE_SPLIT_MIN_KEYS = 512     # keys per split below which the combine costs more than it saves
INTERPRET_SPLIT_KEYS = 128      # interpreter: small splits so the conformance cases reach the combine
#: Prefill launch (FlashAttention-2's usual Hopper shape; not yet swept on a GPU: sweep_attention.py's
#: prefill grid covers these and its neighbours): 128 rows per tile, 64 keys per tile for D <= 128 (32
#: above), 8 warps, 3 pipeline stages (2 above D 128, for shared memory).
PREFILL_TILE_ROWS = 128
#: Rows of a sequence up to which the interpreter's decode kernel takes it: 1-2 rows stay on the decode
#: kernel, 3 and more go to the prefill kernel, so the suite's small prefills (q_len 3-4, and 17 in the
#: `long` column) check the prefill kernel while decode tiles of several tokens stay checked too.
INTERPRET_DECODE_MAX_Q = 2
#: Interpreter prefill tiles: 32 rows (programs run one after another there, each costing about the same
#: whatever its size, so fewer, larger tiles run faster); 32 keys per tile.
INTERPRET_TILE_ROWS = 32


def split_threshold(interpret: bool) -> int:
    """Keys from which the decode kernel splits the KV range of its sequences (the backend's
    split_kv_min_keys claim): natively 2048, under the interpreter 256 so that small conformance cases
    reach split-KV."""
    return 256 if interpret else 2048


def decode_max_q(group: int, interpret: bool) -> int:
    """Dispatch rule: a sequence with at most this many query rows runs on the decode kernel, one with more
    on the prefill kernel. Natively: the tokens of one minimal decode tile (tl.dot's 16 rows hold
    16 // GROUP_PAD tokens of a GQA group, at least 1), i.e. decode and short speculative rows; under the
    interpreter INTERPRET_DECODE_MAX_Q."""
    if interpret:
        return INTERPRET_DECODE_MAX_Q
    return max(1, 16 // triton.next_power_of_2(group))


def launch_defaults(q_lens, kv_lens, num_kv_heads: int, group: int, head_dim: int, *, split_min_kv: int,
                    interpret: bool, sm_count: int | None = None) -> dict:
    """Launch keywords of `ragged_paged_attention` for one call, from the counted sequences' lengths
    (q_lens, kv_lens: int[num_seqs], host arrays).

    Dispatch: sequences of at most `decode_max_q` rows go to the decode kernel, the others to the prefill
    kernel; a kernel without sequences is not launched.
    Split rule (decode kernel): when its longest sequence has at least `split_min_kv` keys, split the KV
    range into S segments of equal block counts, S the smallest count that brings the decode grid
    (tiles x KV heads x S) to SPLIT_PROGRAMS_PER_SM programs per SM, capped so that each segment keeps at
    least NATIVE_SPLIT_MIN_KEYS keys; under the interpreter 2..16 segments of INTERPRET_SPLIT_KEYS keys,
    so that the split and combine code is what gets checked. Examples on an H100 (132 SMs), Hkv 8, group 4:
    64 x 4096 decode: 512 programs, no split; 1 x 32768: 8 programs, S = 32 (1024 keys each);
    1 x 4096: S = 8 (512 keys each).
    """
    import numpy as np
    q_lens = np.asarray(q_lens, dtype=np.int64)
    kv_lens = np.asarray(kv_lens, dtype=np.int64)
    group_pad = triton.next_power_of_2(group)
    min_rows = max(1, 16 // group_pad)              # tl.dot needs >= 16 rows per tile
    max_q = decode_max_q(group, interpret)
    decode = q_lens <= max_q
    launch = {"decode_max_q": max_q, "run_decode": bool(decode.any()), "run_prefill": bool((~decode).any()),
              "block_q": min_rows, "block_n": DECODE_BLOCK_N, "num_splits": 1}
    if interpret:
        launch.update(prefill_block_q=max(min_rows, INTERPRET_TILE_ROWS // group_pad), prefill_block_n=32)
    else:
        launch.update(prefill_block_q=max(min_rows, PREFILL_TILE_ROWS // group_pad),
                      prefill_block_n=64 if head_dim <= 128 else 32,
                      prefill_warps=8 if max(min_rows, PREFILL_TILE_ROWS // group_pad) * group_pad >= 128 else 4,
                      prefill_stages=3 if head_dim <= 128 else 2)
    longest = int(kv_lens[decode].max()) if decode.any() else 0
    if longest < split_min_kv or longest == 0:
        return launch
    if interpret:
        launch["num_splits"] = int(min(16, max(2, -(-longest // INTERPRET_SPLIT_KEYS))))
        return launch
    tiles = int(sum(-(-int(q) // min_rows) for q in q_lens[decode] if q > 0)) or 1
    programs = tiles * num_kv_heads
    target = SPLIT_PROGRAMS_PER_SM * (sm_count or NATIVE_SM_COUNT)
    splits = min(-(-target // programs), max(1, longest // NATIVE_SPLIT_MIN_KEYS))
    blocks = -(-longest // SPLIT_BLOCK_N)
    splits = -(-blocks // -(-blocks // max(1, splits)))         # equal block counts per segment
    if splits > 1:
        launch.update(num_splits=int(splits), block_n=SPLIT_BLOCK_N)
    return launch
