"""The session: the run's start and end, the reports, the gate's exit status."""
from __future__ import annotations

import json

import pytest

from kvconform.conformance.run import gate, interrupt, outdir

from .outcomes import _CONFIG
from .state import RunState


def pytest_configure(config):
    config.addinivalue_line("markers", "kvconform(op, clauses, layer): a kvconform suite test")
    config._kvconform = RunState(config)


def pytest_unconfigure(config):
    state = getattr(config, "_kvconform", None)
    if state is not None:
        state.close()


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
    from kvconform.conformance.report import build
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
    from kvconform.conformance.report import build
    terminalreporter.section("kvconform")
    if report is not None:
        for line in build.summary_lines(report):
            terminalreporter.write_line(line)
    if state.gate is not None:
        for line in gate.lines(state.gate):
            terminalreporter.write_line(line)
    if report is not None:
        terminalreporter.write_line(f"reports: {state.out}/report.md, report.html, report.json, junit.xml")
