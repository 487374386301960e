"""`kvconform claims OP` prints an op's whole claim vocabulary; `kvconform expect --from OUT` writes entries
that the expectations loader accepts and that turn exactly the run's failures into xfail."""
from __future__ import annotations

import json

from kvconform.backends import base
from kvconform.conformance.run import expectations

from test_run_records import _suite


def test_claims_prints_every_registered_name_of_the_op(cli):
    proc = cli("claims", "mla_paged_attention")
    assert proc.returncode == 0, proc.stderr
    for name in (*base.FEATURES["mla_paged_attention"], *base.LIMITS["mla_paged_attention"],
                 *base.CLAIM_FIELDS["mla_paged_attention"]):
        assert name in proc.stdout, name
    assert "rope_dim" in proc.stdout and "[activation dtype, KV dtype] pairs, in that order" in proc.stdout
    conventions = cli("claims", "selective_state_update").stdout
    assert "dt_softplus" in conventions and "convention: one of 'always'" in conventions
    wrong = cli("claims", "mla_attention")
    assert wrong.returncode == 2 and wrong.stderr.strip() == ("kvconform: error: unknown op 'mla_attention' "
                                                              "(did you mean 'mla_paged_attention'?)")
    assert "ragged_paged_attention" in cli("claims").stdout


def test_expect_writes_entries_that_expect_exactly_the_failures(cli, tmp_path):
    out, spec = tmp_path / "out", "record_backends:make_wrong_always"
    suite = str(_suite(tmp_path))
    assert cli("run", "--suite", suite, "--out", str(out), "--backend", spec).returncode == 1
    toml = tmp_path / "expected.toml"
    written = cli("expect", "--from", str(out), "--output", str(toml))
    assert written.returncode == 0 and written.stdout.strip() == f"wrote 2 entries to {toml}", written.stdout
    entries = expectations.load([toml])
    assert sorted(e.test for e in entries) == ["test_drawn[make_wrong_always]", "test_one_call[make_wrong_always]"]
    assert all(e.backend == "wrong-always" and e.reason.startswith("TO BE WRITTEN") for e in entries)
    again = tmp_path / "again"
    proc = cli("run", "--suite", suite, "--out", str(again), "--backend", spec, "--expectations", str(toml))
    assert proc.returncode == 0, proc.stdout[-2000:]
    statuses = [json.loads(line)["status"] for line in (again / "results.jsonl").read_text().splitlines()]
    assert statuses == ["xfail", "xfail"]
    missing = cli("expect", "--from", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "no run there" in missing.stderr
