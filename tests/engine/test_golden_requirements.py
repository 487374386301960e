"""Every golden requires every feature its case uses, and its hand-worked value is the reference's (issue 31).

Generic over every suite module that declares its goldens as `GOLDENS`, a tuple of
`kvconform.conformance.goldens.Golden` (name, op, build(options), clauses, features, options), with a
`USES[op](case) -> (features, space)` table in its family's strategy module (conformance/goldens.py). Each
restatement (every subset of a golden's options) is built and checked: the features its case uses are
exactly the golden's required features plus the options turned on, all registered for the op
(backends/base.py FEATURES), and the reference agrees with the hand-worked value under the op's checks. A
golden listed with no features that passed D, z and dt_softplus anyway (`ssu_mamba1`) failed every backend
that rightly claims none of them ("claims more than it supports"); one using G = 2 required only `mamba2`.
"""
from __future__ import annotations

import importlib
import pkgutil

import pytest

from kvconform import reference
from kvconform.backends.base import FEATURES, OPS
from kvconform.conformance import goldens
from kvconform.conformance import suite
from kvconform.conformance.harness import compare_outputs

#: suite modules with golden tests not (yet) declared as `GOLDENS` of goldens.Golden, and why: a family
#: adopting the structure removes its line (the test below then fails until it does)
NOT_DECLARED = {
    "test_rotation": "goldens as parametrized tests",
    "test_eviction": "goldens as parametrized tests",
    "test_metadata": "goldens as parametrized tests (and ragged_paged_attention_csr's csr_golden, MD-23)",
    "test_recurrent_store": "a multi-step golden script; recurrent_store_step has no features",
}


def _suite_modules():
    return {info.name: importlib.import_module(f"{suite.__name__}.{info.name}")
            for info in pkgutil.iter_modules(suite.__path__) if info.name.startswith("test_")}


def _has_golden_tests(module) -> bool:
    return any(getattr(getattr(module, name), "kvconform", {}).get("layer") == "golden" or any(
        m.kwargs.get("layer") == "golden" for m in getattr(getattr(module, name), "pytestmark", [])
        if getattr(m, "name", "") == "kvconform") for name in dir(module) if name.startswith("test_"))


def _declared():
    return [g for module in _suite_modules().values() for g in getattr(module, "GOLDENS", ())
            if isinstance(g, goldens.Golden)]


def test_every_module_with_goldens_declares_them():
    modules = _suite_modules()
    with_goldens = {name for name, m in modules.items() if _has_golden_tests(m)}
    declaring = {name for name, m in modules.items()
                 if isinstance(getattr(m, "GOLDENS", None), tuple) and all(
                     isinstance(g, goldens.Golden) for g in m.GOLDENS)}
    assert {"test_recurrent", "test_recurrent_gated_delta", "test_paged_attention", "test_mla"} <= declaring
    assert with_goldens - declaring <= set(NOT_DECLARED), sorted(with_goldens - declaring - set(NOT_DECLARED))
    assert not declaring & set(NOT_DECLARED), f"declared now, remove from NOT_DECLARED: {declaring & set(NOT_DECLARED)}"


@pytest.mark.parametrize("golden", _declared(), ids=lambda g: f"{g.op}:{g.name}")
def test_golden_requires_what_it_uses(golden):
    family = importlib.import_module(f"kvconform.conformance.strategies.{OPS[golden.op]}")
    registered = set(FEATURES[golden.op])
    assert set(golden.features) | set(golden.options) <= registered, "unregistered feature names"
    for options in golden.restatements():
        case, expected = golden.build(options)
        used, space = family.USES[golden.op](case)
        declared = set(golden.features) | options
        assert used == declared, (f"{golden.name} with options {sorted(options)} uses {sorted(used)} but "
                                  f"requires {sorted(declared)}")
        case.params.update(space)
        actual = getattr(reference, golden.op)(**case.inputs)
        bad = [r.summary() for r in compare_outputs(case, expected, actual) if not r.ok]
        assert not bad, f"{golden.name} with options {sorted(options)}: the hand-worked value is not the reference's: {bad}"


_REAL = ("channels", "head_dim", "state_size", "key_dim", "value_dim")


@pytest.mark.parametrize("op", sorted({g.op for g in _declared()}))
def test_some_golden_at_real_sizes(op):
    """A backend claiming only real head / state sizes (64 … 256) still runs goldens (issue 31)."""
    family = importlib.import_module(f"kvconform.conformance.strategies.{OPS[op]}")
    sizes = [family.USES[op](g.build(frozenset())[0])[1] for g in _declared() if g.op == op]
    real = [s for s in sizes if any(k in s for k in _REAL) and all(s[k] >= 64 for k in _REAL if k in s)]
    assert real, f"no golden of {op} at real sizes (every one of {_REAL} it has >= 64): {sizes}"
