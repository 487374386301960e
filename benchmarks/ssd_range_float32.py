"""How far a float32 chunked SSD kernel is from the reference in the `range` column's tiny-output regime.

Draws `ssd_chunked_scan` range cases (8 tokens, one chunk of 8, softplus on; spec/recurrent.md RS-43) and
runs two float32 kernels on each: the permission backend `ssd_chunked_float32` (softplus through
`log1p(exp(x))`, spec RS-9) and the same kernel with softplus as `log(1 + exp(x))` (what rounds
softplus(-30) = 9.4e-14 to 0). Prints, per regime, the worst error / allowed of each under the suite's own
checks (NU-R2). Usage: python benchmarks/ssd_range_float32.py [examples]
"""
from __future__ import annotations

import sys
import warnings

import numpy as np
from hypothesis.errors import NonInteractiveExampleWarning

from kvconform import reference
from kvconform.backends.numpy import NumpyBackend
from kvconform.conformance.engine.compare import compare_field
from kvconform.conformance.permissions import recurrent as perm
from kvconform.conformance.strategies import recurrent as rs


def _log_one_plus_exp(x):
    x = x.astype(np.float32)
    with np.errstate(over="ignore"):
        return np.where(x > 20, x, np.log(np.float32(1) + np.exp(x))).astype(np.float32)


def main(examples: int) -> None:
    warnings.simplefilter("ignore", NonInteractiveExampleWarning)
    claims = NumpyBackend().capabilities()["ssd_chunked_scan"]
    variant = next(v for v in rs.SSD_VARIANTS if v.name == "range")
    strategy = rs.ssd_cases(claims, variant)
    worst: dict = {}
    for _ in range(examples):
        case = strategy.example()
        if not case.inputs.get("dt_softplus"):
            continue
        expected = reference.ssd_chunked_scan(**case.inputs)._asdict()
        for name, softplus in (("log1p(exp)", perm._softplus32), ("log(1+exp)", _log_one_plus_exp)):
            saved, perm._softplus32 = perm._softplus32, softplus
            try:
                actual = perm.SsdChunkedFloat32().ssd_chunked_scan(**case.inputs)._asdict()
            finally:
                perm._softplus32 = saved
            checks = rs.ssd_checks(case, expected, actual)
            results = [compare_field(field, actual.get(field), expected[field], tol, mask)
                       for field, (tol, mask) in checks.items()]
            key = (case.params.get("regime"), name)
            top = max(results, key=lambda r: r.error_ratio)
            if top.error_ratio >= worst.get(key, (0.0, ""))[0]:
                worst[key] = (top.error_ratio, top.summary())
    for (regime, name), (ratio, summary) in sorted(worst.items()):
        print(f"{regime:<20} softplus {name:<11} worst error/allowed {ratio:.3g}  ({summary})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
