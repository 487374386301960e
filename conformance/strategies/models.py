"""The `models` profile's cases: the shapes of real models, in realistic batches (conformance/models_suite/).

The ci profile draws small shapes; a kernel that is right there can still be wrong at the head counts,
head dims, GQA groups, windows, caps, sinks and state sizes real models use, or in a batch that mixes
decode rows over thousands of keys with a prefill chunk. Each `ModelCase` is one call of one op at one
model's dimensions, built from a fixed seed (the same case on every run), judged against the reference
with the op's own checks (CHECKS, spec/numerics.md), like any drawn case. Activations and KV pages are
bfloat16 (what the models serve in), recurrent state pools float32; one case stores Llama's KV cache as
float8_e4m3fn with per-tensor scales (vLLM's `--kv-cache-dtype fp8`).

Batches: attention and its KV write take four decode rows at 1024 .. 8192 keys plus one 256-token prefill
chunk after 256 cached tokens (a chunked prefill); MLA takes DeepSeek-V3's decode rows, once with one
row per sequence and once with two (its multi-token-prediction draft, `num_nextn_predict_layers` 1);
the one-token recurrent updates take eight decode rows on slots spread over the pool, the chunked scans
a 512-token prefill from a fresh state, a 256-token chunk continuing from a stored state and (RWKV-6)
decode rows of one token. Fewer rows than a serving batch, never smaller heads: the profile stays a few
minutes on the numpy backend on 2 cores (docs/performance.md).

The model dimensions come from each model's Hugging Face config.json (`ModelConfig.fields` cites them;
`kvconform list --profile models` prints the table):

- Llama-3.1 8B / 70B: num_attention_heads 32 / 64, num_key_value_heads 8, head_dim 128 (hidden_size /
  num_attention_heads = 4096 / 32, 8192 / 64).
- Qwen3-30B-A3B / Qwen3-235B-A22B: num_attention_heads 32 / 64, num_key_value_heads 4, head_dim 128
  (GQA groups of 8 and 16).
- Mistral-7B-v0.1: num_attention_heads 32, num_key_value_heads 8, head_dim 128, sliding_window 4096.
- Gemma-2 9B: num_attention_heads 16, num_key_value_heads 8, head_dim 256, sliding_window 4096 on its
  local layers (every other layer; the others are global), attn_logit_softcapping 50.0,
  query_pre_attn_scalar 256 (sm_scale = 256^-0.5). Its final_logit_softcapping 30.0 caps the LM head's
  logits, not attention's, so no op here applies it.
- gpt-oss-120b: num_attention_heads 64, num_key_value_heads 8, head_dim 64, sliding_window 128 on every
  other layer (`layer_types` alternates sliding_attention and full_attention), a learned sink logit per
  query head on every layer.
- DeepSeek-V3: num_attention_heads 128, kv_lora_rank 512 (d_c), qk_rope_head_dim 64 (d_r),
  qk_nope_head_dim 128, rope_scaling yarn with factor 40, mscale_all_dim 1.0: softmax scale
  (qk_nope_head_dim + qk_rope_head_dim)^-0.5 * mscale^2 with mscale = 0.1 * ln(40) + 1; the latent cache
  in pages of 64 tokens (FlashMLA's block size).
- Qwen3-Next-80B-A3B: linear_num_key_heads 16, linear_num_value_heads 32, linear_key_head_dim 128,
  linear_value_head_dim 128, linear_conv_kernel_dim 4 (the gated delta rule's conv over q, k and v:
  2 * 16 * 128 + 32 * 128 = 8192 channels).
- Mamba-2 2.7B: d_model 2560, expand 2, headdim 64, d_state 128, ngroups 1, d_conv 4, chunk_size 256
  (80 heads of 64 channels; conv over x, B and C: 5120 + 2 * 128 = 5376 channels).
- RWKV-6 (Finch 7B): hidden_size 4096, head_size 64 (64 heads).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvconform.reference import dtypes

from kvconform.conformance.engine.case import Case
from kvconform.conformance.strategies.scale import page_table, spread_slots
from kvconform.conformance.strategies.values import floats

#: tokens per KV page (vLLM's default block size) and DeepSeek's latent pages (FlashMLA)
PAGE_SIZE = 16
MLA_PAGE_SIZE = 64
#: attention batches: four decode rows over 1k .. 8k keys and one 256-token prefill chunk after 256 cached
MIX_Q_LENS = (1, 1, 1, 1, 256)
MIX_KV_LENS = (1024, 2048, 4096, 8192, 512)
#: the fp8 KV cache's per-tensor scales (float32-exact, never 1 so an ignored scale shows)
FP8_SCALES = (0.0390625, 0.5)
DECODE_ROWS = 8


@dataclass(frozen=True)
class ModelConfig:
    """A model the profile takes its dimensions from: `source` names its config.json, `fields` the values
    read from it (field, value)."""
    name: str
    source: str
    fields: tuple[tuple[str, Any], ...]

    def get(self, key: str):
        return dict(self.fields)[key]


LLAMA_8B = ModelConfig("llama-3.1-8b", "meta-llama/Llama-3.1-8B config.json",
                       (("num_attention_heads", 32), ("num_key_value_heads", 8), ("hidden_size", 4096)))
LLAMA_70B = ModelConfig("llama-3.1-70b", "meta-llama/Llama-3.1-70B config.json",
                        (("num_attention_heads", 64), ("num_key_value_heads", 8), ("hidden_size", 8192)))
QWEN3_30B = ModelConfig("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B config.json",
                        (("num_attention_heads", 32), ("num_key_value_heads", 4), ("head_dim", 128)))
QWEN3_235B = ModelConfig("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B config.json",
                         (("num_attention_heads", 64), ("num_key_value_heads", 4), ("head_dim", 128)))
MISTRAL_7B = ModelConfig("mistral-7b", "mistralai/Mistral-7B-v0.1 config.json",
                         (("num_attention_heads", 32), ("num_key_value_heads", 8), ("hidden_size", 4096),
                          ("sliding_window", 4096)))
GEMMA2_9B = ModelConfig("gemma-2-9b", "google/gemma-2-9b config.json",
                        (("num_attention_heads", 16), ("num_key_value_heads", 8), ("head_dim", 256),
                         ("sliding_window", 4096), ("attn_logit_softcapping", 50.0),
                         ("query_pre_attn_scalar", 256)))
GPT_OSS_120B = ModelConfig("gpt-oss-120b", "openai/gpt-oss-120b config.json",
                           (("num_attention_heads", 64), ("num_key_value_heads", 8), ("head_dim", 64),
                            ("sliding_window", 128)))
DEEPSEEK_V3 = ModelConfig("deepseek-v3", "deepseek-ai/DeepSeek-V3 config.json",
                          (("num_attention_heads", 128), ("kv_lora_rank", 512), ("qk_rope_head_dim", 64),
                           ("qk_nope_head_dim", 128), ("rope_scaling.factor", 40),
                           ("rope_scaling.mscale_all_dim", 1.0), ("num_nextn_predict_layers", 1)))
QWEN3_NEXT = ModelConfig("qwen3-next-80b-a3b", "Qwen/Qwen3-Next-80B-A3B-Instruct config.json",
                         (("linear_num_key_heads", 16), ("linear_num_value_heads", 32), ("linear_key_head_dim", 128),
                          ("linear_value_head_dim", 128), ("linear_conv_kernel_dim", 4)))
MAMBA2_2_7B = ModelConfig("mamba-2-2.7b", "state-spaces/mamba2-2.7b config.json (Mamba2 layer defaults)",
                          (("d_model", 2560), ("expand", 2), ("headdim", 64), ("d_state", 128), ("ngroups", 1),
                           ("d_conv", 4), ("chunk_size", 256)))
RWKV6_7B = ModelConfig("rwkv-6-7b", "RWKV/v6-Finch-7B-HF config.json",
                       (("hidden_size", 4096), ("head_size", 64)))


def _head_dim(model: ModelConfig) -> int:
    fields = dict(model.fields)
    return fields.get("head_dim") or fields["hidden_size"] // fields["num_attention_heads"]


def deepseek_sm_scale(model: ModelConfig = DEEPSEEK_V3) -> float:
    """DeepSeek-V3's softmax scale: (qk_nope + qk_rope)^-0.5 times the YaRN mscale squared."""
    mscale = 0.1 * model.get("rope_scaling.mscale_all_dim") * math.log(model.get("rope_scaling.factor")) + 1.0
    return (model.get("qk_nope_head_dim") + model.get("qk_rope_head_dim")) ** -0.5 * mscale * mscale


