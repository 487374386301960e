"""The verdict cannot be bought or fooled (issue 11): each test here failed before the change it names.

- the required precision comes from the case, not from the dtype the backend returns (NU-3);
- non-finite values never pass by accident (NU-7);
- one bug does not hide the next, and each failure says why (poison regions, feature variations);
- claim names come from one registry; unknown names are errors naming the close match;
- results that depend on call history or alias their inputs are caught;
- NU-R2 bounds each sequence by its own length.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from kvconform import reference
from kvconform.backends.base import FEATURES, claims_problems
from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.case import Case, PoisonRegion
from kvconform.conformance.engine.compare import compare_field
from kvconform.conformance.harness import compare_outputs, poison_expectation
from kvconform.conformance.strategies import recurrent as rs
from kvconform.conformance.engine.protocol import ALIAS
from kvconform.conformance.engine.worker import aliased_inputs

F8 = ml_dtypes.float8_e4m3fn


def _reduction(out="float32"):
    return tolerance.reduction(out, 1e-6, 2 * tolerance.u(out), "test")


# --- NU-7 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("got, ref", [(5.0, math.inf), (5.0, math.nan), (math.nan, 1.0), (math.inf, 1.0),
                                      (math.nan, math.inf), (math.inf, math.nan), (-math.inf, math.inf)])
def test_non_finite_mismatch_fails(got, ref):
    res = compare_field("out", np.array([got, 1.0], np.float32), np.array([ref, 1.0]), _reduction())
    assert not res.ok and res.n_bad == 1, res
    assert res.error_ratio == math.inf


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_matching_non_finite_reference_passes(value):
    res = compare_field("out", np.array([value, 2.0], np.float32), np.array([value, 2.0]), _reduction())
    assert res.ok, res


def test_non_finite_tolerance_buys_nothing():
    tol = tolerance.reduction("float32", np.array([math.nan, math.inf]), 0.0, "NaN/inf bounds")
    res = compare_field("out", np.array([1.5, 2.5], np.float32), np.array([1.0, 2.0]), tol)
    assert not res.ok and res.n_bad == 2


def test_an_error_where_none_is_allowed_is_infinitely_over_not_a_sentinel():
    """A 0-ULP, 0-atol bound (padding outputs are exactly 0.0, RS-3): any error is inf times the allowance,
    reported as inf, never as err / 1e-300 (issue 28: reports showed 1e+300)."""
    tol = tolerance.ulp_bounded("float32", 0, 0.0, reason="exactly 0.0")
    res = compare_field("out", np.array([0.0, 0.5], np.float32), np.array([0.0, 0.0]), tol)
    assert not res.ok and res.n_bad == 1
    assert res.error_ratio == math.inf and res.profile and max(res.profile) == math.inf
    assert "inf" in res.summary() and "e+" not in res.summary()


def test_non_finite_finding_is_described():
    res = compare_field("out", np.array([np.nan, 1.0], np.float32), np.array([1.0, 1.0]), _reduction())
    assert "NU-7" in res.summary() and "NaN where the reference is finite" in res.summary()


# --- required precision (NU-3) ---------------------------------------------------------------------

def _attention_case(q_dtype="float32"):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 2, 4)).astype(q_dtype)
    k = rng.standard_normal((2, 2, 1, 4)).astype(np.float32)
    v = rng.standard_normal((2, 2, 1, 4)).astype(np.float32)
    inputs = dict(q=q, k_pages=k, v_pages=v, kv_lens=np.array([3], np.int32),
                  page_indices=np.array([[1, 0]], np.int32), cu_q_lens=np.array([0, 2], np.int32), num_seqs=1)
    return Case("ragged_paged_attention", inputs, {})


def test_narrow_output_cannot_buy_tolerance():
    """A 3% bias returned as float8 passed with error / allowed 0.96 when the bound followed the returned dtype."""
    case = _attention_case()
    expected = reference.ragged_paged_attention(**case.inputs)
    biased = (expected * 1.03).astype(F8)
    results = compare_outputs(case, expected, biased)
    assert not results[0].ok
    assert "narrower than the float32 precision this case requires" in results[0].problem
    as_f32 = compare_outputs(case, expected, (expected * 1.03).astype(np.float32))
    assert not as_f32[0].ok   # the same values in float32: judged by the same (case's) bound


def test_wider_output_is_judged_by_the_case_bound():
    case = _attention_case("float32")
    expected = reference.ragged_paged_attention(**case.inputs)
    assert all(r.ok for r in compare_outputs(case, expected, expected.astype(np.float64)))
    assert all(r.ok for r in compare_outputs(case, expected, expected.astype(np.float32)))
    narrow = compare_outputs(case, expected, expected.astype(ml_dtypes.bfloat16))
    assert not narrow[0].ok


# --- poison ----------------------------------------------------------------------------------------

def test_poison_regions_fill_only_their_locations():
    case = _attention_case()
    case.poison = (PoisonRegion("v_tail", "v_pages", (0, slice(1, None)), "PA-24", "V tail"),
                   PoisonRegion("table_tail", "page_indices", (0, slice(1, None)), "PA-24", "table", np.int32(9)))
    only_v = case.with_poison(["v_tail"])
    assert np.isnan(only_v.inputs["v_pages"][0, 1:]).all() and not np.isnan(case.inputs["v_pages"]).any()
    assert np.array_equal(only_v.inputs["page_indices"], case.inputs["page_indices"])
    both = case.with_poison()
    assert both.inputs["page_indices"][0, 1] == 9 and both.poisoned == ("v_tail", "table_tail")
    with pytest.raises(ValueError, match="unknown poison region"):
        case.with_poison(["k_tail"])


def test_poison_expectation_keeps_copied_locations_from_the_reference():
    clean_ref = {"pool": np.array([1.0, 2.0, 3.0], np.float32)}
    poisoned_ref = {"pool": np.array([1.0, np.nan, 3.0], np.float32)}   # slot 1 is copied through
    backend_clean = {"pool": np.array([1.5, 2.0, 3.5], np.float32)}
    mixed = poison_expectation(clean_ref, poisoned_ref, backend_clean)["pool"]
    assert mixed[0] == 1.5 and np.isnan(mixed[1]) and mixed[2] == 3.5


#: the mutant with two independent bugs; its run (conftest run_many, in process) is shared by two tests
TWO_BUGS = "kvconform.conformance.mutants.paged_attention:VTailLeakAndSoftCapError"


def test_two_independent_bugs_are_both_reported_with_their_causes(run_many):
    """A NaN leak from V past kv_len hid every other finding when all cases were poisoned."""
    run = run_many("ragged_paged_attention", [TWO_BUGS], "ci")
    assert run.returncode == 1, run.output
    failed = [r for r in run.records(TWO_BUGS) if r["status"] == "fail"]
    leak = [r for r in failed if "poison" in r["id"]]
    cap = [r for r in failed if r["id"].endswith("differential[VTailLeakAndSoftCapError-soft_cap]")]
    assert leak and cap, [r["id"] for r in failed]
    assert all("fails only when V slots past kv_len in the last used page (v_tail) hold NaN" in r["message"]
               for r in leak)
    assert "passes with soft_cap off" in cap[0]["message"]
    assert cap[0]["diagnosis"]["variations"][0]["name"] == "soft_cap off"
    # the clean differential columns without a cap pass: the leak does not hide behind every case
    assert any(r["id"].endswith("differential[VTailLeakAndSoftCapError-base]") and r["status"] == "pass"
               for r in run.records(TWO_BUGS))


# --- claims vocabulary -----------------------------------------------------------------------------

def test_unknown_claim_names_are_errors_with_the_close_match():
    problems = claims_problems({"ragged_paged_attention": {"features": ["slidng_window", "soft_cap"],
                                                           "layouts": ["interleaved"]},
                                "write_kvv": {}})
    assert "did you mean 'sliding_window'" in " ".join(problems["ragged_paged_attention"])
    assert any("layout 'interleaved'" in p for p in problems["ragged_paged_attention"])
    assert "did you mean 'write_kv'" in problems["write_kvv"][0]
    assert not claims_problems({op: {"features": list(names)} for op, names in FEATURES.items()})


def test_misspelled_feature_fails_the_run(cli, tmp_path):
    """A claims error is found when the backend is loaded: NOT CHECKED (exit 3) naming the close match, no
    test of the backend runs (no engine error charged to its kernel, no quiet `unsupported`)."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "fault_backends:make_misspelled", "--ops", "write_kv", "--profile", "ci",
               "--out", str(out))
    assert proc.returncode == 3, proc.stdout[-2000:]
    report = cli.report(out)
    assert report["results"] == [] and report["gate"]["exit_code"] == 3
    (reason,) = report["gate"]["not_checked"]
    assert "unknown feature 'quantised_kv' (did you mean 'quantized_kv'?)" in reason["message"]
    assert reason["message"] in proc.stdout


