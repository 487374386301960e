"""`kvconform check-backend SPEC`: what is wrong with a backend, in plain words, before a full run.

Checks, in order, and reports every finding (not only the first):
1. it loads (entry-point name or package.module:factory) and describes itself (availability, claims), in
   a worker subprocess under --timeout, as a run loads it (loading.py);
2. its claims are valid data (backends/base.py: claims_problems: registered op, feature, layout, limit and
   dtype names, limit values, page sizes and head dims);
3. each claimed op is a method whose signature takes the reference function's arguments
   (kvconform.reference.<op>: same positional order, every keyword accepted), inspected in the worker;
4. each claimed op, called once in the worker on one small case drawn inside its claims, returns
   what the reference returns within the suite's checks (the same comparison as `kvconform run`).

The outcome is a `Check`: findings (defects of the backend: exit 1), the reasons something could not be
checked (it did not load, its claims are unusable, it cannot run here: exit 3, gate.py) and notes.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from kvconform import reference
from kvconform.backends.base import OPS, OpClaims


@dataclass(frozen=True)
class Finding:
    op: str          # "" for the backend as a whole
    problem: str


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


def small_case_strategy(op: str, claims: OpClaims):
    """The strategy of the op's base column (no optional feature): the cases the suite starts from."""
    from .strategies import eviction, metadata, mla, paged_attention, recurrent, recurrent_gated_delta, rotation
    base = {
        "ragged_paged_attention": lambda: paged_attention.attention_cases(claims, paged_attention.ATTENTION_VARIANTS[0]),
        "write_kv": lambda: paged_attention.write_kv_cases(claims, paged_attention.WRITE_VARIANTS[0]),
        "rotate_keys": lambda: rotation.rotate_keys_cases(claims, rotation.ROTATE_VARIANTS[0]),
        "shift_keys": lambda: rotation.shift_keys_cases(claims, rotation.SHIFT_VARIANTS[0]),
        "accumulate_scores": lambda: eviction.accumulate_cases(claims),
        "plan_eviction": lambda: eviction.plan_cases(claims),
        "block_table_to_csr": lambda: metadata.block_table_to_csr_cases(claims),
        "csr_to_block_table": lambda: metadata.csr_to_block_table_cases(claims),
        "append_slot_mapping": lambda: metadata.append_slot_mapping_cases(claims),
        "arena_layout": lambda: metadata.arena_layout_cases(claims),
        "slot_mapping_from_arena": lambda: metadata.slot_mapping_from_arena_cases(claims),
        "page_table_step": lambda: metadata.page_table_step_cases(claims),
        "ragged_paged_attention_csr": lambda: metadata.attention_csr_cases(claims, metadata.csr_attention_variants()[0]),
        "mla_paged_attention": lambda: mla.mla_cases(claims, mla.VARIANTS[0]),
    }
    if op in base:
        return base[op]()
    if op in recurrent.STRATEGIES:
        return recurrent.STRATEGIES[op](claims, recurrent.VARIANTS[op][0])
    return recurrent_gated_delta.STRATEGIES[op](claims, recurrent_gated_delta.VARIANTS[op][0])


