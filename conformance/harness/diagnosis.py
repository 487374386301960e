"""Why a failure fails: re-run its case with variations and say what each one does.

Runs once per failing test, after Hypothesis has shrunk the failure (the plugin calls
`Harness.diagnose_failure` when the test body has raised), and never changes the verdict. A failure is
one of three symptoms: the backend's result is wrong (`fail`), its call raised (`raises`), or its worker
crashed or hung (`crash`); the diagnosis re-runs the case in the backend's worker, so a variation that
crashes is a crash of that variation, and each variation's outcome is said in those terms:

- a **poison** failure (`Harness.check_poison`) is re-run with each declared poison region alone
  ("fails only when V slots past kv_len in the last used page hold NaN", "crashes only when ...");
- a **differential** failure (`Harness.check`, a golden's hand-worked value, or a call that raised or
  crashed) is re-run with each optional feature turned off and each narrow input widened exactly
  (bfloat16 -> float32), from the family's `DIAGNOSIS[op](case)` in `strategies/<family>.py`
  ("passes with soft_cap off; still fails with q widened to float32", "the crash disappears with
  silu off", "raises with K/V widened to float32 (TypeError: ...)");
- a **call-history** failure is first re-run as the same case twice in a row: if that fails too, the
  calls before it do not matter and the differential variations follow.

Outcomes of a variation: `pass`, `fail`, `raises` (with the error's first line), `crash` (a hang
included), `declined` (the backend raised kvconform.Unsupported: skipped, said once), `outside` (a
dtype the backend claims for no input of the op: skipped without a call), `n/a` (the reference rejects
the variation: a bug of the suite's variation, said so). A summary never counts a raise, a decline or a
crash as a pass, and never concludes "call history" or "several regions together" from variations that
did not run. After a variation hangs, the rest are not run (each could cost the call timeout).

**Hints.** An input the spec calls a hint (`HINTS`: `chunk_size`, RS-18 / RS-33: results must not
depend on it) may be ignored or rounded by a backend (issue 31 reports a vLLM kernel rounding the chunk
size to 16; the upstream line is not cited here, it was not found), and then a variation of it tests
nothing. So a variation that changes only hints also says whether the backend
honoured it: its output is compared bit for bit with the backend's output on the original case (`hint
ignored` when identical while the reference's differ: the variation then tells nothing; `hint without
effect` when the reference's are identical too; `hint honoured` when they differ and the original gives
the same bits when called again, or when the outcome changed; `hint unknown` otherwise, with why).
"""
from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import numpy as np

from kvconform.backends.base import OPS

from kvconform.conformance.engine import strided
from kvconform.conformance.engine.case import Case
from kvconform.conformance.engine.call_errors import (BackendCrash, BackendDeclined, BackendError, BackendProtocolError, BackendUnavailable, EngineError, exception_line)

#: inputs that are hints (results must not depend on them beyond their numerics class), with the clauses
HINTS = {"chunk_size": "RS-18, RS-33"}

#: how a variation that passes / shows the original symptom is said, per symptom of the original failure
_PASSES = {"fail": "passes with", "raises": "passes (no error) with", "crash": "the crash disappears with"}
_SAME = {"fail": "still fails with", "raises": "still raises with", "crash": "still crashes with"}
#: how other outcomes are said
_OTHER = {"fail": "gives a wrong result (no error) with", "raises": "raises with", "crash": "crashes with"}
_VERB = {"fail": "fails", "raises": "raises", "crash": "crashes"}
_INFINITIVE = {"fail": "fail", "raises": "raise", "crash": "crash"}
BAD = ("fail", "raises", "crash")


class Run(NamedTuple):
    """One call of a variation: outcome, detail (one line) and the backend's result (None unless returned)."""
    outcome: str
    detail: str
    actual: Any = None


def diagnose(kvc, kind: tuple, symptom: str = "fail") -> dict | None:
    """{"summary": one line, "variations": [{"name", "outcome", "detail", ...}]} or None (nothing to vary).

    kind: ("poison", clean case, the backend's clean result) | ("differential", case) | ("history", case);
    symptom: "fail" | "raises" | "crash", what the original failure was."""
    if kind[0] == "poison":
        return _diagnose_poison(kvc, kind[1], kind[2], symptom)
    if kind[0] == "differential":
        return _diagnose_differential(kvc, kind[1], symptom)
    if kind[0] == "history":
        return _diagnose_history(kvc, kind[1], symptom)
    return None


# --- the three kinds -----------------------------------------------------------------------------

