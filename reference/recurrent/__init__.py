"""Recurrent states (spec/recurrent.md, clauses RS-*): the slot pool, the Mamba / Mamba2 / RWKV6 kernels
and the state store. One module per kernel family; `slots` holds the pool rules they share."""
from .activations import SOFTPLUS_THRESHOLD, silu, softplus
from .conv1d import ConvUpdate, ConvUpdateCall, causal_conv1d_update, validate_causal_conv1d_update
from .conv_layouts import window_from_circular, window_from_rolled, window_to_rolled
from .gated_delta import (L2NORM_EPS, GatedDeltaCall, GatedDeltaScan, GatedDeltaUpdate,
                          gated_delta_rule_chunked, gated_delta_rule_update,
                          validate_gated_delta_rule_chunked, validate_gated_delta_rule_update)
from .rwkv6 import WKV6, WKV6Call, rwkv6_wkv, validate_rwkv6_wkv
from .selective_state import (SelectiveStateCall, SelectiveStateUpdate, selective_state_update,
                              validate_selective_state_update)
from .slots import PAD_SLOT
from .ssd_scan import SSDScan, SSDScanCall, ssd_chunked_scan, validate_ssd_chunked_scan
from .store import (Checkpoint, SlotAssignment, StoreError, StoreMeta, StoreUpdate, assign_slots,
                    checkpoint, copy_sequence, keep_sequence, new_store, remove_sequence, restore,
                    rollback, slot_refcounts)
from .store_step import (STORE_COMMANDS, StorePlan, StoreStep, validate_recurrent_store_step,
                         recurrent_store_step)

__all__ = [
    # kernels (op names of backends/base.py OPS)
    "causal_conv1d_update", "selective_state_update", "ssd_chunked_scan", "rwkv6_wkv",
    "gated_delta_rule_update", "gated_delta_rule_chunked",
    "ConvUpdate", "SelectiveStateUpdate", "SSDScan", "WKV6", "GatedDeltaUpdate", "GatedDeltaScan",
    # their argument checks: backends call these first, so errors match the oracle's (RS-2 … RS-20)
    "validate_causal_conv1d_update", "validate_selective_state_update", "validate_ssd_chunked_scan",
    "validate_rwkv6_wkv", "ConvUpdateCall", "SelectiveStateCall", "SSDScanCall", "WKV6Call",
    "validate_gated_delta_rule_update", "validate_gated_delta_rule_chunked", "GatedDeltaCall",
    # pool rules and pointwise functions
    "PAD_SLOT", "SOFTPLUS_THRESHOLD", "L2NORM_EPS", "softplus", "silu",
    # conv window layouts (RS-13)
    "window_from_rolled", "window_to_rolled", "window_from_circular",
    # the store (RS-21 … RS-27)
    "StoreMeta", "StoreUpdate", "SlotAssignment", "Checkpoint", "StoreError", "new_store",
    "slot_refcounts", "assign_slots", "copy_sequence", "remove_sequence", "keep_sequence",
    "checkpoint", "restore", "rollback",
    # the store as one backend op (op name of backends/base.py OPS) and its checked plan
    "recurrent_store_step", "StoreStep", "STORE_COMMANDS", "validate_recurrent_store_step", "StorePlan",
]
