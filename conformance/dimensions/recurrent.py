"""Dimensions of the recurrent ops (spec/recurrent.md): causal_conv1d_update, selective_state_update,
ssd_chunked_scan, rwkv6_wkv, the gated delta rule ops and recurrent_store_step.

Real ranges come from model configs (config.json field = value) and serving limits; the shared ones
(tokens, sequences per step) are sources.py's. Some arguments change form with the op's variant: Mamba1's
`dt [B, D]`, `D [D]` and `dt_bias [D]` run along channels where Mamba2's run along heads, so those axes are
declared under the wider of the two (channels), which bounds both. Axis references with `/r` apply only when
the argument has r axes (conv1d's `x` is `[B, C]` or `[B, T, C]`; a state is `[S, D, N]` or `[S, H, P, N]`).

Kinds (model.KINDS): rows, tokens, heads and dims of an output past T are left unwritten (a grid over the
first tile); state slots past T are read from the first tile (an offset that wraps at T), and slot ids are
narrowed to 16 bits (`ids`). A chunk-size hint carries no mutant: results must not depend on it (RS-18,
RS-33), so clipping it changes nothing a test may see; the kernel's own chunking is what the hand mutants
of mutants/recurrent*.py plant (a carry dropped past 8 / 64 tokens, a second 128-row block, zero decays in
a later chunk).
"""
from __future__ import annotations

from . import sources as src
from .model import Dimension

_GRID = "a grid past T leaves its rows unwritten; dropping them is the same output"
_SLOT = ("a slot id past T addresses the first tile of the pool (an offset wrapped at T); the same ids "
         "are narrowed to 16 bits")
_HINT = "a hint: results must not depend on it (RS-18, RS-33), so a hint clipped to T changes nothing comparable"

#: slot ids: state_indices is int32 (RS-2); serving stacks size the pool by memory, one state per KV-cache
#: block under prefix caching (vLLM mamba_cache_mode "all"), so a kernel may be handed any int32 slot id
SLOTS = (2 ** 31 - 1, "state_indices is int32 (spec RS-2; vLLM mamba_attn.py state_indices_tensor int32): "
                      "slot ids up to INT32_MAX")
#: decode rows of one step: vLLM's default max_num_seqs (sources.SEQUENCES)
ROWS = src.SEQUENCES
#: conv channels: Mamba-2 convolves x, B and C together: Mamba-Codestral-7B-v0.1 intermediate_size 8192 +
#: 2 x n_groups 8 x state_size 128 = 10240 channels
CHANNELS = (10240, "config.json of Mamba-Codestral-7B-v0.1: expand 2 x hidden_size 4096 + 2 x n_groups 8 x "
                   "state_size 128 = 10240 conv channels")
#: Mamba1's per-channel state rows: Falcon-Mamba-7B intermediate_size 8192
MAMBA1_CHANNELS = (8192, "config.json of falcon-mamba-7b: intermediate_size = 8192")
WIDTH = (4, "config.json of Mamba-Codestral-7B-v0.1 / falcon-mamba-7b: conv_kernel = 4; Qwen3-Next "
            "linear_conv_kernel_dim = 4")
SSM_HEADS = (128, "config.json of Mamba-Codestral-7B-v0.1: num_heads = 128")
SSM_HEAD_DIM = (64, "config.json of Mamba-Codestral-7B-v0.1: head_dim = 64 (state-spaces/mamba2-2.7b: "
                    "headdim 64)")
SSM_GROUPS = (8, "config.json of Mamba-Codestral-7B-v0.1: n_groups = 8")
#: d_state: Mamba-2 uses 128; ggml's CUDA ssm_scan has a 256 path (Falcon-H1)
STATE_SIZE = (256, "ggml@d99724f2 src/ggml-cuda/ssm-scan.cu L249-L278: Mamba-2 d_state 128 or 256 "
                   "(Falcon-H1); config.json of Mamba-Codestral-7B-v0.1: state_size 128")
