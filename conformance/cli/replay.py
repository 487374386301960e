"""`kvconform replay DIR`: re-run a reproducer on a backend (reproducers are data: nothing in case.json is imported)."""
from __future__ import annotations

from pathlib import Path

from .arguments import UsageError


def _replay_backend(args, meta: dict) -> str:
    """The backend a replay runs: --backend, else the one case.json records if it is an installed
    entry-point name. A reproducer is data: a `package.module:factory` written in case.json (which anyone
    who hands over a reproducer can edit) is never imported unless the user names it."""
    from kvconform import backends
    from kvconform.conformance.engine.backend_text import visible
    if args.backend:
        return args.backend
    recorded = meta.get("backend")
    if recorded is None:
        return "numpy"
    if isinstance(recorded, str) and recorded in backends.entry_points():
        return recorded
    raise UsageError(f"the reproducer names the backend {visible(repr(recorded))}, which is not an installed "
                     f"entry point; replay imports such a backend only when you name it: add --backend SPEC")


def cmd_replay(args) -> int:
    from kvconform import backends, reference
    from kvconform.conformance.engine import case as case_io
    from kvconform.conformance.engine import flaky
    from kvconform.conformance.engine.call_errors import BackendUnavailable
    from kvconform.conformance.engine.worker import InProcess, Worker
    try:
        case, meta = case_io.load(Path(args.directory))
    except case_io.NoReproducer as exc:
        raise UsageError(str(exc)) from None
    except case_io.CorruptReproducer as exc:
        raise UsageError(f"corrupted reproducer: {exc}") from None
    spec = _replay_backend(args, meta)
    if not hasattr(reference, case.op):
        raise UsageError(f"reproducer op {case.op!r} is not implemented by this kvconform's reference")
    if case.rejection is not None:
        from kvconform.conformance.engine import rejection as rej
        try:
            expected = rej.run_reference(getattr(reference, case.op), case)
        except rej.InvalidErrorCase as exc:
            raise UsageError(f"corrupted reproducer: it expects a rejection, but {exc}") from None
    else:
        try:
            expected = getattr(reference, case.op)(**case.inputs)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"corrupted reproducer: the reference rejects its inputs: {exc}") from None
    before = _history(Path(args.directory), meta)
    try:
        backends.resolve(spec)
        worker = InProcess(spec) if args.no_isolation else Worker(spec)
        worker.describe()
    except (backends.BackendLoadError, BackendUnavailable) as exc:
        raise UsageError(str(exc)) from None
    print(f"replay {args.directory}: op {case.op}, backend {spec}, clauses {', '.join(meta.get('clauses') or [])}")
    print(f"  case: {case.shape_summary()}")
    if (meta.get("diagnosis") or {}).get("summary"):
        print(f"  diagnosis (when recorded): {meta['diagnosis']['summary']}")
    if case.rejection is not None:
        print(f"  expected: a {expected.describe()}")
        print(f"  reference: {expected.error}: {expected.reference_message}")
    if before:
        print(f"  after {len(before)} earlier call(s) recorded with the failure (call history)")
    recorded = meta.get("flaky") if isinstance(meta.get("flaky"), dict) else None
    times = flaky.REPLAYS if recorded else 1
    runs = []
    try:
        for _ in range(times):
            runs.append(_replay_once(case, meta, before, expected, worker))
            if runs[-1][0] == "crash":
                break
    finally:
        worker.stop()
    failed = [r for r in runs if r[0] != "ok"]
    shown = failed[0] if failed else runs[0]
    for line in shown[1]:
        print(line)
    if recorded:
        rate = f"failed {len(failed)} of {len(runs)} replays"
        was = f"recorded flaky: failed {recorded.get('failed')} of {recorded.get('replays')} replays"
        print(f"  FLAKY: {rate} ({was})" if failed else
              f"  NOT REPRODUCED: passed {len(runs)} of {len(runs)} replays ({was}; a flaky failure may need more)")
    return 1 if failed else 0