def test_every_registered_feature_is_read_by_a_strategy():
    """A claimed name nothing consults would be a column that can never fail."""
    import importlib
    import inspect
    import pkgutil
    from kvconform.conformance import strategies
    # every module, those of sub-packages (strategies/recurrent/, models/, scale/) included
    modules = [importlib.import_module(m.name)
               for m in pkgutil.walk_packages(strategies.__path__, prefix=f"{strategies.__name__}.")]
    source = "".join(inspect.getsource(m) for m in modules)
    for op, names in FEATURES.items():
        for name in names:
            assert f'"{name}"' in source, f"feature {name!r} of {op} is consulted by no strategy"


# --- anti-gaming -----------------------------------------------------------------------------------

def test_aliased_outputs_are_named():
    k = np.zeros((2, 2), np.float32)
    assert aliased_inputs(k, {"k_pages": k}) == [f"out{ALIAS}k_pages"]
    assert aliased_inputs(k[:1], {"k_pages": k}) == [f"out{ALIAS}k_pages"]
    assert aliased_inputs(k.copy(), {"k_pages": k}) == []


# --- NU-R2 per sequence ----------------------------------------------------------------------------

def test_recurrent_bound_grows_with_each_sequences_own_length():
    """The bound used the call's longest sequence for every sequence: a 1-token sequence next to a
    20-token one got the 20-token allowance."""
    rng = np.random.default_rng(1)
    lengths = [1, 20]
    cu = np.array([0, 1, 21], np.int32)
    T, H, K, V = 21, 1, 2, 2
    inputs = dict(r=rng.standard_normal((T, H, K)).astype(np.float32), k=rng.standard_normal((T, H, K)).astype(np.float32),
                  v=rng.standard_normal((T, H, V)).astype(np.float32),
                  w=rng.uniform(0.2, 0.9, (T, H, K)).astype(np.float32), u=rng.standard_normal((H, K)).astype(np.float32),
                  state=rng.standard_normal((2, H, K, V)).astype(np.float32), cu_seqlens=cu)
    case = Case("rwkv6_wkv", inputs, {"lengths": lengths})
    expected = reference.rwkv6_wkv(**inputs)
    fields = {"out": expected.out, "state": expected.state}
    checks = rs.CHECKS["rwkv6_wkv"](case, dict(fields), dict(fields))
    atol = np.broadcast_to(checks["out"][0].atol, expected.out.shape)
    assert atol[0].max() * 10 < atol[1].max()   # token 0 (1-token sequence) vs token 1 (20 tokens)


