"""The test's view: what one suite test does with a backend, and what it says when the backend fails.

`core.py` the `kvc` object a suite test receives (claims, call, reference, check, expect, for_all, the
failure message) and `conformance_test`; `outputs.py` the comparison of a result with the reference's
through the op's contract; `diagnosis.py` the variations re-run after a failure; `goldens.py` running
hand-worked goldens; `profiles.py` the profiles' Hypothesis settings, budgets and timeouts.
Imports the engine and the strategies, never run control, reports or entry points.
"""
import importlib

#: the public names, and the module of each: imported on first use, so that reading `harness.profiles`
#: (as `kvconform run` does before pytest starts) imports neither Hypothesis nor pytest
_PUBLIC = {"ConformanceFailure": "failures", "Harness": "core", "conformance_test": "core",
           "compare_outputs": "outputs", "poison_expectation": "outputs"}
__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