CHUNK = (256, "config.json of Mamba-Codestral-7B-v0.1: chunk_size = 256 (mamba_ssm Mamba2 default)")
RWKV_HEADS = (64, "RWKV-6 World 7B (BlinkDL/rwkv-6-world): n_embd 4096 / head_size_a 64 = 64 heads")
RWKV_HEAD_SIZE = (64, "RWKV-6 (BlinkDL/rwkv-6-world): head_size_a = 64; ggml's CUDA wkv6 takes 64 only")
GDN_HEADS = (32, "config.json of Qwen3-Next-80B-A3B: linear_num_value_heads = 32 (Kimi-Linear: num_heads 32)")
GDN_QK_HEADS = (16, "config.json of Qwen3-Next-80B-A3B: linear_num_key_heads = 16")
#: key / value dims: Qwen3-Next uses 128; fla's GatedDeltaNet layer defaults to head_dim 256, the most its
#: chunked kernel takes (vLLM's copy fla/ops/chunk_delta_h.py asserts K <= 256)
GDN_KEY_DIM = (256, "fla-org/flash-linear-attention fla/layers/gated_deltanet.py: head_dim = 256 (default); "
                    "vLLM fla/ops/chunk_delta_h.py asserts K <= 256; config.json of Qwen3-Next-80B-A3B: "
                    "linear_key_head_dim = 128")
GDN_VALUE_DIM = (256, "fla-org/flash-linear-attention fla/layers/gated_deltanet.py: head_dim = 256 (default); "
                      "config.json of Qwen3-Next-80B-A3B: linear_value_head_dim = 128")
#: draft tokens per decode row (speculative decoding): vLLM's conv state holds W-1+num_spec columns
SPEC_TOKENS = (16, "vLLM speculative decoding (mamba_utils.py: conv state width W-1+num_spec): draft "
                   "lengths stay within one 16-token tile")
SNAPSHOTS = (16, "vLLM speculative decoding keeps one state per draft token (num_spec + 1; mamba_ssm.py "
                 "@007ad216 dst_state_batch_indices [B, 1 + num_spec])")
_BELOW = "its real range passes no tile of TILES (16 is the smallest)"


def _rows(axes: tuple[str, ...], out: tuple[str, ...]) -> Dimension:
    # not `cheap`: an interpreter runs one program per decode row (strategies/recurrent/reach.py ROWS_BUDGET)
    return Dimension("rows", axes, *ROWS, small_max=3, unwritten=out, why_kind=_GRID)


def _slots(pools: tuple[str, ...], ids: str = "state_indices") -> Dimension:
    return Dimension("slots", pools, *SLOTS, small_max=5, cheap=True, kind="first_tile", first_tile=pools,
                     ids=(ids,), why_kind=_SLOT)


def _packed(tokens: tuple[str, ...], pool: str) -> tuple[Dimension, ...]:
    """tokens, seq_len, sequences and slots of a varlen prefill op (RS-17)."""
    return (
        Dimension("tokens", tokens, *src.TOKENS, small_max=12, unwritten=("out[0]",), why_kind=_GRID),
        Dimension("seq_len", ("max(diff(cu_seqlens))",), *src.TOKENS, small_max=4,
                  no_mutant="a sequence's tokens are a slice of the packed tokens: the tokens mutants leave "
                            "those past T unwritten, and the kernel's chunk loop is planted by hand (chunk "
                            "carry past 8 / 64 tokens, mutants/recurrent*.py)"),
        # not `cheap`: an interpreter runs a program per sequence (1023 Triton SSD sequences: 306 s)
        Dimension("sequences", ("cu_seqlens[0]", "state_indices[0]", "has_initial_state[0]"), *src.SEQUENCES,
                  small_max=4, unwritten=("out[0]@cu_seqlens",),
                  why_kind="the tokens of the sequences past T are left unwritten (a grid over the first T "
                           "sequences)"),
        _slots((f"{pool}[0]",)),
    )


