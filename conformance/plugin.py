"""The pytest plugin behind `kvconform run`: backends as parameters, statuses, streaming results, reports.

Inert in ordinary pytest runs: it only adds `--kvc-*` options, the `kvconform` marker and the `kvc`
fixture, which suite tests (conformance/suite/) use. With `--kvc-out DIR` it streams one JSON line per
test to DIR/results.jsonl from the controlling process (so it works under pytest-xdist), writes a
reproducer for every failure, and at the end renders report.json / report.md / report.html / junit.xml.
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import pytest

from . import artifacts, expectations, profiles
from .harness import ConformanceFailure, Harness
from .rejection import InvalidErrorCase
from .worker import BackendCrash, BackendUnavailable, ClaimsUnreadable, InProcess, Worker

FINAL = {"pass", "fail", "crash", "unsupported", "unclaimed-pass", "xfail", "xpass", "skip", "error"}


def pytest_addoption(parser):
    g = parser.getgroup("kvconform", "kvconform conformance suite")
    g.addoption("--kvc-backend", action="append", default=[], metavar="SPEC",
                help="backend to check: entry-point name or package.module:factory (repeatable)")
    g.addoption("--kvc-profile", default=os.environ.get("KVCONFORM_PROFILE", "quick"),
                choices=sorted(profiles.PROFILES))
    g.addoption("--kvc-out", default=None, help="directory for results.jsonl, reports and reproducers")
    g.addoption("--kvc-ops", default=None, help="comma-separated ops to run (default: all)")
    g.addoption("--kvc-shard", default=None, metavar="I/N", help="run the I-th of N deterministic shards")
    g.addoption("--kvc-resume", action="store_true", help="skip tests already recorded in results.jsonl")
    g.addoption("--kvc-expectations", action="append", default=[], metavar="TOML")
    g.addoption("--kvc-timeout", type=profiles.timeout_seconds, default=None,
                help="seconds per backend call, > 0 (default: profile)")
    g.addoption("--kvc-run-unclaimed", action="store_true",
                help="also run cases outside the claims (pass -> unclaimed-pass, fail -> unsupported)")
    g.addoption("--kvc-isolation", choices=("subprocess", "none"), default="subprocess")
    g.addoption("--kvc-max-crashes", type=int, default=3, metavar="N",
                help="after N crashes or hangs in a row of one backend's op, record its remaining tests as "
                     "crash without running them (0: never; counted per pytest process)")


class RunState:
    def __init__(self, config):
        opt = config.getoption
        self.config = config
        self.backends = opt("kvc_backend") or ["numpy"]
        self.profile = profiles.get(opt("kvc_profile"))
        self.out = Path(opt("kvc_out")).resolve() if opt("kvc_out") else None
        self.ops = [o.strip() for o in opt("kvc_ops").split(",")] if opt("kvc_ops") else None
        self.shard = _parse_shard(opt("kvc_shard"))
        self.resume = opt("kvc_resume")
        try:
            self.expectations = expectations.load(opt("kvc_expectations"))
        except expectations.ExpectationError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.controller = not hasattr(config, "workerinput")
        self.max_crashes = opt("kvc_max_crashes")
        self.crash_streak: dict[tuple[str, str], int] = {}   # (backend spec, op) -> crashes in a row
        self.done: set[str] = set()
        self.workers: dict[str, object] = {}
        if self.out is not None:
            self.results_path = self.out / "results.jsonl"
            if self.resume and self.results_path.exists():
                for line in self.results_path.read_text().splitlines():
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        continue   # a line cut short by the interruption we resume from
                    if rec.get("status") in FINAL:
                        self.done.add(rec["id"])
            if self.controller:
                self.out.mkdir(parents=True, exist_ok=True)
                if not self.resume:
                    self.results_path.write_text("")
                    meta = {"profile": self.profile.name, "backends": self.backends,
                            "expectations": [e.to_json() for e in self.expectations],
                            "shard": opt("kvc_shard"), "seed": _seed(config)}
                    (self.out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")

    def worker(self, spec: str):
        if spec not in self.workers:
            timeout = self.config.getoption("kvc_timeout") or self.profile.call_timeout
            if self.config.getoption("kvc_isolation") == "none":
                w = InProcess(spec)
            else:
                w = Worker(spec, timeout=timeout)
            try:
                description = w.describe()
            except ClaimsUnreadable as exc:
                description = {"name": spec, "available": False, "reason": f"claims cannot be read: {exc}",
                               "claims_error": str(exc), "capabilities": {}}
            except BackendUnavailable as exc:
                description = {"name": spec, "available": False, "reason": str(exc), "capabilities": {}}
            self.workers[spec] = (w, description)
            if self.out is not None:
                (self.out / "backends").mkdir(parents=True, exist_ok=True)
                safe = artifacts.case_id(spec)
                (self.out / "backends" / f"{safe}.json").write_text(
                    json.dumps(dict(description, spec=spec), indent=2, default=str) + "\n")
        return self.workers[spec]

    def close(self):
        for w, _ in self.workers.values():
            w.stop()


def _seed(config):
    try:
        return config.getoption("hypothesis_seed")
    except ValueError:
        return None


def _parse_shard(text):
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard must look like I/N (e.g. 2/4), got {text!r}") from None
    if not (n >= 1 and 1 <= i <= n):
        raise pytest.UsageError(f"--shard {text}: need 1 <= I <= N")
    return i, n


def pytest_configure(config):
    config.addinivalue_line("markers", "kvconform(op, clauses, layer): a kvconform suite test")
    config._kvconform = RunState(config)


def pytest_unconfigure(config):
    state = getattr(config, "_kvconform", None)
    if state is not None:
        state.close()


def pytest_generate_tests(metafunc):
    if "kvc" in metafunc.fixturenames:
        state = metafunc.config._kvconform
        metafunc.parametrize("kvc_backend", state.backends, ids=[_backend_id(b) for b in state.backends],
                             scope="function")


def _backend_id(spec: str) -> str:
    return spec.split(":")[-1] if ":" in spec else spec


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """With `--jobs N` (pytest-xdist), hand out the suite in work units of one test module x one backend,
    largest first, instead of test by test: every test of a backend's op then runs in one worker process,
    which compiles each of its kernel shapes once (a JIT backend's compiled kernels live per process; jax
    cannot store interpret-mode Pallas executables in its persistent cache, they hold host callbacks).
    Project test runs (no --kvc-backend) and an explicit `--dist` other than xdist's default keep xdist's
    own scheduler."""
    if not config.getoption("kvc_backend") or config.getoption("dist", "load") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    ids = sorted((_backend_id(b) for b in config._kvconform.backends), key=len, reverse=True)

    class ModuleBackendScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module, _, name = nodeid.partition("::")
            params = name[name.find("[") + 1:] if "[" in name else ""
            backend = next((b for b in ids if params.startswith(b) and params[len(b):len(b) + 1] in ("-", "]")),
                           "")
            return f"{module}@{backend}"

    return ModuleBackendScheduling(config, log)


def pytest_collection_modifyitems(session, config, items):
    state = config._kvconform
    keep, drop = [], []
    conformance = False
    for item in items:
        marker = item.get_closest_marker("kvconform")
        if marker is None:
            keep.append(item)
            continue
        conformance = True
        op = marker.kwargs.get("op")
        if state.ops is not None and op not in state.ops:
            drop.append(item)
        elif state.shard and zlib.crc32(item.nodeid.encode()) % state.shard[1] != state.shard[0] - 1:
            drop.append(item)
        elif item.nodeid in state.done:
            drop.append(item)
        else:
            keep.append(item)
            if config.getoption("tbstyle", "auto") == "auto":
                _report_the_message_only(item)
            backend = item.callspec.params.get("kvc_backend", "") if hasattr(item, "callspec") else ""
            match = expectations.first_match(state.expectations, item.nodeid, _backend_id(backend))
            if match is not None:
                item.add_marker(pytest.mark.xfail(reason=match.reason, strict=False))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if conformance:   # before any test draws a case, in every process that collected conformance tests
        profiles.ignore_source_constants()


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
        if excinfo.errisinstance(ConformanceFailure):
            path, line, _ = item.location
            notes = [str(note) for note in getattr(excinfo.value, "__notes__", ())]
            return "\n".join([str(excinfo.value), f"{path}:{line + 1}: {item.name}", *notes])
        return default(excinfo, *args, **kwargs)

    item.repr_failure = repr_failure


@pytest.fixture
def kvc(request, kvc_backend):
    state = request.config._kvconform
    worker, description = state.worker(kvc_backend)
    harness = Harness(backend_spec=kvc_backend, worker=worker, description=description,
                      profile=state.profile, out_dir=state.out or Path(".kvconform"), node=request.node,
                      run_unclaimed=request.config.getoption("kvc_run_unclaimed"),
                      call_timeout=request.config.getoption("kvc_timeout"))
    request.node._kvc_harness = harness
    if not description.get("available", True):
        pytest.skip(f"unsupported: backend {kvc_backend} cannot run here: {description.get('reason')}")
    streak = state.crash_streak.get((kvc_backend, harness.op), 0)
    if state.max_crashes and streak >= state.max_crashes:
        # a hanging kernel would otherwise cost the call timeout on every remaining test of the op; the
        # harness raises BackendCrash at the test's first claim or call (a fixture must not raise it)
        harness.not_run = (f"{NOT_RUN}{harness.op} crashed {streak} times in a row "
                           f"(--max-crashes {state.max_crashes})")
    return harness


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    harness = getattr(item, "_kvc_harness", None)
    if harness is None or not (rep.when == "call" or (rep.when == "setup" and not rep.passed)):
        return
    state = item.config._kvconform
    status, message = _status(rep, call, harness)
    _count_crash(state, harness, status, message)
    record = harness.record()
    record.update({"id": item.nodeid, "test": getattr(item, "originalname", item.name),
                   "variant": _variant(item), "status": status, "message": message[:4000],
                   "worker": os.environ.get("PYTEST_XDIST_WORKER", "")})   # which --jobs process ran it
    if status == "xfail" or status == "xpass":
        record["expectation"] = getattr(rep, "wasxfail", "")
    failure = harness.failure
    if status == "crash" and failure is None and harness.last_case is not None:
        failure = {"case": harness.last_case, "message": message, "fields": []}
    if failure is not None:
        record["op"] = failure["case"].op   # a stateful test spans ops: name the one that failed
    if status in ("fail", "crash", "xfail") and failure is not None and state.out is not None:
        record["counterexample"] = failure["case"].shape_summary()
        record["fields"] = failure.get("fields", [])
        if failure.get("diagnosis"):
            record["diagnosis"] = failure["diagnosis"]
        if failure.get("traceback"):   # a backend exception's whole traceback (the message has its tail)
            record["traceback"] = failure["traceback"]
        try:
            record["repro"] = str(artifacts.write_reproducer(state.out, item.nodeid, failure, record))
        except OSError as exc:
            record["repro_error"] = str(exc)
    rep.user_properties.append(("kvconform", json.dumps(record, default=str)))
    # JUnit reads properties from the teardown report, which copies item.user_properties.
    for key in ("backend", "op", "layer", "status"):
        item.user_properties.append((f"kvc_{key}", str(record[key])))
    item.user_properties.append(("kvc_clauses", " ".join(record["clauses"])))


def _count_crash(state, harness, status: str, message: str) -> None:
    """Crashes in a row per (backend, op): a crash adds one, a test that ran the backend to an answer
    resets it (unsupported and skipped tests never called it)."""
    key = (harness.backend_spec, harness.op)
    if status == "crash" and NOT_RUN not in message:
        state.crash_streak[key] = state.crash_streak.get(key, 0) + 1
    elif status in ("pass", "fail", "xfail", "xpass", "unclaimed-pass"):
        state.crash_streak[key] = 0


#: marks a crash record of a test that was not run because its op kept crashing
NOT_RUN = "not run: "


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
    if rep.skipped:
        if hasattr(rep, "wasxfail"):
            return "xfail", _exc_text(call, harness)
        return ("unsupported" if text.startswith("unsupported") else "skip"), text
    if call.excinfo is not None and call.excinfo.errisinstance(BackendCrash):
        return "crash", f"[{harness.op}] crash: {call.excinfo.value}"
    if rep.when == "setup":
        return "error", _exc_text(call, harness)
    if call.excinfo is not None and call.excinfo.errisinstance(InvalidErrorCase):
        # an error case the reference accepts tests nothing: a bug of the suite, not of the backend
        return "error", f"[{harness.op}] invalid error case (suite bug): {call.excinfo.value}"
    return "fail", _exc_text(call, harness)


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
    if not state.controller or state.out is None:
        return
    for name, value in report.user_properties:
        if name == "kvconform":
            with open(state.results_path, "a") as fh:   # one line per test, flushed at once
                fh.write(value + "\n")


_CONFIG: dict = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG["config"] = session.config


def pytest_sessionfinish(session, exitstatus):
    state = session.config._kvconform
    if not state.controller or state.out is None or not state.results_path.exists():
        return
    from .report import build
    try:
        build.write_all(state.out)
    except Exception as exc:  # a report bug must not hide the test results
        session.config._kvconform_report_error = f"{type(exc).__name__}: {exc}"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = getattr(config, "_kvconform", None)
    if state is None or not state.controller or state.out is None:
        return
    error = getattr(config, "_kvconform_report_error", None)
    if error:
        terminalreporter.write_line(f"kvconform: report generation failed: {error}", red=True)
        return
    from .report import build
    try:
        report = json.loads((state.out / "report.json").read_text())
    except (OSError, json.JSONDecodeError):
        return
    terminalreporter.section("kvconform")
    for line in build.summary_lines(report):
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"reports: {state.out}/report.md, report.html, report.json, junit.xml")