def _diagnose_history(kvc, case: Case, symptom: str) -> dict:
    """A history failure whose case also fails right after an identical call is a plain error of the
    backend (the calls before it do not matter): say so, with the differential variations."""
    history = {"summary": "the same inputs give another result depending on the calls before them "
                          "(state kept between calls, or a cache keyed by shape or address)", "variations": []}
    try:
        expected = kvc.reference(case)
    except Exception as exc:
        return {"summary": f"no diagnosis: the reference rejects the case ({str(exc)[:160]})", "variations": []}
    first = _run(kvc, case, expected)             # the call before the next one is this very case
    again = _run(kvc, case, expected) if first.outcome not in ("crash", "declined", "n/a") else first
    step = {"name": "same case called twice", "outcome": again.outcome, "detail": again.detail}
    if again.outcome == "pass":
        return dict(history, variations=[step])
    if again.outcome not in BAD:
        return {"summary": f"cannot tell whether it depends on the calls before it: the same case called twice "
                           f"is {again.outcome} ({again.detail})", "variations": [step]}
    inner = _diagnose_differential(kvc, case, again.outcome) or {"summary": "", "variations": []}
    summary = (f"not call history: {_VERB[again.outcome]} against the reference even right after an identical "
               f"call" + (f" ({again.detail[:160]})" if again.outcome == "raises" else "")
               + (f"; {inner['summary']}" if inner["summary"] else ""))
    return {"summary": summary, "variations": [step] + inner["variations"]}


def region_phrase(case: Case, name: str) -> str:
    """'V slots past kv_len in the last used page (v_tail) hold NaN'."""
    region = next(r for r in case.poison if r.name == name)
    value = region.value
    if value is None:
        dt = np.asarray(case.inputs[region.input]).dtype
        held = "-128" if dt == np.int8 else "NaN"
    elif isinstance(value, float) and not np.isfinite(value):
        held = repr(float(value))
    else:
        held = f"{value!r} (out of range)"
    return f"{region.what or name} ({name}) hold {held}"


def _diagnose_poison(kvc, case: Case, clean_actual: Any, symptom: str) -> dict:
    from kvconform.conformance.harness.outputs import compare_outputs, poison_expectation
    names = case.poison_names()
    clean_ref = kvc.reference(case)
    if symptom == "fail":
        # The clean result judged against itself fails only for reasons that have nothing to do with poison
        # (an output narrower than the case requires, a wrong structure): say so instead of blaming a region.
        own = [r for r in compare_outputs(case, clean_actual, clean_actual) if not r.ok]
        if own:
            return {"summary": "fails without any poison too, so not a poison finding: " + own[0].summary()[:200],
                    "variations": [{"name": "no poison", "outcome": "fail", "detail": own[0].summary()[:240]}]}
    variations = []
    for name in names:
        variant = case.with_poison([name])
        entry = {"name": f"only {name} poisoned", "region": name}
        try:
            expected = poison_expectation(clean_ref, kvc.reference(variant), clean_actual)
        except Exception as exc:   # the reference rejects it: a suite bug, say so rather than guess
            variations.append(dict(entry, outcome="n/a", detail=f"reference: {str(exc)[:200]}"))
            continue
        run = _run(kvc, variant, expected)
        variations.append(dict(entry, outcome=run.outcome, detail=run.detail))
        if _hung(run):
            variations += [{"name": f"only {n} poisoned", "region": n, "outcome": "not run",
                            "detail": "after a variation hung"} for n in names[names.index(name) + 1:]]
            break
    bad = [v for v in variations if v["outcome"] in BAD]
    ran = [v for v in variations if v["outcome"] in BAD + ("pass",)]
    if bad and len(bad) < len(ran):
        groups: dict[str, list[str]] = {}
        for v in bad:
            groups.setdefault(v["outcome"], []).append(region_phrase(case, v["region"]))
        parts = [f"{_VERB[outcome]} only when " + "; or when ".join(phrases) for outcome, phrases in groups.items()]
        summary = "; ".join(parts)
    elif bad:
        summary = (f"{_VERB[symptom]} whichever don't-care region holds poison: "
                   + ", ".join(f"{v['region']} ({v['outcome']})" if v["outcome"] != symptom else v["region"]
                               for v in bad))
    elif ran and len(ran) == len(names):
        summary = (f"no region alone makes it {_INFINITIVE[symptom]}; only poison in several regions together "
                   f"does (" + ", ".join(names) + ")")
    elif ran:
        summary = "passes with each region that could be run alone (" + ", ".join(v["region"] for v in ran) + ")"
    else:
        summary = "no region could be run alone"
    skipped = _skipped(variations)
    return {"summary": summary + (f"; {skipped}" if skipped else ""), "variations": variations}