CONV = (
    _rows(("x[0]", "state_indices[0]"), ("out[0]",)),
    Dimension("tokens", ("x[1]/3",), *SPEC_TOKENS, small_max=3, no_mutant=_BELOW),
    Dimension("channels", ("x[1]/2", "x[2]/3", "conv_state[1]", "weight[0]", "bias[0]"), *CHANNELS,
              small_max=3, unwritten=("out[1]/2", "out[2]/3"), why_kind=_GRID),
    Dimension("width", ("weight[1]", "conv_state[2]"), 6, "vLLM causal_conv1d.py takes widths 2 ... 6; "
              + WIDTH[1], small_max=4, no_mutant=_BELOW),
    _slots(("conv_state[0]",)),
)

SSU = (
    _rows(("x[0]", "dt[0]", "B[0]", "C[0]", "z[0]", "state_indices[0]"), ("out[0]",)),
    _slots(("state[0]",)),
    # Mamba1 rows of the state are channels; Mamba2's dt, D, dt_bias run along heads (at most 128 <= 8192)
    Dimension("channels", ("state[1]/3", "x[1]/2", "z[1]/2", "dt[1]", "A[0]/2", "D[0]", "dt_bias[0]"),
              *MAMBA1_CHANNELS, small_max=4, unwritten=("out[1]/2",), why_kind=_GRID),
    Dimension("heads", ("state[1]/4", "x[1]/3", "z[1]/3", "A[0]/1"), *SSM_HEADS, small_max=6,
              unwritten=("out[1]/3",), why_kind=_GRID),
    Dimension("head_dim", ("state[2]/4", "x[2]/3", "z[2]/3"), *SSM_HEAD_DIM, small_max=2,
              unwritten=("out[2]/3",), why_kind=_GRID),
    Dimension("groups", ("B[1]/3", "C[1]/3"), *SSM_GROUPS, small_max=3, no_mutant=_BELOW),
    Dimension("state_size", ("state[2]/3", "state[3]/4", "A[1]/2", "B[1]/2", "C[1]/2", "B[2]/3", "C[2]/3"),
              *STATE_SIZE, small_max=3, unwritten=("state[2]/3", "state[3]/4"),
              why_kind="the state entries past T never written (the output reads them: wrong too)"),
)

SSD = _packed(("x[0]", "dt[0]", "B[0]", "C[0]", "z[0]"), "state") + (
    Dimension("heads", ("state[1]", "x[1]", "z[1]", "dt[1]", "A[0]", "D[0]", "dt_bias[0]"), *SSM_HEADS,
              small_max=6, unwritten=("out[1]",), why_kind=_GRID),
    Dimension("head_dim", ("state[2]", "x[2]", "z[2]"), *SSM_HEAD_DIM, small_max=2, unwritten=("out[2]",),
              why_kind=_GRID),
    Dimension("groups", ("B[1]", "C[1]"), *SSM_GROUPS, small_max=3, no_mutant=_BELOW),
    Dimension("state_size", ("state[3]", "B[2]", "C[2]"), *STATE_SIZE, small_max=3, unwritten=("state[3]",),
              why_kind="the state entries past T never written"),
    Dimension("chunk", ("chunk_size",), *CHUNK, small_max=64, no_mutant=_HINT),
    Dimension("snapshots", ("num_snapshots",), *SNAPSHOTS, small_max=3, no_mutant=_BELOW),
)

RWKV = _packed(("r[0]", "k[0]", "v[0]", "w[0]"), "state") + (
    Dimension("heads", ("state[1]", "r[1]", "k[1]", "v[1]", "w[1]", "u[0]"), *RWKV_HEADS, small_max=2,
              unwritten=("out[1]",), why_kind=_GRID),
    Dimension("key_dim", ("state[2]", "r[2]", "k[2]", "w[2]", "u[1]"), *RWKV_HEAD_SIZE, small_max=3,
              unwritten=("state[2]",), why_kind="the state rows of keys past T never written (the output "
                                                  "reads them: wrong too)"),
    Dimension("value_dim", ("state[3]", "v[2]"), *RWKV_HEAD_SIZE, small_max=3, unwritten=("out[2]",),
              why_kind=_GRID),
)


