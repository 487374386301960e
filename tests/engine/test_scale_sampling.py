"""The scale profile's machinery (conformance/scale.py, spec/numerics.md NU-13) at small sizes: sampled
sub-calls give the reference's own rows, the sample always holds the rows past the boundary, unwritten
pool rows that changed are found and judged, and `kvconform run --profile scale` refuses a CPU backend."""
from __future__ import annotations

import json

import numpy as np
import pytest

from kvconform import reference
from kvconform.conformance.engine import case as case_io
from kvconform.conformance import cli
from kvconform.conformance.harness import profiles
from kvconform.conformance.strategies import scale
from kvconform.conformance.harness import compare_outputs

SMOKE = scale.sizes_for("scale-smoke")


def _attention(rng, **options):
    heads, ps = (4, 2, 8), 4
    q_lens, kv_lens = [1, 37, 1, 5, 0], [30, 60, 9, 5, 3]
    return scale.attention_case(rng, q_dtype="float32", kv_dtype="bfloat16", heads=heads, page_size=ps,
                                num_pages=80, q_lens=q_lens, kv_lens=kv_lens, boundary_page=70, **options)


def _ok(case, expected, actual) -> bool:
    return all(r.ok for r in compare_outputs(case, expected, actual))


@pytest.mark.parametrize("options", [{}, {"sliding_window": 7, "soft_cap": 3.0}])
def test_sampled_rows_are_the_reference_rows(options):
    """A sub-call of whole sequences and of single rows cut from a 37-row prefill gives the full call's
    rows (float64 sums over another length: NU-PA4's 1e-12 relative)."""
    rng = np.random.default_rng(0)
    case = _attention(rng, **options)
    full = reference.ragged_paged_attention(**case.inputs)
    sampled = scale.attention_sample(case, [0, 1, 3, 4], {1: [0, 1, 15, 16, 36]})
    sub = reference.ragged_paged_attention(**sampled.case.inputs)
    want = sampled.select(full)
    assert sub.shape == want.shape == (1 + 5 + 5, 4, 8)
    assert np.all(np.abs(sub - want) <= 1e-12 * (1 + np.abs(want)))
    assert sampled.case.inputs["k_pages"].shape[0] < case.inputs["k_pages"].shape[0]   # compacted pool


def test_sample_holds_the_sequences_past_the_boundary_and_catches_their_rows():
    """Every sequence has a page past the boundary; the one with the highest page is sampled first, and a
    result wrong only in its rows fails the sampled comparison (a right one passes)."""
    rng = np.random.default_rng(1)
    case = _attention(rng)
    touching = scale.touching(case, 70, 4)
    assert touching and set(touching) == {0, 1, 2, 3, 4} - {i for i in range(5) if case.inputs["kv_lens"][i] == 0}
    full = reference.ragged_paged_attention(**case.inputs)
    top = touching[0]
    seqs = scale.sample_indices(rng, 5, [top], 2)
    assert top in seqs
    sampled = scale.attention_sample(case, seqs)
    assert top in sampled.case.params["sampled_sequences"]
    assert _ok(sampled.case, reference.ragged_paged_attention(**sampled.case.inputs), sampled.select(full))
    wrong = full.copy()
    cu = case.inputs["cu_q_lens"]
    wrong[cu[top]:cu[top + 1]] *= 1.01
    assert not _ok(sampled.case, reference.ragged_paged_attention(**sampled.case.inputs), sampled.select(wrong))


