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

from dataclasses import dataclass

from kvconform import reference
from kvconform.backends.base import OPS, OpClaims

from .arguments import UsageError


@dataclass(frozen=True)
class Finding:
    op: str          # "" for the backend as a whole
    problem: str


def small_case_strategy(op: str, claims: OpClaims):
    """The strategy of the op's base column (no optional feature): the cases the suite starts from."""
    from kvconform.conformance.strategies import eviction, metadata, mla, paged_attention, recurrent, rotation
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
    return recurrent.STRATEGIES[op](claims, recurrent.VARIANTS[op][0])


def draw_one(strategy, seed: int = 0, tries: int = 20):
    """One small case of `strategy` that exercises something, reproducibly for `seed`: the first drawn
    case whose array inputs are all non-empty (Hypothesis starts from the minimal case, often 0 tokens),
    else the last one drawn."""
    import hypothesis
    import numpy as np
    from hypothesis import HealthCheck, Phase, given, settings

    from kvconform.conformance.harness import profiles
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
        from kvconform.conformance.run.gate import EXIT_FAILED, EXIT_NOT_CHECKED, EXIT_OK
        return EXIT_FAILED if self.findings else EXIT_NOT_CHECKED if self.not_checked else EXIT_OK


def check_backend(spec: str, *, timeout: float = 120.0) -> Check:
    """What is wrong with backend `spec`, what could not be checked, and what was (for the output)."""
    import pytest

    from kvconform.conformance.engine.call_errors import (BackendCrash, BackendDeclined, BackendError,
                                                          BackendProtocolError)
    from kvconform.conformance.engine.loading import load
    from kvconform.conformance.harness.outputs import compare_outputs

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


def cmd_check_backend(args) -> int:
    from kvconform import backends
    try:
        backends.resolve(args.backend)
    except backends.BackendLoadError as exc:
        raise UsageError(str(exc)) from None
    check = check_backend(args.backend, timeout=args.timeout)
    for note in check.notes:
        print(f"ok    {note}")
    for f in check.findings:
        print(f"WRONG {f.op + ': ' if f.op else ''}{f.problem}")
    for reason in check.not_checked:
        print(f"NOT CHECKED {args.backend}: {reason}")
    if check.findings:
        print(f"kvconform check-backend: {len(check.findings)} problem(s) found (exit 1)")
    elif check.not_checked:
        print("kvconform check-backend: NOT CHECKED (exit 3): the backend could not be checked, see above")
    else:
        print("kvconform check-backend: no problem found (now run `kvconform run --backend "
              f"{args.backend} --profile ci`)")
    return check.exit_code
