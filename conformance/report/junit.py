"""junit.xml rendered from the report's results, so that it holds every test of the run.

pytest's own `--junitxml` holds only the tests of its last session: after `kvconform run --resume` that
was the resumed part alone, while report.json had all results (and a killed run left none). Rendered from
the same records as report.json, the two always agree. One `testcase` per result, with the properties
`kvc_backend`, `kvc_op`, `kvc_layer`, `kvc_status`, `kvc_clauses`; fail, crash and flaky are `failure`,
error is `error`, unsupported, skip, xfail and not run are `skipped` (as pytest's xunit1 files had them), with
the reason as message. Each reason
the gate gives for NOT CHECKED (gate.py) is one more testcase, classname `kvconform.gate`, with an `error`;
a partial run (interrupted, cut short) is the testcase `kvconform.run`, with an `error` saying so. A CI
that reads only junit.xml cannot see green where the gate is not. Control characters are written as escapes.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter

from kvconform.conformance.engine.backend_text import visible

OUTCOME = {"fail": "failure", "crash": "failure", "flaky": "failure", "error": "error",
           "unsupported": "skipped", "skip": "skipped", "xfail": "skipped", "not run": "skipped"}

#: characters XML 1.0 cannot hold (control characters of ANSI-coloured backend output, say)
_NOT_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value) -> str:
    return _NOT_XML.sub("?", visible(value))


def _names(test_id: str) -> tuple[str, str]:
    """(classname, name) of a pytest node id, as pytest's junit writes them: the module path dotted."""
    path, _, name = test_id.partition("::")
    return path.removesuffix(".py").replace("/", "."), name or path


def _outcome(record: dict) -> str | None:
    """The JUnit element of a result: an xpass of a strict expectation fails the gate, so it is a failure."""
    if record["status"] == "xpass" and record.get("strict"):
        return "failure"
    return OUTCOME.get(record["status"])


def _testcase(record: dict) -> ET.Element:
    classname, name = _names(record["id"])
    case = ET.Element("testcase", classname=_text(classname), name=_text(name),
                      time=str(record.get("duration", 0)))
    props = ET.SubElement(case, "properties")
    for key in ("backend", "op", "layer", "status"):
        ET.SubElement(props, "property", name=f"kvc_{key}", value=_text(record.get(key, "")))
    ET.SubElement(props, "property", name="kvc_clauses", value=_text(" ".join(record.get("clauses") or [])))
    outcome = _outcome(record)
    if outcome is not None:
        message = record.get("message") or record["status"]
        element = ET.SubElement(case, outcome, message=_text(message.splitlines()[0] if message else ""))
        element.text = _text(message)
    return case


def _not_checked(item: dict) -> ET.Element:
    name = ": ".join(x for x in (item["kind"], item.get("backend"), item.get("op")) if x)
    case = ET.Element("testcase", classname="kvconform.gate", name=_text(f"not checked: {name}"), time="0")
    element = ET.SubElement(case, "error", type="not-checked", message=_text(f"NOT CHECKED {item['message']}"))
    element.text = _text(item["message"])
    return case


def render(report: dict) -> str:
    results = report["results"]
    # a partial run is a reason of the gate too; its testcase is `kvconform.run`
    gate_items = [r for r in (report.get("gate") or {}).get("not_checked", []) if r["kind"] != "partial"]
    extra = len(gate_items) + bool(report.get("partial"))
    outcomes = Counter(_outcome(r) for r in results)
    suite = ET.Element("testsuite", name="kvconform", tests=str(len(results) + extra),
                       failures=str(outcomes["failure"]), errors=str(outcomes["error"] + extra),
                       skipped=str(outcomes["skipped"]),
                       time=f"{sum(r.get('duration') or 0 for r in results):.3f}")
    suite.extend(_testcase(r) for r in results)
    suite.extend(_not_checked(item) for item in gate_items)
    if report.get("partial"):
        case = ET.SubElement(suite, "testcase", classname="kvconform", name="run", time="0")
        ET.SubElement(case, "error", message=_text("partial run: " + report["partial"])).text = _text(report["partial"])
    root = ET.Element("testsuites", name="kvconform")
    root.append(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