# --- green means checked; counts that do not flatter ----------------------------------------------

@pytest.mark.parametrize("factory, why", [("make_broken_capabilities", "describe() raised RuntimeError"),
                                          ("make_claims_nothing", "no numerical test of it ran")])
def test_a_run_that_checked_nothing_is_not_green(cli, tmp_path, factory, why):
    """A backend whose capabilities() raised was reported unsupported everywhere with exit 0 (now exit 3,
    NOT CHECKED, gate.py)."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", f"fault_backends:{factory}", "--ops", "write_kv", "--profile", "ci",
               "--out", str(out))
    assert proc.returncode == 3, proc.stdout[-2000:]
    assert "NOT CHECKED" in proc.stdout and why in proc.stdout


def test_numerical_and_rejection_tests_are_counted_apart(cli, tmp_path):
    out = tmp_path / "out"
    assert cli("run", "--backend", "numpy", "--ops", "write_kv", "--profile", "ci", "--out", str(out)).returncode == 0
    report = cli.report(out)
    counts = report["counts"]["numpy"]
    n_errors = sum(1 for r in report["results"] if r["layer"] == "errors")
    assert counts["errors"]["pass"] == n_errors and counts["numerical"]["pass"] == len(report["results"]) - n_errors
    md = (out / "report.md").read_text()
    assert "numerical tests" in md and "errors layer (rejection tests)" in md
    assert "errors layer (rejection tests)" in (out / "report.html").read_text()


def test_diagnosis_reaches_the_reports_and_replay(cli, run_many):
    run = run_many("ragged_paged_attention", [TWO_BUGS], "ci")
    out = run.out
    report = cli.report(out)
    leak = next(r for r in report["results"] if r["status"] == "fail" and "poison" in r["id"])
    assert "(v_tail)" in leak["diagnosis"]["summary"]
    assert "diagnosis: fails only when" in (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert "diagnosis:" in html and "only v_tail poisoned" in html
    case = json.loads((Path(leak["repro"]) / "case.json").read_text())
    assert "(v_tail)" in case["diagnosis"]["summary"]
    assert "diagnosis (when recorded): fails only when" in cli("replay", leak["repro"], "--backend",
                                                               leak["backend_spec"]).stdout
