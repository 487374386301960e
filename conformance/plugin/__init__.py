"""The pytest plugin behind `kvconform run` (the `pytest11` entry point): backends as parameters, statuses,
streaming results, reports.

Inert in ordinary pytest runs: it only adds `--kvc-*` options, the `kvconform` marker and the `kvc`
fixture, which suite tests (conformance/suite/) use. With `--kvc-out DIR` it streams one JSON line per
test to DIR/results.jsonl from the controlling process (so it works under pytest-xdist), writes a
reproducer for every failure, and at the end renders report.json / report.md / report.html / junit.xml.

The run owns DIR (outdir.py): it takes DIR's lock, a new run deletes an earlier run's files there, and
`--kvc-resume` restores the earlier run's options from run.json and repairs a torn last line of
results.jsonl. SIGINT, SIGTERM and a record that cannot be written end the run with the reports marked
partial (interrupt.py). A failing test's last failing call is replayed (flaky.py): one that does not fail
every replay is `flaky`.


Split by concern: `options.py` (--kvc-* options), `state.py` (the run's state in the controlling process),
`collection.py` (backends as parameters, selection, xdist scheduling), `outcomes.py` (one test: the `kvc`
fixture, its status, record, reproducer and replays), `session.py` (start, end, reports, exit status).
pytest finds the hooks and fixtures as attributes of this module.
"""
from kvconform.conformance.plugin.collection import (pytest_collection_finish,  # noqa: F401
                                                     pytest_collection_modifyitems,
                                                     pytest_configure_node, pytest_generate_tests,
                                                     pytest_ignore_collect,
                                                     pytest_report_teststatus, pytest_testnodedown,
                                                     pytest_xdist_make_scheduler,
                                                     pytest_xdist_node_collection_finished)
from kvconform.conformance.plugin.options import pytest_addoption  # noqa: F401
from kvconform.conformance.plugin.outcomes import (kvc, pytest_collectreport, pytest_runtest_call,  # noqa: F401
                                                   pytest_runtest_logreport, pytest_runtest_makereport)
from kvconform.conformance.plugin.session import (pytest_configure, pytest_sessionfinish,  # noqa: F401
                                                  pytest_sessionstart, pytest_terminal_summary, pytest_unconfigure)
