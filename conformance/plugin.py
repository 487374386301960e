"""The pytest plugin behind `kvconform run`: backends as parameters, statuses, streaming results, reports.

Inert in ordinary pytest runs: it only adds `--kvc-*` options, the `kvconform` marker and the `kvc`
fixture, which suite tests (conformance/suite/) use. With `--kvc-out DIR` it streams one JSON line per
test to DIR/results.jsonl from the controlling process (so it works under pytest-xdist), writes a
reproducer for every failure, and at the end renders report.json / report.md / report.html / junit.xml.

The run owns DIR (outdir.py): it takes DIR's lock, a new run deletes an earlier run's files there, and
`--kvc-resume` restores the earlier run's options from run.json and repairs a torn last line of
results.jsonl. SIGINT, SIGTERM and a record that cannot be written end the run with the reports marked
partial (interrupt.py). A failing test's last failing call is replayed (flaky.py): one that does not fail
every replay is `flaky`.
"""
from __future__ import annotations

import json
import os
import time
import zlib
from pathlib import Path

import pytest

from . import artifacts, backend_text, canaries, expectations, flaky, gate, interrupt, loading, outdir, profiles, progress
from .harness import ConformanceFailure, Harness
from .rejection import InvalidErrorCase
from .worker import BackendCrash, EngineError

FINAL = {"pass", "fail", "crash", "flaky", "unsupported", "unclaimed-pass", "xfail", "xpass", "skip", "error",
         "not run"}


def pytest_addoption(parser):
    g = parser.getgroup("kvconform", "kvconform conformance suite")
    g.addoption("--kvc-backend", action="append", default=[], metavar="SPEC",
                help="backend to check: entry-point name or package.module:factory (repeatable)")
    g.addoption("--kvc-profile", default=None, choices=sorted(profiles.PROFILES),
                help="default: $KVCONFORM_PROFILE or quick (with --kvc-resume: the resumed run's)")
    g.addoption("--kvc-out", default=None, help="directory for results.jsonl, reports and reproducers")
    g.addoption("--kvc-ops", default=None, help="comma-separated ops to run (default: all)")
    g.addoption("--kvc-shard", default=None, metavar="I/N", help="run the I-th of N deterministic shards")
    g.addoption("--kvc-resume", action="store_true", help="skip tests already recorded in results.jsonl")
    g.addoption("--kvc-expectations", action="append", default=[], metavar="TOML")
    g.addoption("--kvc-timeout", type=profiles.timeout_seconds, default=None,
                help="seconds per backend call, > 0 (default: profile)")
    g.addoption("--kvc-shrink-seconds", type=profiles.timeout_seconds, default=None,
                help="seconds of shrinking per test, > 0, after which the smallest counterexample so far is "
                     "kept (default: profile)")
    g.addoption("--kvc-run-unclaimed", action="store_true",
                help="also run cases outside the claims (pass -> unclaimed-pass, fail -> unsupported)")
    g.addoption("--kvc-isolation", choices=("subprocess", "none"), default="subprocess")
    g.addoption("--kvc-max-crashes", type=int, default=None, metavar="N",
                help="after N crashes or hangs in a row of one backend's op, record its remaining tests as "
                     "`not run` (default 3; 0: never; counted per pytest process)")
    g.addoption("--kvc-progress", action="store_true",
                help="print where the run stands: one updating line on a terminal, one line per backend x op "
                     "otherwise (conformance/progress.py)")


