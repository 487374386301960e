"""Claims that ask for the impossible (hostile backends, round two, item 4): sizes no case within the
per-case memory budget can have are a claims problem (NOT CHECKED, exit 3), and an allocation the engine
cannot make is its own `error`, never the backend's failure (tests/engine/impossible_backends.py)."""
from __future__ import annotations

from kvconform.backends.base import CASE_MEMORY_BUDGET, claims_problems

BUDGET_WORDS = "above the per-case memory budget of"


def test_sizes_beyond_the_memory_budget_are_claims_problems(monkeypatch):
    monkeypatch.delenv("KVCONFORM_CASE_MEMORY", raising=False)
    found = claims_problems({"write_kv": {"page_sizes": [2 ** 30], "limits": {"max_pages": {"min": 10 ** 9}}}})
    assert len(found["write_kv"]) == 2 and all(BUDGET_WORDS in p for p in found["write_kv"]), found
    assert f"{CASE_MEMORY_BUDGET:,} bytes" in found["write_kv"][0]
    assert claims_problems({"write_kv": {"page_sizes": [16], "limits": {"max_pages": {"min": 2, "max": 10 ** 9}}}}) == {}
    monkeypatch.setenv("KVCONFORM_CASE_MEMORY", str(2 ** 40))    # configurable: then 2**30 tokens can be drawn
    assert claims_problems({"write_kv": {"page_sizes": [2 ** 30]}}) == {}


def test_impossible_claims_are_not_checked_and_an_engine_allocation_is_never_the_backends(cli, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.delenv("KVCONFORM_CASE_MEMORY", raising=False)
    out = tmp_path / "out"
    proc = cli("run", "--backend", "impossible_backends:make_huge_pages", "--backend",
               "impossible_backends:make_huge_minimum", "--ops", "write_kv", "--out", str(out), "--", "-k",
               "differential and base")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = cli.report(out)
    assert not [r for r in report["results"] if r["status"] == "fail"]
    reasons = [r["message"] for r in report["gate"]["not_checked"] if r["kind"] == "backend"]
    assert len(reasons) == 2 and all(BUDGET_WORDS in m for m in reasons), reasons

    monkeypatch.setenv("KVCONFORM_CASE_MEMORY", str(2 ** 50))   # let the claim through: drawing cannot allocate
    out = tmp_path / "out2"
    proc = cli("run", "--backend", "impossible_backends:make_gigantic_pages", "--ops", "write_kv", "--out",
               str(out), "--", "-k", "differential and base")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    (record,) = cli.report(out)["results"]
    assert record["status"] == "error" and "the engine ran out of memory (not the backend's)" in record["message"]
