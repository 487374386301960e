"""Strategies and comparison contracts of the recurrent family (spec/recurrent.md, clauses RS-n).

One module per op: `conv1d.py` (causal_conv1d_update), `ssu.py` (selective_state_update, Mamba1/2),
`ssd.py` (ssd_chunked_scan), `rwkv6.py` (rwkv6_wkv), `gated_delta.py` (gated_delta_rule_update and
_chunked), `store.py` (recurrent_store_step); their shared drawing helpers in `common.py`, the shared
parts of the comparison contract in `contract.py`, the reach columns' sizes and value regimes in
`reach.py`, what a case uses (goldens) and the diagnosis variations in `uses.py`. This module is the
family's table, where the engine looks an op up: VARIANTS, STRATEGIES, CHECKS, USES, DIAGNOSIS,
HISTORY_INPUTS, STRIDED, per op.
"""
from __future__ import annotations

from kvconform.conformance.engine import strided

from . import gated_delta, store
from .common import (ACT_DTYPES, CHUNK_SIZES, LONG_CHUNK_SIZES, POOL_DTYPES, SSD_LONG_EDGES,  # noqa: F401
                     SSD_LONG_MAX, Variant, column_runs, conventions)
from .contract import class_r  # noqa: F401
from .conv1d import CONV_VARIANTS, conv_cases, conv_checks  # noqa: F401
from .rwkv6 import RWKV_VARIANTS, rwkv_cases, rwkv_checks  # noqa: F401
from .ssd import SSD_VARIANTS, ssd_cases, ssd_checks  # noqa: F401
from .ssu import SSU_VARIANTS, ssu_cases, ssu_checks  # noqa: F401
from .uses import _recurrent_diagnosis, uses

VARIANTS = {"causal_conv1d_update": CONV_VARIANTS, "selective_state_update": SSU_VARIANTS,
            "ssd_chunked_scan": SSD_VARIANTS, "rwkv6_wkv": RWKV_VARIANTS,
            **gated_delta.VARIANTS, **store.VARIANTS}
STRATEGIES = {"causal_conv1d_update": conv_cases, "selective_state_update": ssu_cases,
              "ssd_chunked_scan": ssd_cases, "rwkv6_wkv": rwkv_cases,
              **gated_delta.STRATEGIES, **store.STRATEGIES}
CHECKS = {"causal_conv1d_update": conv_checks, "selective_state_update": ssu_checks,
          "ssd_chunked_scan": ssd_checks, "rwkv6_wkv": rwkv_checks,
          **gated_delta.CHECKS, **store.CHECKS}
#: diagnosis variations per op (none for the store op: its checks are exact)
DIAGNOSIS = {op: _recurrent_diagnosis for op in STRATEGIES if op != store.OP}
#: what a case uses, per op (harness/goldens.py)
USES = {op: uses for op in STRATEGIES}
#: inputs the history property redraws (same shapes and slots, other values; signs free)
HISTORY_INPUTS = {"causal_conv1d_update": ("x", "weight", "conv_state"),
                  "selective_state_update": ("x", "B", "C", "state"),
                  "ssd_chunked_scan": ("x", "B", "C", "state"),
                  "rwkv6_wkv": ("r", "k", "v", "u", "state"),
                  "gated_delta_rule_update": ("q", "v", "state"),       # k keeps |k| <= 1 (RS-35)
                  "gated_delta_rule_chunked": ("q", "v", "state"),
                  **store.HISTORY_INPUTS}


def column(op: str, name: str) -> Variant:
    """The column `name` of `op` (VARIANTS[op])."""
    return next(v for v in VARIANTS[op] if v.name == name)


# --- the strided column (suite/test_strided.py, spec/numerics.md NU-14) -----------------------------
#: per op, the columns its strided cases are drawn from, the first one claimed: state indices (a slot
#: column of the engine's wider table) where claimed, else the base column
def _strided_columns(op: str) -> tuple:
    indexed = [v for v in VARIANTS[op] if v.name == "state_indices"]
    return strided.columns(STRATEGIES[op], *indexed, VARIANTS[op][0])


STRIDED = {op: _strided_columns(op) for op in STRATEGIES}
