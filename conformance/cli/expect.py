"""`kvconform expect --from OUT`: expectation entries (expectations.py, docs/expectations.md) for a run's
failures, to be read, given a real reason and kept in the backend's expectations file.

One `[[xfail]]` entry per failing test (fail, crash, flaky; an xfail is already expected), each matching that
test alone: `test` the test's own name as its id ends (`test_attention_differential[make_backend-soft_cap]`:
the parameter is the backend factory's name, never a glob over other columns, so a passing column never
turns into an xpass), `backend` the backend's name, `diagnosis` the variation the failure passes with (or
else the diagnosis summary's first clause), so the entry covers this bug only and a second bug in the same
test stays a failure, and a `reason` that says what failed and must be replaced by why (an upstream file
and line, an issue). A flaky failure gets no entry: it is not a known bug but a kernel that answers
differently from call to call, and is listed as a comment instead.
"""
from __future__ import annotations

import json
from pathlib import Path

#: statuses a run's failures have that an entry can expect
EXPECTABLE = ("fail", "crash")


def _toml_string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's for the characters a message holds)."""
    return json.dumps(str(text), ensure_ascii=False)


def known_diagnosis(record: dict) -> str:
    """What an entry's `diagnosis` names: the first variation the failure passes with, else the first
    clause of the diagnosis summary, else "" (the entry then covers any failure of the test)."""
    diagnosis = record.get("diagnosis") or {}
    for variation in diagnosis.get("variations") or ():
        if variation.get("outcome") == "pass" and variation.get("name"):
            return variation["name"]
    return (diagnosis.get("summary") or "").split(";")[0].strip()[:200]


def entry(record: dict) -> str:
    """The TOML of one `[[xfail]]` entry for a failure record (results.jsonl)."""
    test = record["id"].split("::")[-1]
    head = (record.get("message") or "").split("\n", 1)[0].strip()[:240]
    lines = ["[[xfail]]", f"test = {_toml_string(test)}", f"backend = {_toml_string(record.get('backend', '*'))}"]
    diagnosis = known_diagnosis(record)
    if diagnosis:
        lines.append(f"diagnosis = {_toml_string(diagnosis)}")
    lines.append(f"reason = {_toml_string('TO BE WRITTEN (why, with an upstream file:line or issue): ' + head)}")
    if record.get("counterexample"):
        lines.append(f"# counterexample: {record['counterexample'][:240]}")
    if record.get("repro"):
        lines.append(f"# replay: kvconform replay {record['repro']} --backend {record.get('backend_spec')}")
    return "\n".join(lines) + "\n"


def entries_text(records: list[dict], source: str) -> str:
    """The whole file: a header, an entry per expectable failure, flaky failures as comments."""
    failed = [r for r in records if r.get("status") in EXPECTABLE]
    flaky = [r for r in records if r.get("status") == "flaky"]
    out = [f"# kvconform expectations for the failures of {source} ({len(failed)} entries). Replace each reason\n"
           f"# with why the failure is known (an upstream file:line or issue) before using the file: an entry\n"
           f"# whose reason starts with TO BE WRITTEN hides a failure nobody explained. docs/expectations.md.\n"]
    out += ["\n" + entry(r) for r in sorted(failed, key=lambda r: (r.get("backend", ""), r["id"]))]
    out += [f"\n# flaky, not expected (a kernel that answers differently from call to call): {r['id']} "
            f"[{r.get('backend')}]\n" for r in flaky]
    return "".join(out)


def from_run(out: Path) -> str:
    """entries_text of the run in folder `out` (its results.jsonl and backends/), or ValueError in words."""
    from kvconform.conformance.report import build
    from kvconform.conformance.run import outdir
    results = Path(out) / outdir.RESULTS
    if not results.is_file():
        raise ValueError(f"--from {out}: no run there (no {outdir.RESULTS}); give a `kvconform run --out` folder")
    records, _ = build.distinct_backends(build.read_results(results), build._load_backends(Path(out)))
    return entries_text(records, str(out))


def cmd_expect(args) -> int:
    from .arguments import UsageError
    try:
        text = from_run(Path(args.source))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.output is None:
        print(text, end="")
        return 0
    try:
        Path(args.output).write_text(text)
    except OSError as exc:
        raise UsageError(f"--output {args.output}: {exc.strerror or exc}") from None
    print(f"wrote {text.count('[[xfail]]')} entries to {args.output}")
    return 0
