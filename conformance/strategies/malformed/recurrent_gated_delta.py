"""Malformed inputs for the gated delta rule ops (spec/recurrent.md RS-28 … RS-33): shapes and head
sharing, the scale and normalisation flag, chunk size, plus the recurrent family's shared slot rules
(RS-2, RS-4, RS-6) and packing rules (RS-17, RS-5) from malformed/recurrent.py."""
from __future__ import annotations

import numpy as np

from kvconform.backends.base import OpClaims

from ..recurrent import gated_delta as gdn
from ..values import sampled_from
from . import grown, need, rule
from .recurrent import _bool_flag, _grow, _not_float, _slot_rules, _varlen_rules

VARIANTS = gdn.VARIANTS


def valid(op: str, claims: OpClaims, variant):
    return gdn.STRATEGIES[op](claims, variant)


def _qk_heads_not_dividing(draw, x, claims):
    """q and k with Hk + 1 heads (a count that does not divide H unless H is a multiple; then + 2 …)."""
    heads = np.shape(x["v"])[1]
    qk = np.shape(x["q"])[1]
    bad = next(c for c in range(qk + 1, qk + heads + 2) if heads % c)
    return {"q": grown(np.asarray(x["q"]), 1, bad - qk), "k": grown(np.asarray(x["k"]), 1, bad - qk)}


def _scale_invalid(draw, x, claims):
    return {"scale": draw(sampled_from((0.0, -1.0, float("nan"), float("inf"))))}


def _chunk_invalid(draw, x, claims):
    return {"chunk_size": draw(sampled_from((0, -1, 2.5)))}


def _k_mismatch(draw, x, claims):
    need(np.shape(x["k"])[1] >= 1)
    return {"k": grown(np.asarray(x["k"]), 2)}


def _rules(op: str) -> tuple:
    return (
        rule("q_not_float", ("RS-28",), "q", "q must have a floating dtype", _not_float("q")),
        rule("q_shape", ("RS-28",), "q", "q must have shape [R, Hk, K] with K the state's", _grow("q", 2)),
        rule("k_shape", ("RS-28",), "k", "k must have shape [R, Hk, K] like q", _k_mismatch),
        rule("v_shape", ("RS-28",), "v", "v must have shape [R, H, V]", _grow("v", 2)),
        rule("g_shape", ("RS-28",), "g", "g must have shape [R, H]", _grow("g", 1)),
        rule("beta_shape", ("RS-28",), "beta", "beta must have shape [R, H]", _grow("beta", 1)),
        rule("qk_heads_not_dividing", ("RS-28",), ("q", "k"), "the q/k head count Hk must divide H",
             _qk_heads_not_dividing),
        rule("scale_invalid", ("RS-29",), "scale", "scale must be finite and > 0", _scale_invalid),
        rule("use_qk_l2norm_not_bool", ("RS-29",), "use_qk_l2norm", "use_qk_l2norm must be a bool",
             _bool_flag("use_qk_l2norm")),
    ) + _slot_rules(op)


RULES = {
    "gated_delta_rule_update": _rules("gated_delta_rule_update"),
    "gated_delta_rule_chunked": _rules("gated_delta_rule_chunked") + (
        rule("chunk_size_invalid", ("RS-33",), "chunk_size", "chunk_size must be an integer >= 1",
             _chunk_invalid),
    ) + _varlen_rules("gated_delta_rule_chunked"),
}