def draw_one(strategy, seed: int = 0, tries: int = 20):
    """One small case of `strategy` that exercises something, reproducibly for `seed`: the first drawn
    case whose array inputs are all non-empty (Hypothesis starts from the minimal case, often 0 tokens),
    else the last one drawn."""
    import hypothesis
    import numpy as np
    from hypothesis import HealthCheck, Phase, given, settings

    from . import profiles
    profiles.ignore_source_constants()   # the case must not depend on the literals of the backend's module
    drawn = []

    @hypothesis.seed(seed)
    @settings(max_examples=tries, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def take(case):
        drawn.append(case)
    take()
    full = [c for c in drawn if all(np.size(v) for v in c.inputs.values() if isinstance(v, np.ndarray))]
    return (full or drawn)[0 if full else -1]


@dataclass
class Check:
    findings: list[Finding]     # defects: the command exits 1
    notes: list[str]            # what was checked
    not_checked: list[str]      # why something claimed could not be checked: exit 3 when nothing failed

    @property
    def exit_code(self) -> int:
        from .gate import EXIT_FAILED, EXIT_NOT_CHECKED, EXIT_OK
        return EXIT_FAILED if self.findings else EXIT_NOT_CHECKED if self.not_checked else EXIT_OK


def check_backend(spec: str, *, timeout: float = 120.0) -> Check:
    """What is wrong with backend `spec`, what could not be checked, and what was (for the output)."""
    import pytest

    from .harness import compare_outputs
    from .loading import load
    from .worker import BackendCrash, BackendDeclined, BackendError, BackendProtocolError

    loaded = load(spec, timeout=timeout)
    desc = loaded.description
    if loaded.problem:
        if desc.get("claims_problems"):
            return Check([], [], [f"its claims are invalid: {p}" for p in desc["claims_problems"]])
        return Check([], [], [loaded.problem])
    check = Check([], [f"{desc['name']} {desc['version']}: {desc.get('device') or 'available'}"], [])
    claimed = list(desc["capabilities"])
    if not claimed:
        check.not_checked.append(f"claims none of the ops ({', '.join(OPS)})")
    worker = loaded.worker
    try:
        try:
            methods = worker.inspect(claimed)
        except BackendCrash as exc:
            check.not_checked.append(f"its op methods could not be inspected: {exc}")
            return check
        for op in claimed:
            if not methods[op]["method"]:
                check.findings.append(Finding(op, f"is claimed but the backend has no method {op}"))
            check.findings += [Finding(op, p) for p in methods[op]["problems"]]
            check.notes += [f"{op}: {n}" for n in methods[op]["notes"]]
        for op in claimed:
            if any(f.op == op for f in check.findings):
                continue
            claims = OpClaims.from_json(desc["capabilities"][op])
            try:
                case = draw_one(small_case_strategy(op, claims))
            except pytest.skip.Exception as exc:
                check.findings.append(Finding(op, f"no case lies inside its claims "
                                                  f"({exc.msg.removeprefix('unsupported: ')})"))
                continue
            expected = getattr(reference, op)(**case.inputs)
            try:
                actual, mutated = worker.call(op, case.inputs)
            except BackendCrash as exc:
                check.findings.append(Finding(op, f"crashed on {case.shape_summary()}: {exc}"))
                continue
            except BackendDeclined as exc:
                check.findings.append(Finding(op, f"raised kvconform.Unsupported({str(exc)!r}) for a case inside "
                                                  f"its claims ({case.shape_summary()})"))
                continue
            except BackendError as exc:
                check.findings.append(Finding(op, f"raised {exc.type_name}: {exc.message} on {case.shape_summary()}"))
                continue
            except BackendProtocolError as exc:
                check.findings.append(Finding(op, f"{exc} on {case.shape_summary()}"))
                continue
            except Exception as exc:  # noqa: BLE001 - a result the engine cannot read: one line, no traceback
                check.findings.append(Finding(op, f"returned a result the engine could not read ({type(exc).__name__}: "
                                                  f"{exc}) on {case.shape_summary()}"))
                continue
            if mutated:
                check.findings.append(Finding(op, f"modified or aliased its inputs: {', '.join(mutated)}"))
            try:
                bad = [r for r in compare_outputs(case, expected, actual) if not r.ok]
            except Exception as exc:  # noqa: BLE001 - a result of the wrong structure: said in words
                check.findings.append(Finding(op, f"returned a result that cannot be compared with the reference's "
                                                  f"({type(exc).__name__}: {exc}) on {case.shape_summary()}"))
                continue
            if bad and bad[0].kind == "structure":    # nothing compared: the fields do not match (protocol.py)
                check.findings.append(Finding(op, f"{bad[0].problem} on {case.shape_summary()}"))
            elif bad:
                check.findings.append(Finding(op, f"differs from the reference on {case.shape_summary()}: "
                                                  + "; ".join(r.summary() for r in bad)))
            else:
                check.notes.append(f"{op}: one small case matches the reference ({case.shape_summary()})")
    finally:
        loaded.stop()
    return check