class RunState:
    def __init__(self, config):
        opt = config.getoption
        self.config = config
        self.out = Path(opt("kvc_out")).resolve() if opt("kvc_out") else None
        self.resume = opt("kvc_resume")
        self.controller = not hasattr(config, "workerinput")
        options = self._options(config)
        self.backends = options["backends"]
        self.profile = profiles.get(options["profile"])
        self.ops = options["ops"]
        self.timeout = options["timeout"]
        self.shrink_seconds = opt("kvc_shrink_seconds")   # None: the profile's
        self.run_unclaimed = options["run_unclaimed"]
        self.max_crashes = options["max_crashes"]
        self.shard = _parse_shard(opt("kvc_shard"))
        try:
            self.expectations = expectations.load(options["expectations"])
        except expectations.ExpectationError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.crash_streak: dict[tuple[str, str], int] = {}   # (backend spec, op) -> crashes in a row
        self.done: set[str] = set()
        self.workers: dict[str, object] = {}
        self.run: dict = {}
        self.recorded = 0          # result lines written by this session
        self.cut_short = False     # a result line could not be written: the run stops
        self.progress = None       # progress.Progress of the controller under --kvc-progress, once planned
        self.started = time.monotonic()
        self.loaded: dict[str, loading.Loaded] = {}
        # The gate (gate.py) judges a session that names a backend or an output folder: it loads every
        # backend before collection (controller), leaves out the tests of those that cannot be checked,
        # and turns the verdict into the exit status. A session with neither (this plugin is loaded in
        # every pytest session of the environment) keeps pytest's own outcome.
        self.gate_on = bool(opt("kvc_backend") or opt("kvc_out"))
        inherited = getattr(config, "workerinput", {})   # from the controller (pytest_configure_node)
        self.not_runnable: dict[str, str] = dict(inherited.get("kvc_not_runnable", {}))
        self.names: dict[str, str] = dict(inherited.get("kvc_names", {}))
        self.records: list[dict] = []         # this session's records (controller), for the gate
        self.foreign_failures = False         # a failed test that is not a conformance test
        self.lost: list[dict] = []            # engine trouble the records cannot show (gate reasons)
        self.selected: int | None = None      # conformance tests selected before sharding and resuming
        self.suite_ops: set[str] | None = None
        self.by_hand = _selected_by_hand(config)
        self.gate: dict | None = None
        if self.out is not None:
            self.results_path = self.out / outdir.RESULTS
            if self.controller:
                self._own_folder(options)
            if self.resume and self.results_path.exists():
                for line in self.results_path.read_text(errors="replace").splitlines():
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        continue   # a line cut short by the interruption we resume from
                    if isinstance(rec, dict) and rec.get("status") in FINAL:
                        self.done.add(rec["id"])

    def _options(self, config) -> dict:
        """The run's options (outdir.RESUMED): as given, else (with --kvc-resume) the resumed run's, else
        the defaults. Under --kvc-resume, a given option that differs from the resumed run's is a usage
        error (in every xdist process alike: each reads the same run.json)."""
        opt = config.getoption
        ops = [o.strip() for o in opt("kvc_ops").split(",") if o.strip()] if opt("kvc_ops") else None
        given = {"profile": opt("kvc_profile"), "ops": ops,
                 "backends": list(dict.fromkeys(opt("kvc_backend"))) or None,   # a repeated spec runs once
                 "seed": _seed(config), "timeout": opt("kvc_timeout"),
                 "expectations": [str(Path(p).resolve()) for p in opt("kvc_expectations")] or None,
                 "run_unclaimed": opt("kvc_run_unclaimed"), "max_crashes": opt("kvc_max_crashes")}
        if self.resume and self.out is not None and outdir.read_run(self.out) is not None:
            try:
                given = outdir.resumed_options(self.out, given)
            except outdir.FolderError as exc:
                raise pytest.UsageError(str(exc)) from None
            if given["seed"] is not None and _seed(config) is None:
                # restore the resumed run's --hypothesis-seed (Hypothesis's plugin reads it into this)
                from hypothesis import core
                core.global_force_seed = given["seed"]
        defaults = {"profile": os.environ.get("KVCONFORM_PROFILE", "quick"), "backends": ["numpy"],
                    "expectations": [], "run_unclaimed": False, "max_crashes": 3}
        return {k: (v if v is not None else defaults.get(k)) for k, v in given.items()}

    def _own_folder(self, options: dict) -> None:
        """The controller's part: DIR's lock; a new run deletes the earlier run's files, a resumed one
        repairs a torn last line of results.jsonl; run.json says the run is under way."""
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            outdir.lock(self.out)
            if self.resume:
                outdir.repair_results(self.results_path)
            else:
                outdir.clear(self.out)
            if not self.resume or not self.results_path.exists():
                self.results_path.write_text("")
            meta = {"profile": self.profile.name, "backends": self.backends,
                    "expectations": [e.to_json() for e in self.expectations],
                    "shard": self.config.getoption("kvc_shard"), "seed": options["seed"], "options": options,
                    "ops": self.ops, "by_hand": self.by_hand, "run_id": _run_identity(self.config, self)}
            self.run = outdir.started_run(self.out, meta, self.resume)
        except outdir.FolderError as exc:
            raise pytest.UsageError(str(exc)) from None
        except OSError as exc:
            raise pytest.UsageError(f"--kvc-out {self.out} is not writable: {exc.strerror or exc}") from None
        interrupt.install()

    def record(self, line: str, session) -> None:
        """Append one result line to results.jsonl; a write that fails (a full disk) stops the run: the
        rest would be lost too, and the results so far must stay readable."""
        if self.cut_short:
            return
        try:
            with open(self.results_path, "a") as fh:   # one line per test, flushed at once
                fh.write(line + "\n")
            self.recorded += 1
        except OSError as exc:
            self.cut_short = True
            interrupt.STOP.write_error = f"cannot write {self.results_path}: {exc.strerror or exc}"
            _stop_session(session, interrupt.STOP.write_error)

    def _load(self, spec: str) -> loading.Loaded:
        timeout = self.timeout or self.profile.call_timeout
        loaded = loading.load(spec, timeout=timeout,
                              isolated=self.config.getoption("kvc_isolation") != "none")
        self._keep(loaded)
        return loaded

    def _keep(self, loaded: loading.Loaded) -> None:
        self.loaded[loaded.spec] = loaded
        self._canaries(loaded)
        if self.out is not None:
            try:
                (self.out / "backends").mkdir(parents=True, exist_ok=True)
                safe = artifacts.case_id(loaded.spec)
                outdir.write_atomic(self.out / "backends" / f"{safe}.json",
                                    json.dumps(dict(loaded.description, spec=loaded.spec), indent=2, default=str)
                                    + "\n")
            except OSError as exc:   # a full disk: the run stops after this test
                interrupt.STOP.write_error = interrupt.STOP.write_error or (
                    f"cannot write {self.out}/backends: {exc.strerror or exc}")
                _stop_session(_CONFIG.get("session"), interrupt.STOP.write_error)

    def _canaries(self, loaded: loading.Loaded) -> None:
        """A backend in the Triton interpreter or Pallas interpret mode: the platform's canaries
        (canaries.py) in its description, where the diagnosis, the reports and run.json find them."""
        if not loaded.description.get("available") or "canaries" in loaded.description:
            return
        cache = None
        if self.out is not None:
            cache = self.out / "backends"
            try:
                cache.mkdir(parents=True, exist_ok=True)
            except OSError:
                cache = None
        found = canaries.results_for(loaded.description, cache)
        if found:
            loaded.description["canaries"] = found
            if self.run is not None:
                self.run.setdefault("canaries", {})[loaded.spec] = found

    def load_all(self, *, serving: bool) -> None:
        """Load every backend of the run at once (the controller, before collection): one line for each
        that cannot be checked, whose tests are then left out. `serving`: this process runs the tests and
        keeps the workers for them (without pytest-xdist); else they are stopped once described."""
        timeout = self.timeout or self.profile.call_timeout
        for spec, loaded in loading.load_all(self.backends, timeout=timeout,
                                             isolated=self.config.getoption("kvc_isolation") != "none").items():
            if not serving:
                loaded.stop()
                loaded = loading.Loaded(spec, loaded.description)
            self._keep(loaded)
            if loaded.problem:
                self.not_runnable[spec] = loaded.problem
            self.names[spec] = loaded.description.get("name", spec)

    def worker(self, spec: str):
        """(worker, description) of backend `spec`, loaded at the first test that needs it."""
        if spec not in self.loaded or (self.loaded[spec].worker is None and not self.loaded[spec].problem):
            self._load(spec)
        loaded = self.loaded[spec]
        return loaded.worker, loaded.description

    def descriptions(self) -> list[dict]:
        return [dict(loaded.description, spec=spec) for spec, loaded in self.loaded.items()]

    def session_facts(self, extra=()) -> dict:
        """What the gate knows of this session beyond results.jsonl (build.assemble's `session`)."""
        return {"selected": self.selected, "suite_ops": self.suite_ops, "by_hand": self.by_hand,
                "whole": self.shard is None, "extra": list(extra)}

    def close(self):
        for loaded in self.loaded.values():
            loaded.stop()
            if getattr(loaded.worker, "crash_output", None) is not None:
                loaded.worker.crash_output.discard()
        if self.out is not None and self.controller:
            interrupt.restore()
            outdir.unlock(self.out)


