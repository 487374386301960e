"""Every golden of the rotation, eviction and metadata suites requires exactly what its inputs use (issue 31):
a golden that uses a feature, dtype or size it does not require fails a backend that rightly does not claim
it ("claims more than it supports"), and one that requires more than it uses skips a backend that could run
it. Each table's `requires` must equal what the family derives from the built case
(strategies/<family>.py: golden_requirements)."""
from __future__ import annotations

import numpy as np
import pytest

from kvconform.conformance.case import Case
from kvconform.conformance.strategies import eviction as ev
from kvconform.conformance.strategies import metadata as md
from kvconform.conformance.strategies import rotation as ro
from kvconform.conformance.suite import test_eviction as ev_suite
from kvconform.conformance.suite import test_metadata as md_suite
from kvconform.conformance.suite import test_rotation as ro_suite


def _accumulate_golden(name):
    (acc, counts, step), _ = ev_suite.ACCUMULATE_GOLDEN[name]
    case = Case("accumulate_scores", dict(acc=np.array(acc, np.float64), counts=np.array(counts, np.int32),
                                          step_scores=np.array(step, np.float64)), {})
    return case, {"dtype": "float64"}    # test_accumulate_golden requires dtype float64 for each


GOLDENS = (
    [(f"rotate_keys/{n}", lambda n=n: (ro_suite.ROTATE_GOLDENS[n][0]()[0], ro_suite.ROTATE_GOLDENS[n][2]), ro)
     for n in ro_suite.ROTATE_GOLDENS]
    + [(f"shift_keys/{n}", lambda n=n: (ro_suite.SHIFT_GOLDENS[n][0]()[0], ro_suite.SHIFT_GOLDENS[n][2]), ro)
       for n in ro_suite.SHIFT_GOLDENS]
    + [(f"plan_eviction/{n}", lambda n=n: (ev_suite.PLAN_GOLDEN[n][0]()[0], ev_suite.PLAN_GOLDEN[n][2]), ev)
       for n in ev_suite.PLAN_GOLDEN]
    + [(f"accumulate_scores/{n}", lambda n=n: _accumulate_golden(n), ev) for n in ev_suite.ACCUMULATE_GOLDEN]
    + [(f"metadata/{n}", lambda n=n: (md_suite.GOLDENS[n][0]()[0], md_suite.GOLDENS[n][3]), md)
       for n in md_suite.GOLDENS]
)


@pytest.mark.parametrize("name, build, family", GOLDENS, ids=[g[0] for g in GOLDENS])
def test_golden_requires_exactly_what_it_uses(name, build, family):
    case, requires = build()
    used = family.golden_requirements(case)
    declared = {k: (tuple(sorted(v)) if k == "features" else v) for k, v in requires.items()}
    assert declared == used, f"{name}: declares {declared}, its inputs use {used}"


def test_some_goldens_run_at_real_sizes():
    """Issue 31: a backend claiming only real head dims and page sizes runs goldens of every family."""
    real = [g for g in GOLDENS if (family_req := g[1]()[1]).get("page_size", 16) >= 16
            and family_req.get("head_dim", 64) >= 64]
    ops = {g[0].split("/")[0] for g in real}
    assert {"rotate_keys", "shift_keys", "plan_eviction", "accumulate_scores", "metadata"} <= ops
