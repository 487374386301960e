"""The models profile's table: real models' configs (with their config.json sources) and the cases drawn from them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

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
