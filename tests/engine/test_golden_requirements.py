"""Every golden requires every feature its case uses, and its hand-worked value is the reference's (issue 31).

Generic over every suite module that declares its goldens as `GOLDENS`, a tuple of
`kvconform.conformance.strategies.golden_cases.Golden` (name, op, build(options), clauses, features, options), with a
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
from kvconform.conformance.harness import goldens
from kvconform.conformance import suite
from kvconform.conformance.harness import compare_outputs

#: suite modules with golden tests not (yet) declared as `GOLDENS` of goldens.Golden, and why: a family
#: adopting the structure removes its line (the test below then fails until it does)
NOT_DECLARED: dict[str, str] = {}


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
    assert {"test_recurrent", "test_recurrent_gated_delta", "test_paged_attention", "test_mla", "test_rotation",
            "test_eviction", "test_metadata", "test_recurrent_store"} <= declaring
    assert with_goldens - declaring <= set(NOT_DECLARED), sorted(with_goldens - declaring - set(NOT_DECLARED))
    assert not declaring & set(NOT_DECLARED), f"declared now, remove from NOT_DECLARED: {declaring & set(NOT_DECLARED)}"


@pytest.mark.parametrize("golden", _declared(), ids=lambda g: f"{g.op}:{g.name}")
def test_golden_requires_what_it_uses(golden):
    family = importlib.import_module(f"kvconform.conformance.strategies.{OPS[golden.op]}")
    registered = set(FEATURES.get(golden.op, ()))   # the metadata bookkeeping ops have no features
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
#: the smallest page size a serving stack uses (vLLM's default block size 16)
_REAL_PAGE = 16


@pytest.mark.parametrize("op", sorted({g.op for g in _declared()}))
def test_some_golden_at_real_sizes(op):
    """A backend claiming only real head / state sizes (64 … 256) and page sizes (16 …) still runs goldens
    (issue 31); an op with none of these dimensions runs every golden it has."""
    family = importlib.import_module(f"kvconform.conformance.strategies.{OPS[op]}")
    sizes = [family.USES[op](g.build(frozenset())[0])[1] for g in _declared() if g.op == op]
    real = [s for s in sizes if all(s[k] >= 64 for k in _REAL if k in s) and s.get("page_size", _REAL_PAGE) >= _REAL_PAGE]
    assert real, f"no golden of {op} at real sizes (every one of {_REAL} it has >= 64, page size >= 16): {sizes}"


def _golden(op: str, name: str):
    return next(g for g in _declared() if g.op == op and g.name == name)


def test_space_carries_the_layout_a_golden_needs():
    """What USES puts in a golden's space is judged against the claims: an interleaved rotation golden is
    outside a backend that claims only the half layout (constraints.outside reads `layout`)."""
    from kvconform.backends.base import OpClaims
    from kvconform.conformance.strategies import rotation as ro
    from kvconform.conformance.strategies.constraints import outside
    f32 = dict(dtypes=("float32",), kv_dtypes=("float32",))
    _, space = ro.USES["rotate_keys"](_golden("rotate_keys", "interleaved_per_block").build(frozenset())[0])
    assert outside(OpClaims(**f32, layouts=("half",)), space) == ["does not claim layout=interleaved"]
    assert not outside(OpClaims(**f32, layouts=("half", "interleaved")), space)
