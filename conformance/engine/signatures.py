"""Whether a backend's op method can be called the way the suite calls the reference (check-backend's
step 3, and the worker's INSPECT request)."""
from __future__ import annotations

import inspect
from typing import Callable


def signature_problems(method: Callable, ref: Callable) -> tuple[list[str], list[str]]:
    """(problems, notes): why `method` cannot be called the way the suite calls the reference `ref`.

    The suite passes arguments by keyword, so each required reference parameter must be accepted by
    name (or by **kwargs), and the backend must not require a parameter the reference does not have. An
    optional reference parameter the method lacks is a note: the suite passes it only with the feature or
    layout that needs it (e.g. `kv_layout` with a claimed layout)."""
    try:
        sig = inspect.signature(method)
    except (TypeError, ValueError):
        return [], []   # a builtin or C method without a signature: nothing to check here
    ref_params = inspect.signature(ref).parameters
    params = sig.parameters
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    problems, notes = [], []
    missing = [n for n, p in ref_params.items() if n not in params and not var_kw and p.default is p.empty]
    if missing:
        problems.append(f"does not accept the argument(s) {', '.join(missing)} of kvconform.reference."
                        f"{ref.__name__}{inspect.signature(ref)}")
    optional = [n for n, p in ref_params.items() if n not in params and not var_kw and p.default is not p.empty]
    if optional:
        notes.append(f"does not accept the optional argument(s) {', '.join(optional)} (fine while it claims no "
                     f"feature or layout that passes them)")
    positional_only = [n for n, p in params.items() if p.kind is p.POSITIONAL_ONLY]
    if positional_only:
        problems.append(f"takes {', '.join(positional_only)} positionally only; the suite passes every "
                        f"argument by keyword")
    extra = [n for n, p in params.items() if n not in ref_params and p.default is p.empty
             and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if extra:
        problems.append(f"requires argument(s) {', '.join(extra)} that kvconform.reference.{ref.__name__} "
                        f"does not have")
    return problems, notes