@dataclass(frozen=True)
class ModelCase:
    """One call of `op` at `model`'s dimensions: `batch` names the mix, `dims` the op's dimensions and
    options, `features` the claims it needs, `seed` its values."""
    model: ModelConfig
    op: str
    batch: str
    dims: dict = field(compare=False, hash=False)
    features: tuple[str, ...] = ()
    seed: int = 0

    def __str__(self) -> str:
        return f"{self.model.name}-{self.batch}"

    def shape(self) -> str:
        """The case in words, for `kvconform list --profile models`."""
        d = self.dims
        return ", ".join(f"{k}={_words(v)}" for k, v in d.items())


def _words(value) -> str:
    if isinstance(value, (tuple, list)):
        return "[" + ",".join(str(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _attention(model: ModelConfig, batch: str, seed: int, *, kv_dtype="bfloat16", **options) -> ModelCase:
    dims = dict(hq=model.get("num_attention_heads"), hkv=model.get("num_key_value_heads"), d=_head_dim(model),
                page_size=PAGE_SIZE, q_lens=MIX_Q_LENS, kv_lens=MIX_KV_LENS, dtype="bfloat16", kv_dtype=kv_dtype,
                **options)
    features = tuple(f for f, on in (("sliding_window", "sliding_window" in options),
                                     ("soft_cap", "soft_cap" in options), ("sinks", options.get("sinks")),
                                     ("quantized_kv", kv_dtype != "bfloat16"),
                                     ("gqa", dims["hq"] > dims["hkv"])) if on)
    return ModelCase(model, "ragged_paged_attention", batch, dims, features, seed)


def _write(model: ModelConfig, batch: str, seed: int, *, kv_dtype="bfloat16") -> ModelCase:
    dims = dict(hkv=model.get("num_key_value_heads"), d=_head_dim(model), page_size=PAGE_SIZE, q_lens=MIX_Q_LENS,
                kv_lens=MIX_KV_LENS, dtype="bfloat16", kv_dtype=kv_dtype)
    return ModelCase(model, "write_kv", batch, dims, ("quantized_kv",) if kv_dtype != "bfloat16" else (), seed)


_GEMMA = dict(soft_cap=GEMMA2_9B.get("attn_logit_softcapping"), sm_scale=GEMMA2_9B.get("query_pre_attn_scalar") ** -0.5)

ATTENTION = (
    _attention(LLAMA_8B, "mix", 1),
    _attention(LLAMA_8B, "mix-fp8-kv", 2, kv_dtype="float8_e4m3fn"),
    _attention(LLAMA_70B, "mix", 3),
    _attention(QWEN3_30B, "mix", 4),
    _attention(QWEN3_235B, "mix", 5),
    _attention(MISTRAL_7B, "mix", 6, sliding_window=MISTRAL_7B.get("sliding_window")),
    _attention(GEMMA2_9B, "local-mix", 7, sliding_window=GEMMA2_9B.get("sliding_window"), **_GEMMA),
    _attention(GEMMA2_9B, "global-mix", 8, **_GEMMA),
    _attention(GPT_OSS_120B, "sliding-mix", 9, sliding_window=GPT_OSS_120B.get("sliding_window"), sinks=True),
    _attention(GPT_OSS_120B, "full-mix", 10, sinks=True),
)
WRITE_KV = (
    _write(LLAMA_8B, "mix", 11),
    _write(LLAMA_8B, "mix-fp8-kv", 12, kv_dtype="float8_e4m3fn"),
    _write(QWEN3_235B, "mix", 13),
    _write(GEMMA2_9B, "mix", 14),
    _write(GPT_OSS_120B, "mix", 15),
)
_MLA_DIMS = dict(hq=DEEPSEEK_V3.get("num_attention_heads"), d_c=DEEPSEEK_V3.get("kv_lora_rank"),
                 d_r=DEEPSEEK_V3.get("qk_rope_head_dim"), page_size=MLA_PAGE_SIZE, dtype="bfloat16",
                 sm_scale=deepseek_sm_scale())
MLA = (
    ModelCase(DEEPSEEK_V3, "mla_paged_attention", "decode", dict(_MLA_DIMS, q_lens=(1, 1, 1, 1),
                                                                  kv_lens=(1024, 2048, 4096, 8192)), (), 21),
    ModelCase(DEEPSEEK_V3, "mla_paged_attention", "decode-mtp", dict(_MLA_DIMS, q_lens=(2, 2, 2, 2),
                                                                      kv_lens=(1025, 2049, 3000, 4097)), (), 22),
)
_GDN = dict(hk=QWEN3_NEXT.get("linear_num_key_heads"), hv=QWEN3_NEXT.get("linear_num_value_heads"),
            k=QWEN3_NEXT.get("linear_key_head_dim"), v=QWEN3_NEXT.get("linear_value_head_dim"), dtype="bfloat16",
            state_dtype="float32")
_MAMBA = dict(h=MAMBA2_2_7B.get("d_model") * MAMBA2_2_7B.get("expand") // MAMBA2_2_7B.get("headdim"),
              p=MAMBA2_2_7B.get("headdim"), n=MAMBA2_2_7B.get("d_state"), g=MAMBA2_2_7B.get("ngroups"),
              dtype="bfloat16", state_dtype="float32")
_PREFILL = dict(seq_lens=(512, 256), fresh=(True, False))
RECURRENT = (
    ModelCase(QWEN3_NEXT, "gated_delta_rule_update", "decode", dict(_GDN, rows=DECODE_ROWS),
              ("state_indices", "qk_l2norm"), 31),
    ModelCase(QWEN3_NEXT, "gated_delta_rule_chunked", "prefill", dict(_GDN, chunk_size=64, **_PREFILL),
              ("state_indices", "initial_states", "qk_l2norm"), 32),
    ModelCase(QWEN3_NEXT, "causal_conv1d_update", "decode",
              dict(channels=2 * _GDN["hk"] * _GDN["k"] + _GDN["hv"] * _GDN["v"],
                   width=QWEN3_NEXT.get("linear_conv_kernel_dim"), rows=DECODE_ROWS, bias=False, dtype="bfloat16",
                   state_dtype="float32"), ("state_indices", "silu"), 33),
    ModelCase(MAMBA2_2_7B, "selective_state_update", "decode", dict(_MAMBA, rows=DECODE_ROWS),
              ("state_indices", "mamba2", "dt_bias", "dt_softplus", "skip_d"), 41),
    ModelCase(MAMBA2_2_7B, "ssd_chunked_scan", "prefill",
              dict(_MAMBA, chunk_size=MAMBA2_2_7B.get("chunk_size"), **_PREFILL),
              ("state_indices", "initial_states", "dt_bias", "dt_softplus", "skip_d"), 42),
    ModelCase(MAMBA2_2_7B, "causal_conv1d_update", "decode",
              dict(channels=_MAMBA["h"] * _MAMBA["p"] + 2 * _MAMBA["g"] * _MAMBA["n"],
                   width=MAMBA2_2_7B.get("d_conv"), rows=DECODE_ROWS, bias=True, dtype="bfloat16",
                   state_dtype="float32"), ("state_indices", "bias", "silu"), 43),
    ModelCase(RWKV6_7B, "rwkv6_wkv", "prefill-decode",
              dict(h=RWKV6_7B.get("hidden_size") // RWKV6_7B.get("head_size"), k=RWKV6_7B.get("head_size"),
                   v=RWKV6_7B.get("head_size"), seq_lens=(512, 1, 1, 1, 1), fresh=(True, False, False, False, False),
                   dtype="bfloat16", state_dtype="float32"), ("state_indices", "initial_states"), 51),
)
CASES = ATTENTION + WRITE_KV + MLA + RECURRENT
#: the ops the profile checks (its NOT CHECKED gate, conformance/profiles.py)
OPS = tuple(dict.fromkeys(c.op for c in CASES))


def of_op(op: str) -> tuple[ModelCase, ...]:
    return tuple(c for c in CASES if c.op == op)


def table() -> list[str]:
    """`kvconform list --profile models`: one line per case (model, op, shape), then the sources."""
    rows = [("model", "op", "batch", "shape")]
    rows += [(c.model.name, c.op, c.batch, c.shape()) for c in CASES]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]
    lines.append("")
    lines.append("sources (Hugging Face config.json fields):")
    for model in dict.fromkeys(c.model for c in CASES):
        lines.append(f"  {model.name}: {model.source}: " + ", ".join(f"{k} {v}" for k, v in model.fields))
    return lines


# --- builders ------------------------------------------------------------------------------------------

def build(mc: ModelCase) -> Case:
    """The case of `mc`, the same on every run (its seed)."""
    return _BUILDERS[mc.op](mc, np.random.default_rng(mc.seed))


def _params(mc: ModelCase, **extra) -> dict:
    """The case's params: the model and batch, its dims (a recurrent state pool's dtype as `kv_dtype`, the
    name the claims judge it by) and `extra`."""
    dims = {("kv_dtype" if k == "state_dtype" else k): (list(v) if isinstance(v, tuple) else v)
            for k, v in mc.dims.items()}
    return dict(model=mc.model.name, batch=mc.batch, **dims, **extra)


def _activations(rng, shape, dtype: str) -> np.ndarray:
    """Standard normal values rounded to `dtype` (normalized activations: q . k / sqrt(D) of order one),
    generated in float32 (a 16k-token pool in well under a second); float8 pools draw every finite value of
    the format (values.floats), as stored data scaled by a per-tensor scale."""
    if dtypes.is_quantized_dtype(dtypes.resolve_dtype(dtype)):
        return floats(rng, shape, dtype)
    return rng.standard_normal(shape, dtype=np.float32).astype(dtypes.resolve_dtype(dtype))


def _attention_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    table, num_pages = page_table(rng, d["kv_lens"], d["page_size"])
    pool_shape = (num_pages, d["page_size"], d["hkv"], d["d"])
    k_pages, v_pages = (_activations(rng, pool_shape, d["kv_dtype"]) for _ in range(2))
    cu = np.concatenate([[0], np.cumsum(d["q_lens"])]).astype(np.int32)
    inputs = dict(q=_activations(rng, (int(cu[-1]), d["hq"], d["d"]), d["dtype"]), k_pages=k_pages, v_pages=v_pages,
                  kv_lens=np.asarray(d["kv_lens"], np.int32), page_indices=table, cu_q_lens=cu,
                  num_seqs=len(d["kv_lens"]))
    for name in ("sm_scale", "sliding_window", "soft_cap"):
        if d.get(name) is not None:
            inputs[name] = d[name]
    if d.get("sinks"):
        inputs["sinks"] = (rng.standard_normal(d["hq"]) * 2).astype(np.float32)
    if dtypes.is_quantized_dtype(dtypes.resolve_dtype(d["kv_dtype"])):
        inputs["k_scale"], inputs["v_scale"] = FP8_SCALES
    return Case(mc.op, inputs, _params(mc, head_dim=d["d"], num_seqs=len(d["kv_lens"]), num_pages=num_pages), mc.seed)


def _write_case(mc: ModelCase, rng) -> Case:
    """The new tokens of the attention batch (the last q_len positions of each sequence) written to their
    slots of the sequence's pages."""
    d = mc.dims
    table, num_pages = page_table(rng, d["kv_lens"], d["page_size"])
    slots = []
    for i, (q_len, kv_len) in enumerate(zip(d["q_lens"], d["kv_lens"])):
        pos = np.arange(kv_len - q_len, kv_len)
        slots.append(table[i, pos // d["page_size"]] * d["page_size"] + pos % d["page_size"])
    slot_mapping = np.concatenate(slots).astype(np.int32)
    pool_shape = (num_pages, d["page_size"], d["hkv"], d["d"])
    k_pages, v_pages = (_activations(rng, pool_shape, d["kv_dtype"]) for _ in range(2))
    k, v = (_activations(rng, (slot_mapping.size, d["hkv"], d["d"]), d["dtype"]) for _ in range(2))
    inputs = dict(k_pages=k_pages, v_pages=v_pages, k=k, v=v, slot_mapping=slot_mapping)
    if dtypes.is_quantized_dtype(dtypes.resolve_dtype(d["kv_dtype"])):
        inputs["k_scale"], inputs["v_scale"] = FP8_SCALES
    return Case(mc.op, inputs, _params(mc, head_dim=d["d"], tokens=int(slot_mapping.size), num_pages=num_pages),
                mc.seed)


def _mla_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    table, num_pages = page_table(rng, d["kv_lens"], d["page_size"])
    cu = np.concatenate([[0], np.cumsum(d["q_lens"])]).astype(np.int32)
    T = int(cu[-1])
    inputs = dict(q_nope=_activations(rng, (T, d["hq"], d["d_c"]), d["dtype"]),
                  q_pe=_activations(rng, (T, d["hq"], d["d_r"]), d["dtype"]),
                  c_kv_pages=_activations(rng, (num_pages, d["page_size"], d["d_c"]), d["dtype"]),
                  k_pe_pages=_activations(rng, (num_pages, d["page_size"], d["d_r"]), d["dtype"]),
                  kv_lens=np.asarray(d["kv_lens"], np.int32), page_indices=table, cu_q_lens=cu,
                  num_seqs=len(d["kv_lens"]), sm_scale=d["sm_scale"])
    return Case(mc.op, inputs, _params(mc, head_dim=d["d_c"], kv_dtype=d["dtype"], num_seqs=len(d["kv_lens"]),
                                       num_pages=num_pages), mc.seed)


def _slots(rng, rows: int) -> tuple[np.ndarray, int]:
    """Slots of `rows` rows spread over a pool of rows + 8 (the last slot among them)."""
    num_slots = rows + 8
    return spread_slots(rng, num_slots, rows, rows), num_slots


def _decays(rng, shape, lo: float, hi: float) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape)


def _gdn_update_case(mc: ModelCase, rng) -> Case:
    """Qwen3-Next's decode step: L2-normalised q, k (use_qk_l2norm), log gates g = -exp(A_log) * softplus(.)
    of a few tenths, betas sigmoid(.) in (0, 1)."""
    d = mc.dims
    idx, num_slots = _slots(rng, d["rows"])
    B = d["rows"]
    inputs = dict(q=_activations(rng, (B, d["hk"], d["k"]), d["dtype"]),
                  k=_activations(rng, (B, d["hk"], d["k"]), d["dtype"]),
                  v=_activations(rng, (B, d["hv"], d["v"]), d["dtype"]),
                  g=(-_decays(rng, (B, d["hv"]), 0.01, 1.0)).astype(dtypes.resolve_dtype(d["dtype"])),
                  beta=_decays(rng, (B, d["hv"]), 0.05, 0.95).astype(dtypes.resolve_dtype(d["dtype"])),
                  state=_activations(rng, (num_slots, d["hv"], d["k"], d["v"]), d["state_dtype"]),
                  use_qk_l2norm=True, state_indices=idx)
    return Case(mc.op, inputs, _params(mc, num_seqs=B, tokens=B, num_slots=num_slots), mc.seed)


def _varlen(rng, d: dict):
    """cu_seqlens, state_indices, has_initial_state, pool rows of the chunked cases."""
    lens = d["seq_lens"]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    idx, num_slots = _slots(rng, len(lens))
    return cu, idx, np.asarray([not f for f in d["fresh"]], dtype=bool), num_slots


def _gdn_chunked_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    cu, idx, has_initial, num_slots = _varlen(rng, d)
    T = int(cu[-1])
    act = dtypes.resolve_dtype(d["dtype"])
    inputs = dict(q=_activations(rng, (T, d["hk"], d["k"]), d["dtype"]),
                  k=_activations(rng, (T, d["hk"], d["k"]), d["dtype"]),
                  v=_activations(rng, (T, d["hv"], d["v"]), d["dtype"]),
                  g=(-_decays(rng, (T, d["hv"]), 0.01, 1.0)).astype(act),
                  beta=_decays(rng, (T, d["hv"]), 0.05, 0.95).astype(act),
                  state=_activations(rng, (num_slots, d["hv"], d["k"], d["v"]), d["state_dtype"]),
                  cu_seqlens=cu, chunk_size=d["chunk_size"], use_qk_l2norm=True, state_indices=idx,
                  has_initial_state=has_initial)
    return Case(mc.op, inputs, _params(mc, num_seqs=len(d["seq_lens"]), tokens=T, num_slots=num_slots), mc.seed)


def _conv_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    idx, num_slots = _slots(rng, d["rows"])
    inputs = dict(x=_activations(rng, (d["rows"], d["channels"]), d["dtype"]),
                  conv_state=_activations(rng, (num_slots, d["channels"], d["width"] - 1), d["state_dtype"]),
                  weight=_activations(rng, (d["channels"], d["width"]), d["dtype"]), activation="silu",
                  state_indices=idx)
    if d["bias"]:
        inputs["bias"] = _activations(rng, (d["channels"],), d["dtype"])
    return Case(mc.op, inputs, _params(mc, num_seqs=d["rows"], tokens=d["rows"], num_slots=num_slots), mc.seed)


def _mamba_heads(rng, d: dict) -> dict:
    """Mamba-2's per-head parameters: A = -exp(A_log) in [-16, -1] (A_init_range (1, 16)), dt_bias
    softplus^-1 of dt in [0.001, 0.1] (dt_min, dt_max), D."""
    act = dtypes.resolve_dtype(d["dtype"])
    dt = rng.uniform(0.001, 0.1, size=d["h"])
    return dict(A=(-rng.uniform(1.0, 16.0, size=d["h"])).astype(act), D=_activations(rng, (d["h"],), d["dtype"]),
                dt_bias=np.log(np.expm1(dt)).astype(act))


def _ssu_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    idx, num_slots = _slots(rng, d["rows"])
    B = d["rows"]
    inputs = dict(state=_activations(rng, (num_slots, d["h"], d["p"], d["n"]), d["state_dtype"]),
                  x=_activations(rng, (B, d["h"], d["p"]), d["dtype"]),
                  dt=(rng.standard_normal((B, d["h"])) * 0.5).astype(dtypes.resolve_dtype(d["dtype"])),
                  B=_activations(rng, (B, d["g"], d["n"]), d["dtype"]), C=_activations(rng, (B, d["g"], d["n"]), d["dtype"]),
                  dt_softplus=True, state_indices=idx, **_mamba_heads(rng, d))
    return Case(mc.op, inputs, _params(mc, num_seqs=B, tokens=B, num_slots=num_slots, mamba2=True), mc.seed)


def _ssd_case(mc: ModelCase, rng) -> Case:
    d = mc.dims
    cu, idx, has_initial, num_slots = _varlen(rng, d)
    T = int(cu[-1])
    inputs = dict(state=_activations(rng, (num_slots, d["h"], d["p"], d["n"]), d["state_dtype"]),
                  x=_activations(rng, (T, d["h"], d["p"]), d["dtype"]),
                  dt=(rng.standard_normal((T, d["h"])) * 0.5).astype(dtypes.resolve_dtype(d["dtype"])),
                  B=_activations(rng, (T, d["g"], d["n"]), d["dtype"]), C=_activations(rng, (T, d["g"], d["n"]), d["dtype"]),
                  cu_seqlens=cu, chunk_size=d["chunk_size"], state_indices=idx, has_initial_state=has_initial,
                  dt_softplus=True, **_mamba_heads(rng, d))
    return Case(mc.op, inputs, _params(mc, num_seqs=len(d["seq_lens"]), tokens=T, num_slots=num_slots), mc.seed)


def _rwkv_case(mc: ModelCase, rng) -> Case:
    """RWKV-6 time mixing: decays w = exp(-exp(x)) of a trained model's spread (w in (0.4, 0.9999))."""
    d = mc.dims
    cu, idx, has_initial, num_slots = _varlen(rng, d)
    T = int(cu[-1])
    act = dtypes.resolve_dtype(d["dtype"])
    inputs = dict(r=_activations(rng, (T, d["h"], d["k"]), d["dtype"]), k=_activations(rng, (T, d["h"], d["k"]), d["dtype"]),
                  v=_activations(rng, (T, d["h"], d["v"]), d["dtype"]),
                  w=np.exp(-np.exp(rng.uniform(-9.0, -0.1, size=(T, d["h"], d["k"])))).astype(act),
                  u=_activations(rng, (d["h"], d["k"]), d["dtype"]),
                  state=_activations(rng, (num_slots, d["h"], d["k"], d["v"]), d["state_dtype"]),
                  cu_seqlens=cu, state_indices=idx, has_initial_state=has_initial)
    return Case(mc.op, inputs, _params(mc, num_seqs=len(d["seq_lens"]), tokens=T, num_slots=num_slots), mc.seed)


_BUILDERS = {"ragged_paged_attention": _attention_case, "write_kv": _write_case, "mla_paged_attention": _mla_case,
             "gated_delta_rule_update": _gdn_update_case, "gated_delta_rule_chunked": _gdn_chunked_case,
             "causal_conv1d_update": _conv_case, "selective_state_update": _ssu_case, "ssd_chunked_scan": _ssd_case,
             "rwkv6_wkv": _rwkv_case}