def _gdn_dims(rows: tuple[Dimension, ...]) -> tuple[Dimension, ...]:
    return rows + (
        Dimension("heads", ("state[1]", "v[1]", "g[1]", "beta[1]"), *GDN_HEADS, small_max=4,
                  unwritten=("out[1]",), why_kind=_GRID),
        Dimension("qk_heads", ("q[1]", "k[1]"), *GDN_QK_HEADS, small_max=2, no_mutant=_BELOW),
        Dimension("key_dim", ("state[2]", "q[2]", "k[2]"), *GDN_KEY_DIM, small_max=3, unwritten=("state[2]",),
                  why_kind="the state rows of keys past T never written (the output reads them: wrong too)"),
        Dimension("value_dim", ("state[3]", "v[2]"), *GDN_VALUE_DIM, small_max=3, unwritten=("out[2]",),
                  why_kind=_GRID),
    )


GDN_UPDATE = _gdn_dims((_rows(("q[0]", "k[0]", "v[0]", "g[0]", "beta[0]", "state_indices[0]"), ("out[0]",)),
                        _slots(("state[0]",))))
GDN_CHUNKED = _gdn_dims(_packed(("q[0]", "k[0]", "v[0]", "g[0]", "beta[0]"), "state")) + (
    Dimension("chunk", ("chunk_size",), *CHUNK, small_max=64, no_mutant=_HINT + " (fla's chunked kernel "
              "uses 64-token chunks whatever it is given)"),
)

STORE = (
    Dimension("sequences", ("seq_slot[0]", "seq_pos[0]", "seq_ids[0]", "num_tokens[0]", "max(seq_ids)"),
              *src.SEQUENCES,
              small_max=6, cheap=True, no_mutant="sequence ids index the metadata, moved whole: the slots "
                                                 "mutants cover the rows they address"),
    Dimension("slots", ("conv_pool[0]", "ssm_pool[0]", "max(seq_slot)"), *SLOTS, small_max=4, cheap=True,
              unwritten=("conv_pool[0]", "ssm_pool[0]"), ids=("seq_slot",),
              why_kind="the rows of slots past T never moved (a copy loop over the first tile of the pool)"),
    Dimension("channels", ("conv_pool[1]", "saved_conv[0]", "snapshots_conv[1]"), *CHANNELS, small_max=2,
              unwritten=("conv_pool[1]",), why_kind="the channels past T of a moved row never copied"),
    Dimension("width", ("conv_pool[2]", "saved_conv[1]", "snapshots_conv[2]"), 5,
              "W-1 of vLLM's widest conv (widths 2 ... 6, causal_conv1d.py)", small_max=3, no_mutant=_BELOW),
    Dimension("ssm_row", ("ssm_pool[1]", "ssm_pool[2]", "ssm_pool[3]", "saved_ssm[0]", "saved_ssm[1]",
                          "saved_ssm[2]", "snapshots_ssm[1]", "snapshots_ssm[2]", "snapshots_ssm[3]"),
              *MAMBA1_CHANNELS, small_max=2, unwritten=("ssm_pool[1]",),
              why_kind="an SSM row's leading axis past T never copied (channels of Mamba1, heads of Mamba2; "
                       "its other axes, head dim and d_state, are at most 256 and bounded here by 8192)"),
    Dimension("snapshots", ("snapshots_conv[0]", "snapshots_ssm[0]"), *SNAPSHOTS, small_max=5,
              no_mutant=_BELOW),
)

REGISTRY = {
    "causal_conv1d_update": CONV,
    "selective_state_update": SSU,
    "ssd_chunked_scan": SSD,
    "rwkv6_wkv": RWKV,
    "gated_delta_rule_update": GDN_UPDATE,
    "gated_delta_rule_chunked": GDN_CHUNKED,
    "recurrent_store_step": STORE,
}