def test_write_sample_finds_a_stray_write_to_an_unwritten_page():
    """A write landing on a page no token addresses (as a wrapped int32 offset would) is found by the full
    scan, taken into the sample and fails the exact check of PA-45."""
    rng = np.random.default_rng(2)
    case = scale.write_kv_case(rng, act="float32", kv_dtype="bfloat16", heads=(4, 2, 8), page_size=4,
                               num_pages=64, tokens=20, boundary_page=48)
    slots = case.inputs["slot_mapping"]
    assert slots.max() == 64 * 4 - 1 and (slots // 4 >= 48).sum() >= 10
    good = reference.write_kv(**case.inputs)
    sampled = scale.write_kv_sample(case, good, rng, 4, 48)
    assert _ok(sampled.case, reference.write_kv(**sampled.case.inputs), sampled.select(good))
    unwritten = np.setdiff1d(np.arange(64), slots // 4)[0]
    bad_k = good.k_pages.copy()
    bad_k[unwritten, 1] = bad_k[int(slots[0]) // 4, int(slots[0]) % 4]
    bad = type(good)(bad_k, good.v_pages)
    sampled = scale.write_kv_sample(case, bad, rng, 4, 48)
    assert unwritten in sampled.case.params["stray_pages"]
    assert not _ok(sampled.case, reference.write_kv(**sampled.case.inputs), sampled.select(bad))


def test_ssu_sample_finds_a_stray_row_and_holds_the_last_slot():
    rng = np.random.default_rng(3)
    case = scale.ssu_case(rng, act="float32", pool_dtype="float32", shape=(40, 2, 4, 16), rows=12, boundary_slot=30)
    idx = case.inputs["state_indices"]
    assert idx.max() == 39 and len(set(idx.tolist())) == 12
    good = reference.selective_state_update(**case.inputs)
    sampled = scale.ssu_sample(case, good, rng, 4, 30)
    assert 39 in sampled.case.params["sampled_slots"]        # the row writing the pool's last slot
    assert _ok(sampled.case, reference.selective_state_update(**sampled.case.inputs), sampled.select(good))
    free = int(np.setdiff1d(np.arange(40), idx)[0])
    state = good.state.copy()
    state[free] += 1.0
    bad = type(good)(good.out, state)
    sampled = scale.ssu_sample(case, bad, rng, 4, 30)
    assert free in sampled.case.params["stray_slots"]
    assert not _ok(sampled.case, reference.selective_state_update(**sampled.case.inputs), sampled.select(bad))


def test_periodic_pool_rows_differ_an_int32_wrap_apart():
    """Rows 2**32 elements apart never share the pattern's row (odd period), so a wrapped read shows."""
    rng = np.random.default_rng(4)
    pool = scale.periodic(rng, (300, 2, 4), "float32", period=scale.PERIOD)
    assert np.array_equal(pool[5], pool[5 + scale.PERIOD]) and not np.array_equal(pool[5], pool[6])
    rows_per_wrap = 2 ** 32 // (2 * 4)
    assert rows_per_wrap % scale.PERIOD != 0


def test_scale_profile_refuses_a_cpu_backend(capsys, tmp_path):
    """The native-only profile exits 2 with one line naming the backend and where it runs."""
    code = cli.main(["run", "--backend", "numpy", "--profile", "scale", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "profile scale runs natively on a GPU or TPU only" in err[0] and "'numpy'" in err[0]


def test_reproducer_of_a_huge_case_keeps_its_recipe_not_its_inputs(tmp_path, monkeypatch):
    monkeypatch.setattr(case_io, "MAX_INPUT_BYTES", 64)
    big = case_io.Case("write_kv", {"k": np.zeros(100, np.float32)}, {"rebuild": "kvconform run --profile scale"})
    case_io.save(big, tmp_path / "r")
    assert not (tmp_path / "r" / "inputs.npz").exists()
    with pytest.raises(case_io.CorruptReproducer, match="not stored.*rebuild: kvconform run --profile scale"):
        case_io.load(tmp_path / "r")


def test_scale_smoke_profile_runs_the_scale_suite(tmp_path):
    """`--profile scale-smoke` runs conformance/scale_suite/ (not the regular suite) end to end on the
    reference backend: every scale test passes, and the NOT CHECKED gate counts only the profile's ops."""
    code = cli.main(["run", "--backend", "numpy", "--profile", "scale-smoke", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "report.json").read_text())
    tests = {r["test"] for r in report["results"]}
    assert code == 0 and len(tests) == 10 and all(t.startswith("test_") for t in tests)
    assert {r["status"] for r in report["results"]} == {"pass"}
    assert {r["op"] for r in report["results"]} == set(profiles.SCALE_OPS)