def _diagnose_differential(kvc, case: Case, symptom: str) -> dict | None:
    module = importlib.import_module(f"kvconform.conformance.strategies.{OPS[case.op]}")
    make = getattr(module, "DIAGNOSIS", {}).get(case.op) or (lambda _: [])
    variations = []
    original: dict = {}                        # the backend's runs of the original case, for hint checks
    # a strided case (NU-14): first every argument contiguous, then each alone strided
    found = strided.diagnosis_variations(case) + [(v[0], v[1]) for v in make(case) if v is not None]
    for i, (label, variant) in enumerate(found):
        entry = {"name": label}
        gap = _outside_claims(kvc, case, variant)
        if gap:
            variations.append(dict(entry, outcome="outside", detail=gap))
            continue
        try:
            expected = kvc.reference(variant)
        except Exception as exc:
            variations.append(dict(entry, outcome="n/a", detail=f"reference: {str(exc)[:160]}"))
            continue
        run = _run(kvc, variant, expected)
        entry.update(outcome=run.outcome, detail=run.detail)
        hints = _hints_changed(case, variant)
        if hints and run.outcome not in ("declined", "n/a"):
            entry["hint"], why = _hint_honoured(kvc, case, expected, run, original, hints)
            entry["name"] = f"{label}, hint {entry['hint']} ({why})"
        variations.append(entry)
        if _hung(run):
            variations += [{"name": v[0], "outcome": "not run", "detail": "after a variation hung"}
                           for v in found[i + 1:]]
            break
    if not variations:
        return None
    return {"summary": summarize(variations, symptom), "variations": variations}


# --- wording -------------------------------------------------------------------------------------

def summarize(variations: list[dict], symptom: str) -> str:
    """One line: the variations that pass, those with another outcome than the original's, those with
    the same, then the skipped ones ("passes with soft_cap off; raises with q widened to float32
    (TypeError: ...); still fails with sinks off; skipped what the backend declines: ...")."""
    parts = []
    passing = [v["name"] for v in variations if v["outcome"] == "pass"]
    if passing:
        parts.append(f"{_PASSES[symptom]} {', '.join(passing)}")
    for outcome in BAD:
        if outcome == symptom:
            continue
        names = [_with_error(v) for v in variations if v["outcome"] == outcome]
        if names:
            parts.append(f"{_OTHER[outcome]} {', '.join(names)}")
    same = [_with_error(v) if symptom == "raises" else v["name"] for v in variations if v["outcome"] == symptom]
    if same:
        parts.append(f"{_SAME[symptom]} {', '.join(same)}")
    if not parts:
        parts.append("no variation could be run")
    skipped = _skipped(variations)
    if skipped:
        parts.append(skipped)
    return "; ".join(parts)


def _with_error(v: dict) -> str:
    return f"{v['name']} ({v['detail'][:120]})" if v["outcome"] == "raises" else v["name"]


def _skipped(variations: list[dict]) -> str:
    """The skipped variations, each reason said once."""
    parts = []
    declined = [v for v in variations if v["outcome"] == "declined"]
    if declined:
        parts.append(f"skipped what the backend declines ({declined[0]['detail'][:120]}): "
                     + ", ".join(v["name"] for v in declined))
    outside = [v for v in variations if v["outcome"] == "outside"]
    if outside:
        parts.append(f"skipped outside its claims ({outside[0]['detail']}): " + ", ".join(v["name"] for v in outside))
    rejected = [v for v in variations if v["outcome"] == "n/a"]
    if rejected:
        parts.append("not run (" + "; ".join(f"{v['name']}: {v['detail'][:120]}" for v in rejected) + ")")
    later = [v for v in variations if v["outcome"] == "not run"]
    if later:
        parts.append("not run after a variation hung: " + ", ".join(v["name"] for v in later))
    return "; ".join(parts)


# --- running one variation -----------------------------------------------------------------------

