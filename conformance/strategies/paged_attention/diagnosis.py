"""Diagnosis variations of the paged-attention family (strategies/variations.py): what a failing case is\nre-run with."""
from __future__ import annotations

import numpy as np

from kvconform.conformance.engine.case import Case
from kvconform.reference import dtypes

from ..variations import narrowed, rows_dropped, widened, without
from .inputs import canonical_inputs


def _attention_diagnosis(case: Case) -> list:
    """Each optional feature off, narrow inputs widened exactly, quantized KV dequantized."""
    x = case.inputs
    found = [without(case, "sliding_window off", sliding_window=None),
             without(case, "soft_cap off", soft_cap=None),
             without(case, "sinks off", sinks=None),
             without(case, "scores off", return_scores=None),
             without(case, "unsharded (num_shards=1)", num_shards=None),
             widened(case, ("q",), "q widened to float32"),
             widened(case, ("k_pages", "v_pages"), "K/V widened to float32"),
             narrowed(case, ("q",), "q values rounded to bfloat16 (dtype kept)"),
             narrowed(case, ("k_pages", "v_pages"), "K/V values rounded to bfloat16 (dtype kept)"),
             rows_dropped(case, "padding rows off", ("q",),
                          np.arange(len(x["q"])) < int(np.asarray(x["cu_q_lens"])[int(x["num_seqs"])])),
             _without_empty_sequences(case)]
    if x.get("kv_layout", "separate") != "separate":
        found.append(("cache in the separate layout", dict_case(case, canonical_inputs(x))))
        return [v for v in found if v is not None]
    if dtypes.is_quantized_dtype(x["k_pages"].dtype):
        if np.ndim(x.get("k_scale")) == 0:
            plain = dict(k_pages=dtypes.upcast(x["k_pages"], x.get("k_scale")).astype(np.float32),
                         v_pages=dtypes.upcast(x["v_pages"], x.get("v_scale")).astype(np.float32))
            found.append(without(dict_case(case, plain), "KV dequantized to float32", k_scale=None, v_scale=None))
        else:
            found.append(without(case, "one scale per tensor", k_scale=np.float32(np.ravel(x["k_scale"])[0]),
                                 v_scale=np.float32(np.ravel(x["v_scale"])[0])))
    return [v for v in found if v is not None]


def _without_empty_sequences(case: Case) -> tuple[str, Case] | None:
    """A variation without the counted sequences that have no query row (PA-8 allows them): their
    kv_lens and page_indices rows dropped and num_seqs lowered; the q rows stay as they are."""
    x = case.inputs
    n, cu = int(x["num_seqs"]), np.asarray(x["cu_q_lens"])
    keep = np.ones(len(np.asarray(x["kv_lens"])), bool)
    keep[:n] = np.diff(cu[:n + 1]) > 0
    if keep[:n].all() or not keep[:n].any():
        return None
    kept_cu = np.concatenate([cu[:1], cu[1:n + 1][keep[:n]], cu[n + 1:]]).astype(cu.dtype)
    return "sequences without query rows dropped", dict_case(case, dict(
        kv_lens=np.asarray(x["kv_lens"])[keep], page_indices=np.asarray(x["page_indices"])[keep],
        cu_q_lens=kept_cu, num_seqs=int(keep[:n].sum())))


def _write_kv_diagnosis(case: Case) -> list:
    x = case.inputs
    found = [widened(case, ("k", "v"), "k/v widened to float32")]
    if x.get("k_scale") is not None:
        pow2 = {s: (2.0 ** np.round(np.log2(np.asarray(x[s], np.float64)))).astype(np.float32)
                for s in ("k_scale", "v_scale")}
        found.append(without(case, "power-of-two scales", **pow2))
        if np.ndim(x["k_scale"]):
            found.append(without(case, "one scale per tensor", k_scale=np.float32(np.ravel(x["k_scale"])[0]),
                                 v_scale=np.float32(np.ravel(x["v_scale"])[0])))
    return [v for v in found if v is not None]


def dict_case(case: Case, replace: dict) -> Case:
    return Case(case.op, {**case.inputs, **replace}, dict(case.params), case.seed)