def _replay_once(case, meta: dict, before: list, expected, worker) -> tuple[str, list[str]]:
    """One replay: ("ok" | "fail" | "crash", the lines that say what happened)."""
    from kvconform.conformance.engine import rejection as rej
    from kvconform.conformance.engine.backend_text import cap, visible
    from kvconform.conformance.engine.call_errors import (BackendCrash, BackendDeclined, BackendError,
                                                          BackendProtocolError, EngineError)
    from kvconform.conformance.engine.strided import layouts_of
    from kvconform.conformance.harness.outputs import compare_outputs, raised_lines
    try:
        for earlier in before:   # a call-history failure: the calls that came first, in order
            worker.call(earlier.op, earlier.inputs, layouts=layouts_of(earlier))
        actual, mutated = worker.call(case.op, case.inputs, layouts=layouts_of(case))
    except BackendCrash as exc:
        return "crash", [f"  CRASH: {visible(exc)}"] + _printed(worker)
    except BackendError as exc:
        if case.rejection is not None:
            problem = rej.judge(expected, exc.type_name, exc.mro, exc.message)
            if problem is None:
                return "ok", [f"  ok   rejected: {exc.type_name}: {cap(visible(exc.message), 1000)}"]
            return "fail", [f"  FAIL: {cap(visible(problem), 2000)}"] + _printed(worker)
        error, detail = raised_lines(exc)
        return "fail", ([f"  FAIL: backend raised {exc.type_name}: {cap(visible(error), 2000)}"]
                        + [f"        {cap(visible(line), 1000)}" for line in detail if line] + _printed(worker))
    except BackendDeclined as exc:
        return _declined(case, meta, worker, str(exc))
    except BackendProtocolError as exc:
        what = "accepted invalid input, and the backend " if case.rejection is not None else "the backend "
        return "fail", [f"  FAIL: {what}{visible(exc)}"]
    except EngineError as exc:
        return "fail", [f"  ERROR (the engine's, not the backend's): {visible(exc)}"]
    if case.rejection is not None:
        return "fail", [f"  FAIL: {cap(visible(rej.accepted(expected, actual)), 2000)}"]
    if mutated:
        return "fail", [f"  FAIL: the backend modified or aliased its inputs: {'; '.join(mutated)}"]
    lines, ok = [], True
    for res in compare_outputs(case, expected, actual):
        status = "ok  " if res.ok else "FAIL"
        extra = f", max ulp {res.max_ulp:.3g}" if res.max_ulp is not None else ""
        lines.append(f"  {status} {res.name}: {res.n_bad}/{res.compared} elements out of tolerance, "
                     f"max abs error {res.max_abs:.3g}{extra}, error/allowed {res.error_ratio:.3g} ({res.kind})")
        if not res.ok:
            lines.append(f"       {res.summary()}")
            ok = False
    return ("ok", lines) if ok else ("fail", lines + _printed(worker))


def _printed(worker) -> list[str]:
    """What the backend printed during the failing call, capped (the worker captures it)."""
    from kvconform.conformance.engine.backend_text import OUTPUT_CAP, cap, visible
    output = worker.crash_output if getattr(worker, "crash_output", None) is not None else worker.output()
    if output is None:
        return []
    output.discard()
    text = cap(visible(output.text), OUTPUT_CAP)
    return [f"  the backend printed {output.size:,} bytes:"] + [f"    | {line}" for line in text.splitlines()]


def _declined(case, meta: dict, worker, reason: str) -> tuple[str, list[str]]:
    """The backend raised kvconform.Unsupported: as in a run, `unsupported` for a case outside its claims
    (not a failure), a failure for a case inside them."""
    from kvconform.backends.base import OpClaims
    from kvconform.conformance.engine.backend_text import visible
    from kvconform.conformance.strategies.constraints import case_space, outside
    raw = (worker.describe().get("capabilities") or {}).get(case.op)
    if raw is None:
        reasons = [f"does not claim op {case.op}"]
    else:
        reasons = [f"does not claim feature {f}" for f in meta.get("features") or []
                   if f != "base" and f not in raw.get("features", [])]
        reasons += outside(OpClaims.from_json(raw), case_space(case.params))
    if reasons:
        return "ok", [f"  unsupported: the backend declined a case outside its claims ({'; '.join(reasons)}): "
                      f"kvconform.Unsupported({visible(repr(reason))}); not a failure"]
    what = "instead of rejecting the malformed call" if case.rejection is not None else \
        "for a case inside its claims (state the limit in its OpClaims instead)"
    return "fail", [f"  FAIL: raised kvconform.Unsupported({visible(repr(reason))}) {what}"]


def _history(directory: Path, meta: dict) -> list:
    """The cases called before the failing one (case.json "before": their sub-directories, in order)."""
    from kvconform.conformance.engine import case as case_io
    cases = []
    for name in meta.get("before") or []:
        if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith("."):
            raise UsageError(f"corrupted reproducer: case.json 'before' entry {name!r} is not a sub-directory name")
        try:
            cases.append(case_io.load(directory / name)[0])
        except case_io.CorruptReproducer as exc:
            raise UsageError(f"corrupted reproducer: {exc}") from None
    return cases