def _selected_by_hand(config) -> bool:
    """Tests chosen by hand (-k, -m, --deselect, node ids or single modules): then a claimed op without a
    numerical test is a warning, not a reason the gate fails."""
    opt = config.option
    return bool(getattr(opt, "keyword", "") or getattr(opt, "markexpr", "") or getattr(opt, "deselect", None)
                or any("::" in str(a) or str(a).endswith(".py") for a in config.args))


def _run_identity(config, state) -> str:
    """The identity of a run, the same for each of its shards wherever they run (the options that decide
    which tests run and how; no paths): `report merge` tells a missing or foreign shard by it."""
    import hashlib

    from kvconform import SPEC_VERSION, __version__
    picked = sorted(str(a).replace(os.sep, "/").rsplit("/conformance/suite/", 1)[-1] for a in config.args
                    if "::" in str(a) or str(a).endswith(".py"))
    facts = {"suite": __version__, "spec": SPEC_VERSION, "profile": state.profile.name, "seed": _seed(config),
             "backends": sorted(state.backends), "ops": sorted(state.ops) if state.ops else None,
             "shards": state.shard[1] if state.shard else None, "picked": picked,
             "keyword": getattr(config.option, "keyword", ""), "markexpr": getattr(config.option, "markexpr", ""),
             "expectations": sorted(f"{e.test}|{e.backend}" for e in state.expectations)}
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _stop_session(session, reason: str) -> None:
    """End the run after the test in progress, with or without pytest-xdist."""
    if session is not None:
        session.shouldstop = reason
        dsession = session.config.pluginmanager.getplugin("dsession")
        if dsession is not None and not getattr(dsession, "shouldstop", False):
            dsession.shouldstop = reason


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

    specs = sorted(config._kvconform.backends, key=lambda b: len(_backend_id(b)), reverse=True)

    class ModuleBackendScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.partition("::")[0]
            backend = _backend_in_id(nodeid, specs)
            return f"{module}@{_backend_id(backend) if backend else ''}"

    return ModuleBackendScheduling(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(session, config, items):
    """Before the other plugins: the ops the suite has tests for. After them (-k, -m, --deselect done):
    leave out the tests of other ops and of backends that cannot be checked, count what is selected (the
    gate's "no test was selected"), then take this shard's slice and skip what a resumed run has done."""
    state = config._kvconform
    suite_ops = {m.kwargs.get("op") for m in (i.get_closest_marker("kvconform") for i in items) if m is not None}
    yield
    keep, drop = [], []
    conformance = False
    selected = 0
    for item in items:
        marker = item.get_closest_marker("kvconform")
        if marker is None:
            keep.append(item)
            continue
        conformance = True
        op = marker.kwargs.get("op")
        backend = item.callspec.params.get("kvc_backend", "") if hasattr(item, "callspec") else ""
        if (state.ops is not None and op not in state.ops) or backend in state.not_runnable:
            drop.append(item)
            continue
        selected += 1
        if state.shard and zlib.crc32(item.nodeid.encode()) % state.shard[1] != state.shard[0] - 1:
            drop.append(item)
        elif item.nodeid in state.done:
            drop.append(item)
        else:
            keep.append(item)
            if config.getoption("tbstyle", "auto") == "auto":
                _report_the_message_only(item)
            names = {_backend_id(backend), backend, state.names.get(backend, backend)}
            match = expectations.first_match(state.expectations, item.nodeid, names)
            if match is not None:
                item.add_marker(pytest.mark.xfail(reason=match.reason, strict=match.strict))
                item._kvc_expectation = match
    state.selected, state.suite_ops = selected, suite_ops
    if hasattr(config, "workeroutput"):   # pytest-xdist worker: the controller's gate needs the counts
        config.workeroutput["kvc_selected"] = selected
        config.workeroutput["kvc_suite_ops"] = sorted(suite_ops)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if state.controller and conformance:
        _plan_progress(config, {item.nodeid: (_backend_spec(item), item.get_closest_marker("kvconform").kwargs["op"])
                                for item in keep if item.get_closest_marker("kvconform") is not None})
    if conformance:   # before any test draws a case, in every process that collected conformance tests
        profiles.ignore_source_constants()


def _backend_spec(item) -> str:
    return item.callspec.params.get("kvc_backend", "?") if hasattr(item, "callspec") else "?"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """Under `--jobs N` the controller learns the test ids from the first worker's collection (every
    worker collects the same tests): the totals of --kvc-progress."""
    config = node.config
    state = getattr(config, "_kvconform", None)
    if state is None or state.progress is not None or not config.getoption("kvc_progress"):
        return
    ops = progress.ops_of_ids(ids, Path(str(config.rootpath)))
    specs = sorted(state.backends, key=lambda b: len(_backend_id(b)), reverse=True)
    _plan_progress(config, {i: (_backend_in_id(i, specs), op) for i, op in ops.items()})


def _backend_in_id(nodeid: str, specs: list[str]) -> str:
    """The backend spec a suite test id is parametrized with (`test_x[numpy-...]`); "" if none."""
    name = nodeid.partition("::")[2]
    params = name[name.find("[") + 1:] if "[" in name else ""
    return next((b for b in specs if params.startswith(_backend_id(b))
                 and params[len(_backend_id(b)):len(_backend_id(b)) + 1] in ("-", "]")), "")


def _plan_progress(config, groups: dict) -> None:
    state = config._kvconform
    if not config.getoption("kvc_progress") or state.progress is not None:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    tty = bool(getattr(reporter, "isatty", False))
    state.progress = progress.Progress(lambda text: reporter._tw.write(text, flush=True), tty=tty,
                                       start=state.started)
    state.progress.plan(groups)


@pytest.hookimpl(hookwrapper=True)
def pytest_report_teststatus(report, config):
    """Under --kvc-progress the progress line replaces pytest's one letter per test (which would break it
    up on a terminal and say less in a log)."""
    outcome = yield
    result = outcome.get_result()
    if config.getoption("kvc_progress", False) and isinstance(result, tuple) and len(result) == 3 and result[1]:
        outcome.force_result((result[0], "", result[2]))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist: each worker process learns which backends the controller could not load (their tests
    are left out in every process alike, as xdist requires) and each backend's name (expectations)."""
    state = node.config._kvconform
    node.workerinput["kvc_not_runnable"] = dict(state.not_runnable)
    node.workerinput["kvc_names"] = dict(state.names)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: the selection counts of a worker (every worker collects the same tests)."""
    state = node.config._kvconform
    output = getattr(node, "workeroutput", None) or {}
    if "kvc_selected" in output:
        state.selected = max(state.selected or 0, output["kvc_selected"])
        state.suite_ops = (state.suite_ops or set()) | set(output.get("kvc_suite_ops", ()))


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
        if excinfo.errisinstance((ConformanceFailure, EngineError)):
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
                      run_unclaimed=state.run_unclaimed, call_timeout=state.timeout,
                      shrink_seconds=state.shrink_seconds)
    request.node._kvc_harness = harness
    if description.get("load_error") or description.get("claims_error"):
        # loaded by the controller but not by this process, or a session without the gate: an error of
        # the run (the gate's NOT CHECKED), never a failure of the kernel or a quiet `unsupported`
        pytest.fail(f"not run: backend {kvc_backend} {gate.backend_problem(description)}", pytrace=False)
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
    rep.user_properties.append(("kvconform", json.dumps(record, default=str)))
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
    if call.excinfo is not None and call.excinfo.errisinstance(EngineError):
        return "error", f"[{harness.op}] engine error (not the backend's): {call.excinfo.value}"
    from hypothesis.errors import Flaky, FlakyFailure
    if call.excinfo is not None and call.excinfo.errisinstance(FlakyFailure) and harness.failure is not None:
        return "flaky", _exc_text(call, harness)
    if call.excinfo is not None and call.excinfo.errisinstance(Flaky):
        # a strategy drawing differently on the same data (FlakyStrategyDefinition) is the suite's bug
        return "error", f"[{harness.op}] {call.excinfo.typename} (suite bug): {call.excinfo.value}"
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


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG["config"] = session.config
    _CONFIG["session"] = session
    state = session.config._kvconform
    if state.controller and state.gate_on:
        # before pytest-xdist starts its workers (its sessionstart is trylast): they learn the outcome
        state.load_all(serving=session.config.pluginmanager.getplugin("dsession") is None)


def pytest_sessionfinish(session, exitstatus):
    state = session.config._kvconform
    if state.progress is not None:
        state.progress.close()
    if not state.controller:
        return
    from .report import build
    report, extra = None, list(state.lost)
    stop = interrupt.STOP
    if state.out is not None and state.results_path.exists():
        reason = stop.reason()
        status = "interrupted" if stop.signal else "cut short" if stop.write_error else "complete"
        early = session.shouldfail or session.shouldstop
        if status == "complete" and (early or exitstatus == pytest.ExitCode.INTERRUPTED):
            # stopped early otherwise: -x / --maxfail, a worker's own KeyboardInterrupt
            status, reason = "stopped", f"stopped early ({early or 'interrupted'})"
        run = outdir.finished_run(state.out, state.run, reason, status)
        try:
            report = build.write_all(state.out, run=run, session=state.session_facts(extra))
        except OSError as exc:   # a full disk: results.jsonl has the results; `kvconform report DIR` rebuilds
            stop.write_error = stop.write_error or f"cannot write the reports in {state.out}: {exc.strerror or exc}"
            session.config._kvconform_report_error = (f"{stop.write_error}; after freeing space, `kvconform report "
                                                      f"{state.out}` writes them from results.jsonl")
            extra.append(gate.reason("disk-full", f"the reports could not be written: {stop.write_error}"))
        except Exception as exc:  # a report bug must not hide the test results
            session.config._kvconform_report_error = f"{type(exc).__name__}: {exc}"
            extra.append(gate.reason("report", f"the reports could not be written ({type(exc).__name__}: {exc})"))
    if not state.gate_on:
        return
    if report is None:   # no --kvc-out, or the reports failed: the verdict from this session's records
        records, backends = build.distinct_backends(state.records, state.descriptions())
        report = build.assemble(records, backends=backends, run={"profile": state.profile.name, "ops": state.ops},
                                session=state.session_facts(extra))
    state.gate = report["gate"]
    code = stop.exit_code()
    if code is not None:   # interrupted (130, 143), or cut short by a record it could not write (3)
        if code == interrupt.EXIT_NOT_CHECKED and (session.testsfailed or state.gate["exit_code"] == 1):
            code = gate.EXIT_FAILED   # cut short after a failure: the failure decides
        session.exitstatus = code
        return
    status = int(exitstatus)
    if status == pytest.ExitCode.INTERRUPTED and state.lost and not state.records:
        status = pytest.ExitCode.TESTS_FAILED   # "interrupted" by collection errors, not by a signal
    session.exitstatus = gate.combine(status, state.gate, foreign_failures=state.foreign_failures)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = getattr(config, "_kvconform", None)
    if state is None or not state.controller:
        return
    error = getattr(config, "_kvconform_report_error", None)
    if error:
        terminalreporter.write_line(f"kvconform: report generation failed: {error}", red=True)
    report = None
    if state.out is not None and not error:
        try:
            report = json.loads((state.out / "report.json").read_text())
        except (OSError, json.JSONDecodeError):
            report = None
    if report is None and state.gate is None:
        return
    from .report import build, causes
    terminalreporter.section("kvconform")
    if report is not None:
        for line in build.summary_lines(report, causes.listed_lines(report)):
            terminalreporter.write_line(line)
    if state.gate is not None:
        for line in gate.lines(state.gate):
            terminalreporter.write_line(line)
    if report is not None:
        terminalreporter.write_line(f"reports: {state.out}/report.md, report.html, report.json, junit.xml")
