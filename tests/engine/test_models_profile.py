"""The `models` profile (conformance/models.py) stays runnable: its table, and one tiny slice of it through
the CLI (the whole profile takes minutes and is not part of the CI gate; docs/performance.md)."""
from __future__ import annotations

from kvconform.conformance.strategies import models
from kvconform.conformance.harness import profiles


def test_profile_ops_are_the_cases_ops():
    assert profiles.MODELS_OPS == models.OPS
    assert profiles.get("models").suite == "models_suite"


def test_cases_have_the_cited_model_dimensions():
    """The derived dimensions the module docstring states, from the cited config.json fields."""
    dims = {(c.model.name, c.op): c.dims for c in models.CASES}
    assert dims["llama-3.1-70b", "ragged_paged_attention"]["hq"] // dims["llama-3.1-70b", "ragged_paged_attention"]["hkv"] == 8
    assert dims["qwen3-235b-a22b", "ragged_paged_attention"]["hq"] == 16 * dims["qwen3-235b-a22b", "ragged_paged_attention"]["hkv"]
    assert dims["mamba-2-2.7b", "selective_state_update"]["h"] == 80
    assert dims["mamba-2-2.7b", "causal_conv1d_update"]["channels"] == 5376
    assert dims["qwen3-next-80b-a3b", "causal_conv1d_update"]["channels"] == 8192
    assert abs(models.deepseek_sm_scale() - 192 ** -0.5 * (0.1 * __import__("math").log(40) + 1) ** 2) < 1e-15
    assert all(len(set(str(c) for c in models.of_op(op))) == len(models.of_op(op)) for op in models.OPS)


def test_cases_are_the_same_on_every_build():
    mc = models.of_op("causal_conv1d_update")[0]
    a, b = models.build(mc), models.build(mc)
    assert all(a.inputs[k].tobytes() == b.inputs[k].tobytes() for k in a.arrays())


def test_list_names_every_case(cli):
    proc = cli("list", "--profile", "models")
    assert proc.returncode == 0, proc.stderr
    for mc in models.CASES:
        assert any(line.startswith(mc.model.name) and mc.op in line and f" {mc.batch} " in line
                   for line in proc.stdout.splitlines()), str(mc)
    bad = cli("list", "--profile", "ci")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "only the models profile" in bad.stderr


def test_a_slice_runs_on_the_numpy_backend(cli, tmp_path):
    out = tmp_path / "out"
    proc = cli("run", "--backend", "numpy", "--profile", "models", "--ops", "causal_conv1d_update", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:]
    results = cli.report(out)["results"]
    assert sorted(r["id"].split("[")[1] for r in results) == sorted(
        f"numpy-{mc}]" for mc in models.of_op("causal_conv1d_update"))
    assert all(r["status"] == "pass" and r["examples"] == 1 for r in results)
