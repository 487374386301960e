"""Cases shaped like real models and batches (profile `models`; conformance/models.py has the table and
its sources).

One test per op, parametrized over the model cases of that op: each builds its case from a fixed seed,
skips as `unsupported` where the case lies outside the backend's claims (a dtype, a head dim, a feature, a
limit), and compares the backend with the reference through the op's own checks (`kvc.check`), as any
drawn case.
"""
from __future__ import annotations

import pytest

from kvconform.conformance.strategies import models
from kvconform.conformance.harness import conformance_test
from kvconform.conformance.strategies import recurrent as rs
from kvconform.conformance.strategies.constraints import case_space

#: clauses each op's model cases check (the op's base column and its accuracy class)
CLAUSES = {
    "ragged_paged_attention": ("PA-4", "PA-6", "PA-7", "PA-10", "PA-12", "PA-14", "NU-PA1"),
    "write_kv": ("PA-41", "PA-43", "PA-45", "NU-PA3"),
    "mla_paged_attention": ("ML-1", "ML-2", "ML-3", "ML-4", "ML-5", "NU-PA1"),
    **{op: tuple(rs.VARIANTS[op][0].clauses) + ("NU-R2",) for op in
       ("causal_conv1d_update", "selective_state_update", "ssd_chunked_scan", "rwkv6_wkv",
        "gated_delta_rule_update", "gated_delta_rule_chunked")},
}
#: clauses of the options a case turns on (quantized KV: stored by write_kv, read by attention)
FEATURE_CLAUSES = {"sliding_window": ("PA-15",), "soft_cap": ("PA-16",), "sinks": ("PA-17",),
                   "quantized_kv": ("PA-18", "PA-19"), "mamba2": ("RS-16",), "initial_states": ("RS-5",),
                   "state_indices": ("RS-2", "RS-7")}
WRITE_FEATURE_CLAUSES = {"quantized_kv": ("PA-44",)}


def case_clauses(mc: models.ModelCase) -> tuple[str, ...]:
    table = WRITE_FEATURE_CLAUSES if mc.op == "write_kv" else FEATURE_CLAUSES
    return tuple(dict.fromkeys(CLAUSES[mc.op] + tuple(c for f in mc.features for c in table.get(f, ()))))


def _model_test(op: str):
    clauses = tuple(dict.fromkeys(c for mc in models.of_op(op) for c in case_clauses(mc)))

    @conformance_test(op=op, layer="differential", clauses=clauses)
    @pytest.mark.parametrize("mc", models.of_op(op), ids=str)
    def test(kvc, mc):
        kvc.cite(*case_clauses(mc))
        claims = kvc.claims(op, features=mc.features)
        case = models.build(mc)
        kvc.require(claims, **case_space(case.params))
        kvc.check(case)
    test.__name__ = test.__qualname__ = f"test_{op}"
    return test


for _op in models.OPS:   # one test function per op, so `--ops` and the reports see the op of each
    globals()[f"test_{_op}"] = _model_test(_op)
del _op
