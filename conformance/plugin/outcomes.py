"""One test's outcome: the kvc fixture, its status, its record and reproducer, replays of a failure."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvconform.conformance.engine import artifacts, backend_text, finite_json, flaky
from kvconform.conformance.engine.call_errors import BackendCrash, EngineError
from kvconform.conformance.engine.loading import backend_problem
from kvconform.conformance.engine.rejection import InvalidErrorCase
from kvconform.conformance.harness.core import ConformanceFailure, Harness
from kvconform.conformance.harness.failures import _GROUPS
from kvconform.conformance.run import gate


def _report_the_message_only(item) -> None:
    """A conformance failure is reported as its message (what failed, the case, the tolerance, the replay
    line; its first line is what pytest's short summary shows), then where the test is and Hypothesis's
    notes on the exception (the failing example, the reproduce_failure blob, a state machine's steps), not
    as a traceback through the suite's own code, which tells a backend author nothing more; an exception
    of any other kind keeps pytest's report, and so does any --tb other than auto. Also saves time: pytest
    parses the source of every frame it shows (~2 ms each, ~9% of a run whose tests fail and shrink,
    measured on a mutant of ragged_paged_attention, issue 16)."""
    default = item.repr_failure

    def repr_failure(excinfo, *args, **kwargs):
        if excinfo.errisinstance(BackendCrash):
            # the crash's words and the backend's innermost frames (its message); pytest's traceback through
            # the engine, with every argument's repr (~200 lines under Hypothesis), goes to failure.txt only
            item._kvc_crash_traceback = str(default(excinfo, *args, **kwargs))
        if excinfo.errisinstance((ConformanceFailure, EngineError, BackendCrash)):
            path, line, _ = item.location
            notes = [str(note) for note in getattr(excinfo.value, "__notes__", ())]
            head = f"crash: {excinfo.value}" if excinfo.errisinstance(BackendCrash) else str(excinfo.value)
            return "\n".join([head, f"{path}:{line + 1}: {item.name}", *notes])
        return default(excinfo, *args, **kwargs)

    item.repr_failure = repr_failure


@pytest.fixture
def kvc(request, kvc_backend):
    state = request.config._kvconform
    worker, description = state.worker(kvc_backend)
    harness = Harness(backend_spec=kvc_backend, worker=worker, description=description,
                      profile=state.profile, out_dir=state.out or Path(".kvconform"), node=request.node,
                      run_unclaimed=state.run_unclaimed, call_timeout=state.timeout,
                      shrink_seconds=state.shrink_seconds)
    request.node._kvc_harness = harness
    if description.get("load_error") or description.get("claims_error"):
        # loaded by the controller but not by this process, or a session without the gate: an error of
        # the run (the gate's NOT CHECKED), never a failure of the kernel or a quiet `unsupported`
        pytest.fail(f"not run: backend {kvc_backend} {backend_problem(description)}", pytrace=False)
    if not description.get("available", True):
        pytest.skip(f"unsupported: backend {kvc_backend} cannot run here: {description.get('reason')}")
    streak = state.crash_streak.get((kvc_backend, harness.op), 0)
    if state.max_crashes and streak >= state.max_crashes:
        # a hanging kernel would otherwise cost the call timeout on every remaining test of the op; the
        # harness skips the test as `not run` at its first claim or call (the crashes fail the run)
        harness.not_run = (f"{NOT_RUN}{harness.op} crashed {streak} times in a row "
                           f"(--max-crashes {state.max_crashes})")
    return harness


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test body that raised (after Hypothesis's shrinking, if any) gets its failure diagnosed before
    pytest reports it, so that the diagnosis is part of the exception's message (harness.diagnose_failure)."""
    try:
        return (yield)
    except BaseException as exc:   # a crash is a BaseException (worker.BackendCrash); the harness picks
        harness = getattr(item, "_kvc_harness", None)
        if harness is not None:
            harness.diagnose_failure(exc)
        raise


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    harness = getattr(item, "_kvc_harness", None)
    if harness is None or not (rep.when == "call" or (rep.when == "setup" and not rep.passed)):
        return
    state = item.config._kvconform
    status, message = _status(rep, call, harness)
    rate = None
    if status in ("fail", "flaky"):
        status, message, rate = _replayed(status, message, harness, call)
    failure = harness.failure
    if status == "xfail":
        status, message = _known_failure(item, failure, message)
    _count_crash(state, harness, status, message)
    if status == "crash" and failure is None and harness.last_case is not None:
        failure = {"case": harness.last_case, "message": message, "full_message": message, "fields": [],
                   "diagnosis": harness.crash_diagnosis}
    if status == "crash" and failure is not None:   # what the backend printed in the call that crashed
        failure["output"] = getattr(harness.worker, "crash_output", None)
        harness.worker.crash_output = None
        failure["engine_traceback"] = getattr(item, "_kvc_crash_traceback", "")
    record = harness.record()
    record.update({"id": item.nodeid, "test": getattr(item, "originalname", item.name),
                   "variant": _variant(item), "status": status,
                   "message": backend_text.cap(backend_text.visible(message), backend_text.MESSAGE_CAP),
                   "worker": os.environ.get("PYTEST_XDIST_WORKER", "")})   # which --jobs process ran it
    if rate is not None:
        record["replays"] = rate.to_json()
    if status == "xfail" or status == "xpass":
        record["expectation"] = getattr(rep, "wasxfail", "") or message
        if status == "xpass" and not rep.passed:
            record["strict"] = True   # a strict expectation: the pass fails the gate (gate.is_failure)
    if failure is not None:
        record["op"] = failure["case"].op   # a stateful test spans ops: name the one that failed
    if status in ("fail", "crash", "flaky", "xfail") and failure is not None and state.out is not None:
        _failure_record(record, failure, message, rate, state, item)
    if failure is not None and failure.get("output") is not None:
        failure["output"].discard()   # moved into failure.txt, or not kept
    rep.user_properties.append(("kvconform", finite_json.dumps(record, default=str)))
    # JUnit reads properties from the teardown report, which copies item.user_properties.
    for key in ("backend", "op", "layer", "status"):
        item.user_properties.append((f"kvc_{key}", str(record[key])))
    item.user_properties.append(("kvc_clauses", " ".join(record["clauses"])))


def _replayed(status: str, message: str, harness, call):
    """(status, message, flaky.Rate or None) of a failed test after replaying its failing call: `flaky`
    when a replay passed, or when Hypothesis itself found the failure unreliable (its FlakyFailure: the
    shrunk example passed on a later call); the message's second line then says so, with the rate."""
    failure = harness.failure
    rate = None
    if failure is not None and failure.get("replay") is not None and not harness.not_run:
        try:
            rate = flaky.reproduction_rate(harness.worker, failure["replay"], harness.call_timeout)
        except Exception as exc:  # a replay must never change a failure into something else
            rate = None
            message += f"\n  (replays not available: {type(exc).__name__}: {str(exc)[:200]})"
    unreliable = status == "flaky"
    if not unreliable and (rate is None or rate.failed == rate.replays):
        return status, message, rate
    why = []
    if rate is not None:
        why.append(f"{rate.text()} of this counterexample")
    if unreliable:
        why.append("Hypothesis: unreliable results (the shrunk example passed when run again)")
    head, _, rest = message.partition("\n")
    return "flaky", f"{head}\n  flaky: {'; '.join(why)}" + (f"\n{rest}" if rest else ""), rate


def _failure_record(record: dict, failure: dict, message: str, rate, state, item) -> None:
    """A failure's part of its record: counterexample, fields, diagnosis, capped traceback and backend
    output, and its reproducer directory with failure.txt (the whole message, traceback and output)."""
    record["counterexample"] = failure["case"].shape_summary()
    record["fields"] = failure.get("fields", [])
    if failure.get("diagnosis"):
        record["diagnosis"] = failure["diagnosis"]
    directory = artifacts.repro_dir_for(state.out, item.nodeid)
    whole = f"{directory}/{artifacts.FAILURE_TEXT}"
    if failure.get("traceback"):   # a backend exception's traceback, its innermost frames at the end
        record["traceback"] = backend_text.cap(failure["traceback"], backend_text.TRACEBACK_CAP, whole)
    output = failure.get("output")
    if output is not None:
        record["output"] = output.text
        record["output_bytes"] = output.size
    if rate is not None:   # `flaky` only when the replays disagreed: a reproduced failure is not flaky
        failure = dict(failure, replays=rate.to_json(), flaky=rate.to_json() if record["status"] == "flaky" else None)
    try:
        record["repro"] = str(artifacts.write_reproducer(state.out, item.nodeid, dict(failure, message=message),
                                                         record))
        record["failure_text"] = whole
    except OSError as exc:
        record["repro_error"] = str(exc)


def _count_crash(state, harness, status: str, message: str) -> None:
    """Crashes in a row per (backend, op): a crash adds one, a test that ran the backend to an answer
    resets it (unsupported and skipped tests never called it)."""
    key = (harness.backend_spec, harness.op)
    if status == "crash":
        state.crash_streak[key] = state.crash_streak.get(key, 0) + 1
    elif status in ("pass", "fail", "flaky", "xfail", "xpass", "unclaimed-pass"):
        state.crash_streak[key] = 0


#: starts the reason of a test that was not run because its op kept crashing (status `not run`)
NOT_RUN = "not run: "


def _known_failure(item, failure, message) -> tuple[str, str]:
    """An expected failure stays `xfail` only if it is the known one: an entry that names a diagnosis covers
    only failures diagnosed so (expectations.Expectation.covers); any other failure is a plain `fail`."""
    match = getattr(item, "_kvc_expectation", None)
    if match is None or match.covers(failure and failure.get("diagnosis")):
        return "xfail", message
    return "fail", (f"{message} [not the known failure of the expectations entry '{match.test}': its "
                    f"diagnosis is not '{match.diagnosis}']")


def _variant(item) -> str:
    params = getattr(item, "callspec", None)
    if params is None:
        return ""
    return ",".join(str(v) for k, v in params.params.items() if k != "kvc_backend")


def _status(rep, call, harness) -> tuple[str, str]:
    text = ""
    if rep.skipped and isinstance(rep.longrepr, tuple):
        text = str(rep.longrepr[2])
        text = text[len("Skipped: "):] if text.startswith("Skipped: ") else text
    if rep.passed:
        if hasattr(rep, "wasxfail"):
            return "xpass", "passed, but the expectations file marks it xfail: " + rep.wasxfail
        return ("unclaimed-pass" if harness.unclaimed else "pass"), ""
    if rep.failed and call.excinfo is None and str(rep.longrepr).startswith("[XPASS(strict)]"):
        return "xpass", ("passed, but the expectations file marks it xfail (strict): "
                         + str(rep.longrepr)[len("[XPASS(strict)]"):].strip())
    if rep.skipped:
        if hasattr(rep, "wasxfail"):
            return "xfail", _exc_text(call, harness)
        if text.startswith(NOT_RUN):
            return "not run", f"[{harness.op}] {text}"
        return ("unsupported" if text.startswith("unsupported") else "skip"), text
    if call.excinfo is not None and call.excinfo.errisinstance(BackendCrash):
        return "crash", f"[{harness.op}] crash: {call.excinfo.value}"
    if rep.when == "setup":
        return "error", _exc_text(call, harness)
    if call.excinfo is not None and call.excinfo.errisinstance(InvalidErrorCase):
        # an error case the reference accepts tests nothing: a bug of the suite, not of the backend
        return "error", f"[{harness.op}] invalid error case (suite bug): {call.excinfo.value}"
    limit = _engine_limit(call.excinfo.value) if call.excinfo is not None else None
    if limit is not None:
        # in the run's process (a backend's own MemoryError comes back from its worker as BackendError):
        # drawing or the reference could not hold the case (out of memory, or sizes past the index dtype
        # of an impossible claim), alone or as every failure Hypothesis grouped: never the backend's failure
        return "error", (f"[{harness.op}] the engine ran out of memory (not the backend's): "
                         f"{type(limit).__name__}: {limit}")
    if call.excinfo is not None and call.excinfo.errisinstance(EngineError):
        return "error", f"[{harness.op}] engine error (not the backend's): {call.excinfo.value}"
    from hypothesis.errors import Flaky, FlakyFailure
    if call.excinfo is not None and call.excinfo.errisinstance(FlakyFailure) and harness.failure is not None:
        return "flaky", _exc_text(call, harness)
    if call.excinfo is not None and call.excinfo.errisinstance(Flaky):
        # a strategy drawing differently on the same data (FlakyStrategyDefinition) is the suite's bug
        return "error", f"[{harness.op}] {call.excinfo.typename} (suite bug): {call.excinfo.value}"
    return "fail", _exc_text(call, harness)


def _engine_limit(exc: BaseException) -> BaseException | None:
    """The MemoryError behind `exc` when the run's own process could not hold a case: `exc` itself, or
    in a group of failures (Hypothesis reports distinct ones together) whose every member is a
    MemoryError or an OverflowError of an index past its dtype; None otherwise."""
    if isinstance(exc, MemoryError):
        return exc
    if _GROUPS and isinstance(exc, _GROUPS):
        leaves = list(_leaves(exc))
        memory = [e for e in leaves if isinstance(e, MemoryError)]
        if memory and all(isinstance(e, (MemoryError, OverflowError)) for e in leaves):
            return memory[0]
    return None


def _leaves(group):
    for exc in group.exceptions:
        if isinstance(exc, _GROUPS):
            yield from _leaves(exc)
        else:
            yield exc


def _exc_text(call, harness) -> str:
    if harness.failure is not None:
        return harness.failure["message"]
    if call.excinfo is None:
        return ""
    return f"[{harness.op}] {call.excinfo.typename}: {call.excinfo.value}"


def pytest_runtest_logreport(report):
    config = _CONFIG.get("config")
    if config is None:
        return
    state = config._kvconform
    if not state.controller:
        return
    values = [value for name, value in report.user_properties if name == "kvconform"]
    if not values and report.failed:
        if "kvconform" in getattr(report, "keywords", {}):   # a suite test without its record (a dead
            state.lost.append(gate.reason(                   # pytest-xdist worker): the engine's trouble
                "engine", f"{report.nodeid}: no result was recorded ({_first_line(report)})"))
        else:
            state.foreign_failures = True   # a test outside the suite failed: never green
    for value in values:
        state.records.append(json.loads(value))
        if state.out is not None:
            state.record(value, _CONFIG.get("session"))
            if state.progress is not None:
                record = json.loads(value)
                state.progress.result(report.nodeid, record.get("status", ""), record.get("backend", "?"),
                                      record.get("op", "?"))


def pytest_collectreport(report):
    config = _CONFIG.get("config")
    if config is not None and report.failed and config._kvconform.controller:
        config._kvconform.lost.append(gate.reason(
            "engine", f"the suite could not be collected: {report.nodeid or 'session'}: {_first_line(report)}"))


def _first_line(report) -> str:
    lines = [line for line in str(getattr(report, "longreprtext", "") or report.longrepr).splitlines() if line.strip()]
    return lines[-1].strip().removeprefix("E ").strip()[:300] if lines else "no detail"


_CONFIG: dict = {}
