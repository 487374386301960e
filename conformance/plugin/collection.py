"""Collection: backends as test parameters, the run's selection (ops, shard, resume), xdist scheduling."""
from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from kvconform.conformance.harness import profiles
from kvconform.conformance.run import expectations, gate, progress, selection, suite_modules

from .outcomes import _report_the_message_only


def pytest_generate_tests(metafunc):
    if "kvc" in metafunc.fixturenames:
        state = metafunc.config._kvconform
        metafunc.parametrize("kvc_backend", state.backends,
                             ids=[_backend_id(b, state.backends) for b in state.backends], scope="function")


def _backend_id(spec: str, specs=()) -> str:
    """A backend's part of a test id: its factory's name (`make_backend` of `mypkg.kernels:make_backend`), or
    the whole spec with `:` as `.` when another backend of the run has a factory of that name (two
    `...:make`): pytest would otherwise number them `make0`, `make1` in the order they were given, and a
    test's id, its JUnit name and its reproducer's folder would change with that order."""
    short = spec.split(":")[-1] if ":" in spec else spec
    if ":" in spec and any(other != spec and other.split(":")[-1] == short for other in specs):
        return spec.replace(":", ".")
    return short


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

    every = config._kvconform.backends
    specs = sorted(every, key=lambda b: len(_backend_id(b, every)), reverse=True)

    class ModuleBackendScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.partition("::")[0]
            backend = _backend_in_id(nodeid, specs)
            return f"{module}@{_backend_id(backend, specs) if backend else ''}"

    return ModuleBackendScheduling(config, log)


def pytest_ignore_collect(collection_path, config):
    """A run of some ops does not import the suite modules that declare none of them (run/suite_modules.py)."""
    state = getattr(config, "_kvconform", None)
    if state is None or state.ops is None or collection_path.suffix != ".py" \
            or not collection_path.name.startswith("test_"):
        return None
    return None if suite_modules.needed(collection_path, state.ops) else True


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(session, config, items):
    """Before the other plugins: the ops the suite has tests for. After them (-k, -m, --deselect done):
    leave out the tests of other ops and of backends that cannot be checked, count what is selected (the
    gate's "no test was selected"), then take this shard's slice and skip what a resumed run has done."""
    state = config._kvconform
    suite_ops = {m.kwargs.get("op") for m in (i.get_closest_marker("kvconform") for i in items) if m is not None}
    before = sum(1 for item in items if _in_run(item, state))
    cut = _collection_cut(session, config, items) if state.gate_on else None
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
        backend = item.callspec.params.get("kvc_backend", "") if hasattr(item, "callspec") else ""
        if not _in_run(item, state):
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
            names = {_backend_id(backend, state.backends), _backend_id(backend), backend,
                     state.names.get(backend, backend)}
            match = expectations.first_match(state.expectations, item.nodeid, names)
            if match is not None:
                item.add_marker(pytest.mark.xfail(reason=match.reason, strict=match.strict))
                item._kvc_expectation = match
    state.selected, state.suite_ops = selected, suite_ops
    narrowed = [line for line in (selection.narrowed_by_hand(config, before, selected),
                                  cut(selected) if cut else None) if line]
    if state.gate_on:
        state.lost += [gate.reason("selection", line) for line in narrowed]
    state.planned = sum(1 for item in keep if item.get_closest_marker("kvconform") is not None)
    if config.pluginmanager.hasplugin("timeout"):   # the engine bounds each backend call (run/selection.py)
        for item in keep:
            if item.get_closest_marker("kvconform") is not None:
                item.add_marker(pytest.mark.timeout(0))
    if hasattr(config, "workeroutput"):   # pytest-xdist worker: the controller's gate needs the counts
        config.workeroutput["kvc_selected"] = selected
        config.workeroutput["kvc_suite_ops"] = sorted(suite_ops)
        config.workeroutput["kvc_narrowed"] = narrowed
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if state.controller and conformance:
        _plan_progress(config, {item.nodeid: (_backend_spec(item), item.get_closest_marker("kvconform").kwargs["op"])
                                for item in keep if item.get_closest_marker("kvconform") is not None})
    if conformance:   # before any test draws a case, in every process that collected conformance tests
        profiles.ignore_source_constants()


def _in_run(item, state) -> bool:
    """A conformance test of the run's ops (--ops) and of a backend that can be checked."""
    marker = item.get_closest_marker("kvconform")
    if marker is None:
        return False
    backend = item.callspec.params.get("kvc_backend", "") if hasattr(item, "callspec") else ""
    return (state.ops is None or marker.kwargs.get("op") in state.ops) and backend not in state.not_runnable


def _collection_cut(session, config, items):
    """Node ids, module paths and --ignore options that left a module of the suite out of the collection or
    cut it (run/selection.py): a function of the run's tests left -> its NOT CHECKED line, or None. The
    suite's folders are those of its collected tests; the arguments as pytest resolved them (pyargs too)."""
    parts = list(getattr(session, "_initial_parts", None) or ())
    dirs = {Path(str(item.path)).parent for item in items if item.get_closest_marker("kvconform") is not None}
    if not parts or not dirs:
        return None
    whole = [Path(p.path) for p in parts if not p.parts]

    def ignored(path: Path) -> bool:
        if not suite_modules.needed(path, config._kvconform.ops):   # no test of the run's ops: not a cut
            return False
        return bool(config.hook.pytest_ignore_collect(collection_path=path, config=config))

    modules = selection.left_out_modules(dirs, whole, ignored)
    if not modules:
        return None
    given = [Path(p.path).name + "".join(f"::{x}" for x in p.parts) for p in parts
             if p.parts or not any(d == p.path or p.path in d.parents for d in dirs)]
    flags = [f"{flag} {value}" for flag, dest in (("--ignore", "ignore"), ("--ignore-glob", "ignore_glob"))
             for value in config.getoption(dest, None) or ()]
    total = sum(1 for d in dirs for _ in d.glob("test_*.py"))
    return lambda after: selection.narrowed_collection(given, flags, modules, total, after)


def pytest_collection_finish(session):
    """pytest's cache selection (`--lf`, `--sw`) deselects after this plugin counted the run's tests (its
    hook wraps the others): what it left out is counted here, from the final items (run/selection.py)."""
    state = session.config._kvconform
    if state.planned is None or not state.gate_on:
        return
    final = sum(1 for item in session.items if item.get_closest_marker("kvconform") is not None)
    narrowed = selection.narrowed_by_cache(session.config, state.planned, final)
    if narrowed:
        state.lost.append(gate.reason("selection", narrowed))
    state.planned = final


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
    specs = sorted(state.backends, key=lambda b: len(_backend_id(b, state.backends)), reverse=True)
    _plan_progress(config, {i: (_backend_in_id(i, specs), op) for i, op in ops.items()})


def _backend_in_id(nodeid: str, specs: list[str]) -> str:
    """The backend spec a suite test id is parametrized with (`test_x[numpy-...]`); "" if none."""
    name = nodeid.partition("::")[2]
    params = name[name.find("[") + 1:] if "[" in name else ""
    ids = {b: _backend_id(b, specs) for b in specs}
    return next((b for b in specs if params.startswith(ids[b]) and params[len(ids[b]):len(ids[b]) + 1] in ("-", "]")),
                "")


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
        known = {r["message"] for r in state.lost}
        state.lost += [gate.reason("selection", line) for line in output.get("kvc_narrowed", ())
                       if line not in known]
