"""The dimension registry (conformance/dimensions) knows every size the strategies draw.

For every op: each column's strategy draws a few derandomized examples with the numpy backend's claims;
every axis of every array input is declared by some dimension of the op, and every dimension's size lies in
[0, real_max]; ordinary (non-reach) columns stay within small_max, the size past which the generated
threshold mutants must be caught by reach columns alone (spec/numerics.md "Reach by dimension").
"""
from __future__ import annotations

import numpy as np
import pytest
from dimension_columns import EXAMPLES, PENDING, columns, draw

from kvconform.backends.base import OPS
from kvconform.backends.numpy import make_backend
from kvconform.conformance.dimensions import REGISTRY, declares, dimensions, measure
from kvconform.conformance.dimensions.model import Dimension

def test_every_op_has_dimensions():
    missing = set(OPS) - set(REGISTRY) - PENDING
    assert not missing, f"ops without declared dimensions: {sorted(missing)}"
    assert not set(REGISTRY) - set(OPS), f"dimensions of unknown ops: {sorted(set(REGISTRY) - set(OPS))}"
    for op, dims in REGISTRY.items():
        assert dims and all(isinstance(d, Dimension) and d.source for d in dims), op


def test_reach_values_pass_every_tile_with_a_tail():
    d = Dimension("x", ("x[0]",), 300, "test", small_max=8, unwritten=("out[0]",))
    assert d.reach_values(budget=10 ** 6) == (300, 16, 32, 64, 128, 256)
    assert d.reach_values(budget=100) == (97, 16, 32, 64)   # 64 + 32 + 1: past 64, not a multiple of 16
    assert d.thresholds() == (16, 32, 64, 128, 256)
    assert Dimension("y", ("y[0]",), 64, "test", small_max=8, unwritten=("out[0]",)).thresholds() == (16, 32)


def test_measure_reads_every_form():
    x = dict(q=np.zeros((5, 3, 2)), cu=np.array([0, 2, 7]), n=4, d=np.array([-9, 3]), s=np.zeros((2, 3)))
    assert [measure(r, x) for r in ("q[1]", "n", "max(cu)", "max(diff(cu))", "max(abs(d))", "len(q)",
                                    "s[0]/2", "s[0]/3", "absent[0]")] == [3, 4, 7, 5, 9, 5, 2, None, None]
    with pytest.raises(ValueError, match="axis reference"):
        measure("q[", x)


@pytest.mark.parametrize("op", sorted(set(OPS) - PENDING))
def test_drawn_sizes_lie_in_the_registry(op):
    claims = make_backend().capabilities()[op]
    dims = dimensions(op)
    problems = []
    for name, reach, strategy in columns(op):
        try:
            cases = draw(strategy(claims), EXAMPLES)
        except pytest.skip.Exception:
            continue
        for case in cases:
            x = case.inputs
            for arg, value in x.items():
                if isinstance(value, np.ndarray):
                    for axis in range(value.ndim):
                        if not declares(dims, arg, axis, value.ndim):
                            problems.append(f"{name}: axis {axis} of {arg} {value.shape} is no dimension's")
            for d in dims:
                top = d.real_max if reach else d.small_max
                for ref in d.axes:
                    size = measure(ref, x)
                    if size is not None and not 0 <= size <= top:
                        problems.append(f"{name}: {d.name} {ref} = {size} outside [0, "
                                        f"{'real_max' if reach else 'small_max'} {top}]")
    assert not problems, "\n".join(sorted(set(problems)))


def test_list_dimensions_prints_the_registry(cli):
    proc = cli("list", "--dimensions", "ragged_paged_attention")
    assert proc.returncode == 0, proc.stderr
    for d in dimensions("ragged_paged_attention"):
        assert d.name in proc.stdout and d.source in proc.stdout
    assert "first_tile past T=16,32,64,128,256" in proc.stdout          # pages_per_seq's mutants
    assert "page_indices narrowed to 16 bits" in proc.stdout
    assert "crossed with the range regimes" in proc.stdout                # keys (NU-15 crossed reach)
    bad = cli("list", "--dimensions", "ragged_attention")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--dimensions: unknown op 'ragged_attention'" in bad.stderr