def _run(kvc, case: Case, expected: Any) -> Run:
    """Call the backend on `case` in its worker (no failure recording) and judge it against `expected`."""
    from kvconform.conformance.harness.outputs import compare_outputs
    try:
        actual, mutated = kvc.worker.call(case.op, case.inputs, timeout=kvc.call_timeout, layouts=strided.layouts_of(case))
    except BackendError as exc:
        first = (exception_line(exc.message).splitlines() or [""])[0]
        return Run("raises", f"{exc.type_name}: {first[:160]}")
    except BackendProtocolError as exc:
        return Run("raises", f"protocol: {str(exc)[:200]}")
    except BackendDeclined as exc:
        return Run("declined", f"kvconform.Unsupported: {str(exc)[:160]}")
    except BackendCrash as exc:
        return Run("crash", str(exc)[:200])
    except (BackendUnavailable, EngineError) as exc:   # a worker that cannot restart; the engine's own error
        return Run("n/a", f"{type(exc).__name__}: {str(exc)[:160]}")
    if mutated:
        return Run("fail", "modified its inputs or returned them: " + "; ".join(mutated)[:200], actual)
    try:
        results = compare_outputs(case, expected, actual)
    except Exception as exc:
        return Run("n/a", f"not comparable: {type(exc).__name__}: {str(exc)[:160]}", actual)
    bad = [r for r in results if not r.ok]
    if not bad:
        worst = max((r.error_ratio for r in results), default=0.0)
        return Run("pass", f"error/allowed {worst:.3g}", actual)
    return Run("fail", bad[0].summary()[:240], actual)


def _hung(run: Run) -> bool:
    return run.outcome == "crash" and run.detail.startswith("hang")


def _outside_claims(kvc, case: Case, variant: Case) -> str:
    """Why `variant` is outside the backend's claims without calling it ("" when it may be inside): a float
    dtype the variation introduces that the backend claims for no input of the op (neither in dtypes nor
    in kv_dtypes; a claimed set of None is any dtype)."""
    from kvconform.reference import dtypes
    raw = (getattr(kvc, "description", None) or {}).get("capabilities", {}).get(case.op) or {}
    claimed_sets = [raw.get("dtypes"), raw.get("kv_dtypes")]
    if any(s is None for s in claimed_sets):
        return ""
    claimed = set(claimed_sets[0]) | set(claimed_sets[1])

    def float_names(c: Case) -> set[str]:
        return {dtypes.dtype_name(v.dtype) for v in c.arrays().values() if dtypes.is_float_dtype(v.dtype)}
    new = sorted(float_names(variant) - float_names(case) - claimed)
    return f"{', '.join(new)} not claimed" if new else ""


def _hints_changed(case: Case, variant: Case) -> tuple[str, ...]:
    """The hint inputs `variant` changes, if it changes nothing else (else ())."""
    keys = set(case.inputs) | set(variant.inputs)
    changed = [k for k in keys if not _same_input(case.inputs.get(k), variant.inputs.get(k))]
    return tuple(sorted(changed)) if changed and all(k in HINTS for k in changed) else ()


def _same_input(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and _same_bits(a, b)
    return a == b


def _hint_honoured(kvc, case: Case, expected: Any, run: Run, original: dict, hints: tuple[str, ...]
                   ) -> tuple[str, str]:
    """("honoured" | "ignored" | "without effect" | "unknown", why) for a variation that changes only the
    hint inputs `hints`, whose reference result is `expected` and which ran as `run`; `original` caches
    the backend's runs of the original case. The backend's outputs are compared bit for bit; the
    reference's only tell whether the hint could change anything on this case at all."""
    was = ", ".join(f"{h} {case.inputs.get(h)!r}" for h in hints)
    if "first" not in original:
        try:
            original["expected"] = kvc.reference(case)
        except Exception:
            return "unknown", "the reference rejects the original case"
        original["first"] = _run(kvc, case, original["expected"])
    first = original["first"]
    if first.actual is None or run.actual is None:
        if first.outcome != run.outcome:
            return "honoured", f"it {_VERB.get(first.outcome, first.outcome)} with {was}"
        return "unknown", f"no output to compare: it {_VERB.get(run.outcome, run.outcome)} with {was} too"
    if _same_result(first.actual, run.actual):
        if _same_result(original["expected"], expected):
            return "without effect", f"the reference gives the same bits as with {was} too"
        return "ignored", (f"the same output bit for bit as with {was}: the backend ignores or rounds the hint, "
                           f"so this variation tells nothing")
    if "second" not in original:
        original["second"] = _run(kvc, case, original["expected"])
    second = original["second"]
    if second.actual is None or not _same_result(first.actual, second.actual):
        return "unknown", "the backend's output varies between identical calls"
    return "honoured", f"its output differs from the one with {was}"


def _same_result(a: Any, b: Any) -> bool:
    """Bit for bit the same fields (dtype, shape and bits)?"""
    from kvconform.conformance.harness.outputs import as_fields
    fa, fb = as_fields(a), as_fields(b)
    if list(fa) != list(fb):
        return False
    return all(_same_bits(np.asarray(fa[k]), np.asarray(fb[k])) for k in fa)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# --- building variations (used by strategies/<family>.py DIAGNOSIS) ---------------------------------
