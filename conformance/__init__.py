"""kvconform.conformance: the engine that checks a backend against the reference (map: conformance/README.md,
"The layers").

Modules that moved when the package was laid out in layers keep their old import paths for a while:
`import kvconform.conformance.case` still works (it is `kvconform.conformance.engine.case`, with a
DeprecationWarning naming the new path). `MOVED` lists them; the paths users type in a backend spec
(`kvconform.conformance.mutants.<family>:<Class>`) and the entry points (`kvconform`,
`pytest --pyargs kvconform.conformance.suite`, `-p kvconform.conformance.plugin`) did not change.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: old module (under kvconform.conformance) -> its module now
MOVED = {
    "artifacts": "engine.artifacts", "backend_text": "engine.backend_text", "case": "engine.case",
    "compare": "engine.compare", "flaky": "engine.flaky", "loading": "engine.loading",
    "protocol": "engine.protocol", "rejection": "engine.rejection", "strided": "engine.strided",
    "timing": "engine.timing", "tolerance": "engine.tolerance", "worker": "engine.worker",
    "diagnosis": "harness.diagnosis", "goldens": "harness.goldens", "profiles": "harness.profiles",
    "expectations": "run.expectations", "gate": "run.gate", "interrupt": "run.interrupt",
    "outdir": "run.outdir", "progress": "run.progress", "coverage": "report.coverage",
    "models": "strategies.models", "scale": "strategies.scale", "backend_check": "cli.check_backend",
    "strategies.recurrent_reach": "strategies.recurrent.reach",
    "strategies.recurrent_store": "strategies.recurrent.store",
    "strategies.recurrent_gated_delta": "strategies.recurrent.gated_delta",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old path of MOVED to the module itself (one module object under both names)."""

    def find_spec(self, fullname, path=None, target=None):
        old = fullname[len(__name__) + 1:] if fullname.startswith(__name__ + ".") else None
        return importlib.util.spec_from_loader(fullname, self) if old in MOVED else None

    def create_module(self, spec):
        new = f"{__name__}.{MOVED[spec.name[len(__name__) + 1:]]}"
        warnings.warn(f"{spec.name} moved to {new}; import it from there (the old path will be removed)",
                      DeprecationWarning, stacklevel=3)
        return importlib.import_module(new)

    def exec_module(self, module):
        pass


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
