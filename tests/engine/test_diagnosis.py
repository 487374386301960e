"""What a failure's diagnosis says (conformance/diagnosis.py), against fake backends called in-process.

Each test is one problem of issue 31: crashes and raises diagnosed in their own words (a crash that
disappears with the padding rows dropped says so), a variation that raises is never a pass, declined
variations are skipped without losing the others, a backend raising on every call is not call history,
and a variation of a hint (chunk_size) says whether the backend honoured it.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import ml_dtypes

from kvconform import reference
from kvconform.conformance.engine.case import Case
from kvconform.conformance.harness.diagnosis import diagnose
from kvconform.conformance.engine.call_errors import BackendCrash, BackendDeclined, BackendError


class _Worker:
    """Calls `behaviour(op, inputs)` as a backend would answer it; it may raise the worker's exceptions."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.calls = 0

    def call(self, op, inputs, timeout=None, layouts=None):
        self.calls += 1
        return self.behaviour(op, dict(inputs)), []


def _kvc(behaviour, claims=None):
    return SimpleNamespace(worker=_Worker(behaviour), call_timeout=5.0,
                           reference=lambda case: getattr(reference, case.op)(**case.inputs),
                           description={"capabilities": claims or {}})


def _attention_case(*, pad_rows=1, q_dtype=np.float32, soft_cap=None) -> Case:
    """One sequence of 2 query rows over 3 keys, plus `pad_rows` padding rows of q (PA-25)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2 + pad_rows, 2, 4)).astype(q_dtype)
    k = rng.standard_normal((2, 2, 1, 4)).astype(np.float32)
    v = rng.standard_normal((2, 2, 1, 4)).astype(np.float32)
    inputs = dict(q=q, k_pages=k, v_pages=v, kv_lens=np.array([3], np.int32),
                  page_indices=np.array([[1, 0]], np.int32), cu_q_lens=np.array([0, 2], np.int32), num_seqs=1)
    if soft_cap is not None:
        inputs["soft_cap"] = soft_cap
    return Case("ragged_paged_attention", inputs, {})


def _right(op, inputs):
    return reference.ragged_paged_attention(**inputs).astype(np.float32)


def _real_rows(inputs) -> int:
    return int(inputs["cu_q_lens"][int(inputs["num_seqs"])])


def test_a_crash_that_disappears_without_padding_rows_says_so():
    def crashes_on_padding(op, inputs):
        if len(inputs["q"]) > _real_rows(inputs):
            raise BackendCrash("ragged_paged_attention: worker process died (killed by signal SIGSEGV)")
        return _right(op, inputs)
    found = diagnose(_kvc(crashes_on_padding), ("differential", _attention_case()), "crash")
    assert "the crash disappears with padding rows off" in found["summary"], found
    assert {"name": "padding rows off", "outcome": "pass"}.items() <= found["variations"][-1].items()


def test_a_golden_failure_without_padding_rows_is_diagnosed_like_a_differential_one():
    def wrong_with_padding(op, inputs):
        out = _right(op, inputs)
        return out + 1.0 if len(inputs["q"]) > _real_rows(inputs) else out
    found = diagnose(_kvc(wrong_with_padding), ("differential", _attention_case()), "fail")
    assert found["summary"].startswith("passes with padding rows off"), found["summary"]


def test_a_variation_that_raises_is_reported_as_raising_never_as_a_pass():
    def raises_on_bfloat16(op, inputs):
        if inputs["q"].dtype != np.float32:
            raise BackendError("TypeError", "q must be float32, got bfloat16")
        return _right(op, inputs) + 1.0                       # wrong whenever it answers
    case = _attention_case(pad_rows=0, q_dtype=ml_dtypes.bfloat16)
    found = diagnose(_kvc(raises_on_bfloat16), ("differential", case), "raises")
    outcomes = {v["name"]: v["outcome"] for v in found["variations"]}
    assert outcomes["q widened to float32"] == "fail"
    assert "gives a wrong result (no error) with q widened to float32" in found["summary"], found["summary"]
    assert "still raises with K/V values rounded to bfloat16 (dtype kept) (TypeError: q must be float32" \
        in found["summary"], found["summary"]
    assert "passes" not in found["summary"]


def test_declined_variations_are_skipped_and_the_others_still_run():
    def declines_float32_q(op, inputs):
        if inputs["q"].dtype == np.float32:
            raise BackendDeclined("float32 q is not supported")
        out = reference.ragged_paged_attention(**inputs)
        return (out if "soft_cap" not in inputs else out + 1.0).astype(np.float32)
    case = _attention_case(pad_rows=0, q_dtype=ml_dtypes.bfloat16, soft_cap=5.0)
    found = diagnose(_kvc(declines_float32_q), ("differential", case), "fail")
    outcomes = {v["name"]: v["outcome"] for v in found["variations"]}
    assert outcomes["q widened to float32"] == "declined" and outcomes["soft_cap off"] == "pass", outcomes
    assert found["summary"].startswith("passes with soft_cap off"), found["summary"]
    assert "skipped what the backend declines (kvconform.Unsupported: float32 q is not supported): " \
           "q widened to float32" in found["summary"]
    assert "diagnosis not available" not in found["summary"]


def test_a_variation_widening_to_an_unclaimed_dtype_is_not_called():
    worker_calls = []

    def wrong(op, inputs):
        worker_calls.append(inputs["q"].dtype)
        return _right(op, inputs) + 1.0
    claims = {"ragged_paged_attention": {"dtypes": ["bfloat16"], "kv_dtypes": ["bfloat16"]}}
    case = _attention_case(pad_rows=0, q_dtype=ml_dtypes.bfloat16)
    case.inputs["k_pages"] = case.inputs["k_pages"].astype(ml_dtypes.bfloat16)
    case.inputs["v_pages"] = case.inputs["v_pages"].astype(ml_dtypes.bfloat16)
    found = diagnose(_kvc(wrong, claims), ("differential", case), "fail")
    outcomes = {v["name"]: v["outcome"] for v in found["variations"]}
    assert outcomes["q widened to float32"] == "outside" and np.float32 not in worker_calls
    assert "skipped outside its claims (float32 not claimed)" in found["summary"], found["summary"]


def test_raising_on_every_call_is_not_call_history_nor_any_variation_passing():
    def always_raises(op, inputs):
        raise BackendError("RuntimeError", "compile error: unsupported shape")
    case = _attention_case(pad_rows=1, q_dtype=ml_dtypes.bfloat16)
    found = diagnose(_kvc(always_raises), ("history", case), "fail")
    assert found["summary"].startswith("not call history: raises against the reference even right after an "
                                       "identical call (RuntimeError: compile error"), found["summary"]
    assert "calls before them" not in found["summary"] and "passes" not in found["summary"]
    assert all(v["outcome"] == "raises" for v in found["variations"]), found["variations"]


def test_a_crash_in_every_poison_variation_is_not_blamed_on_several_regions_together():
    def always_crashes(op, inputs):
        raise BackendCrash("ragged_paged_attention: worker process died (killed by signal SIGABRT)")
    from kvconform.conformance.engine.case import PoisonRegion
    case = _attention_case(pad_rows=1)
    case.poison = (PoisonRegion("q_padding", "q", (slice(2, None),), "PA-25", "padding rows of q"),
                   PoisonRegion("v_tail", "v_pages", (0, slice(1, None)), "PA-24", "V tail"))
    clean = _right("ragged_paged_attention", case.inputs)
    found = diagnose(_kvc(always_crashes), ("poison", case, clean), "crash")
    assert "several regions together" not in found["summary"], found["summary"]
    assert found["summary"].startswith("crashes whichever don't-care region holds poison"), found["summary"]


# --- hints (RS-18, RS-33): chunk_size ---------------------------------------------------------------

def _chunked_case(chunk_size=16) -> Case:
    """Two sequences (5 and 3 tokens) of the chunked gated delta rule, H = Hk = 1, K = V = 4."""
    rng = np.random.default_rng(1)
    T, H, K = 8, 1, 4
    k = rng.standard_normal((T, H, K)).astype(np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    inputs = dict(q=rng.standard_normal((T, H, K)).astype(np.float32), k=k,
                  v=rng.standard_normal((T, H, K)).astype(np.float32),
                  g=-np.abs(rng.standard_normal((T, H))).astype(np.float32),
                  beta=rng.uniform(0, 1, (T, H)).astype(np.float32),
                  state=rng.standard_normal((3, H, K, K)).astype(np.float32),
                  cu_seqlens=np.array([0, 5, 8], np.int32), chunk_size=chunk_size,
                  state_indices=np.array([2, 0], np.int32))
    return Case("gated_delta_rule_chunked", inputs, {})


def _wrong_state(op, inputs, chunk):
    """The reference's result computed with chunk size `chunk`, its state off by 1 (a wrong backend); out
    kept in float64, where the chunking shows in the last bits."""
    out = getattr(reference, op)(**dict(inputs, chunk_size=chunk))
    return {"out": np.asarray(out.out, np.float64), "state": np.asarray(out.state, np.float32) + 1.0}


def test_a_chunk_size_the_backend_rounds_up_is_said_ignored():
    """A kernel that rounds the chunk size up to 16 (issue 31 reports one in vLLM): chunk_size 1 then runs
    the very same computation as chunk_size 16, and "still fails token by token" would be a false lead."""
    def rounds_to_16(op, inputs):
        return _wrong_state(op, inputs, max(16, -(-int(inputs["chunk_size"]) // 16) * 16))
    found = diagnose(_kvc(rounds_to_16), ("differential", _chunked_case(16)), "fail")
    names = [v["name"] for v in found["variations"] if v.get("hint")]
    assert any(n.startswith("token by token (chunk_size 1), hint ignored (the same output bit for bit as with "
                            "chunk_size 16") for n in names), found["variations"]


def test_a_chunk_size_the_backend_uses_is_said_honoured():
    def honours(op, inputs):
        return _wrong_state(op, inputs, int(inputs["chunk_size"]))
    found = diagnose(_kvc(honours), ("differential", _chunked_case(16)), "fail")
    hints = {v["name"].split(",")[0]: v["hint"] for v in found["variations"] if v.get("hint")}
    assert hints == {"token by token (chunk_size 1)": "honoured",
                     # both sequences (5 and 3 tokens) fit one chunk of 16 and of 64: nothing to honour
                     "one chunk per sequence (chunk_size 64)": "without effect"}, found["variations"]


def test_a_failure_only_with_an_empty_sequence_says_so():
    """jax's ragged kernel: a leading sequence with no query row and no key corrupts the next one (issue 31)."""
    rng = np.random.default_rng(2)
    inputs = dict(q=rng.standard_normal((1, 2, 4)).astype(np.float32),
                  k_pages=rng.standard_normal((2, 2, 1, 4)).astype(np.float32),
                  v_pages=rng.standard_normal((2, 2, 1, 4)).astype(np.float32),
                  kv_lens=np.array([0, 1], np.int32), page_indices=np.array([[1], [0]], np.int32),
                  cu_q_lens=np.array([0, 0, 1], np.int32), num_seqs=2)

    def wrong_after_an_empty_sequence(op, inputs):
        out = _right(op, inputs)
        return out + 1.0 if (np.diff(inputs["cu_q_lens"][:int(inputs["num_seqs"]) + 1]) == 0).any() else out
    found = diagnose(_kvc(wrong_after_an_empty_sequence),
                     ("differential", Case("ragged_paged_attention", inputs, {})), "fail")
    assert found["summary"].startswith("passes with sequences without query rows dropped"), found["summary"]


def test_a_crash_in_a_run_carries_its_diagnosis(cli, tmp_path):
    """End to end: the crash record of a run holds the diagnosis (message, record, reproducer)."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "fault_backends:make_crashes_on_padding", "--ops", "causal_conv1d_update",
               "--out", str(out), "--", "-k", "differential and padding_slots")
    assert proc.returncode == 1, proc.stdout[-2000:]
    crashed = [r for r in cli.report(out)["results"] if r["status"] == "crash"]
    assert crashed, [r["status"] for r in cli.report(out)["results"]]
    for record in crashed:
        assert "diagnosis: the crash disappears with padding rows off" in record["message"], record["message"]
        assert record["diagnosis"]["variations"][0]["name"] == "padding rows off"
