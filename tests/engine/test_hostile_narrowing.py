"""Runs narrowed by hand, xdist options, a user's folder as --out, an op a profile has no test of
(hostile backends, round two, what was left open), through `kvconform run` and the plugin route:
-k / -m / --deselect, node ids, single modules and --ignore are NOT CHECKED naming the selection; an
xdist option after `--` is refused (--jobs is the way); a folder holding files kvconform did not write
is refused; "no test was selected" says which op the profile lacks."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvconform.conformance import cli as kvconform_cli

HERE = Path(__file__).resolve().parent
SUITE = Path(kvconform_cli.__file__).resolve().parents[1] / "suite"
CHEAP = ["--kvc-ops", "append_slot_mapping", "--kvc-profile", "ci"]   # 18 quick numpy tests


def _pytest(tmp_path, *args, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    env.pop("KVCONFORM_PROFILE", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path)


def _selection_reasons(out: Path) -> list[str]:
    gate = json.loads((out / "report.json").read_text())["gate"]
    return [r["message"] for r in gate["not_checked"] if r["kind"] == "selection"]


def test_ignore_and_mark_selections_through_the_cli_are_not_checked(cli, tmp_path):
    """Before: exit 0, "every claimed case checked", with a module ignored and tests deselected by mark. A
    module with no test of the run's ops (test_rotation.py here) is not a cut: its tests are not the run's."""
    out = tmp_path / "out"
    proc = cli("run", "--backend", "numpy", "--profile", "ci", "--ops", "append_slot_mapping", "--out", str(out),
               "--", "--ignore", str(SUITE / "test_strided.py"), "--ignore", str(SUITE / "test_rotation.py"),
               "-m", "kvconform and not xyz_never")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    reasons = _selection_reasons(out)
    ignored = [r for r in reasons if r.startswith("--ignore ")]
    assert len(ignored) == 1 and "leaving out or cutting 1 of the suite's" in ignored[0] \
        and "modules (test_strided.py)" in ignored[0], reasons
    # -m kept every test of the run: not a narrowing
    assert not [r for r in reasons if r.startswith("-m ")], reasons
    assert "NOT CHECKED --ignore " in proc.stdout


def test_a_single_module_and_deselect_on_the_plugin_route_are_not_checked(tmp_path):
    """Before: pytest's exit 0 for one suite module and a --deselect'ed test."""
    listed = _pytest(tmp_path, "--pyargs", "kvconform.conformance.suite.test_metadata", "--kvc-backend", "numpy",
                     *CHEAP, "--co")
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    assert len(ids) > 2, listed.stdout[-2000:]
    out = tmp_path / "out"
    proc = _pytest(tmp_path, "--pyargs", "kvconform.conformance.suite.test_metadata", "--kvc-backend", "numpy",
                   *CHEAP, "--kvc-out", str(out), "--deselect", ids[0])
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    reasons = _selection_reasons(out)
    assert f"--deselect {ids[0]} selected {len(ids) - 1} of the run's {len(ids)} tests" in " | ".join(reasons), \
        reasons
    module = [r for r in reasons if r.startswith("test_metadata.py selected ")]
    assert len(module) == 1 and "leaving out or cutting 13 of the suite's 14 modules" in module[0], reasons


@pytest.mark.parametrize("given", [["-n", "2"], ["-n2"], ["--numprocesses=2"], ["--dist", "loadfile"],
                                   ["-p", "xdist"], ["-pno:xdist"], ["--maxprocesses", "2"]])
def test_xdist_options_after_the_separator_are_refused(capsys, tmp_path, given):
    """Before: `-- -n 2` started xdist without the run's scheduler (and beside --jobs's workers)."""
    code = kvconform_cli.main(["run", "--backend", "numpy", "--out", str(tmp_path / "out"), "--", *given])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"pytest-xdist option {' '.join(given)!r} after --" in err[0] and "--jobs N is the way" in err[0], err
    assert not (tmp_path / "out" / ".kvconform.lock").exists()


def test_a_folder_kvconform_did_not_write_is_refused_on_both_routes(cli, tmp_path):
    """Before: a user's report.md in --out was replaced by the run's, silently."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my notes\n")
    proc = cli("run", "--backend", "numpy", "--ops", "append_slot_mapping", "--out", str(out))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "holds 'report.md', which kvconform did not write" in proc.stderr
    plugin = _pytest(tmp_path, "--pyargs", "kvconform.conformance.suite", "--kvc-backend", "numpy", *CHEAP,
                     "--kvc-out", str(out))
    assert plugin.returncode == 4, plugin.stdout[-2000:] + plugin.stderr[-2000:]   # pytest's usage error
    assert "--kvc-out" in plugin.stderr and "holds 'report.md', which kvconform did not write" in plugin.stderr
    assert (out / "report.md").read_text() == "my notes\n" and sorted(p.name for p in out.iterdir()) == ["report.md"]


def test_an_op_the_profile_has_no_test_of_is_named_and_merge_refuses_a_users_folder(cli, tmp_path):
    """Before: "no test was selected (check -k / -m / node ids, --ops and --shard)" for the models profile
    and an op it has no case for. `report merge --out` into a user's folder overwrote its report.md; into
    an earlier merge's folder it still writes."""
    proc = cli("run", "--backend", "numpy", "--profile", "models", "--ops", "rotate_keys", "--out",
               str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if "no test was selected" in x)
    assert "profile models has no test of rotate_keys (its suite tests " in line and "write_kv" in line, line
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes\n")
    merged = cli("report", "merge", str(tmp_path / "out" / "report.json"), "--out", str(mine))
    assert merged.returncode == 2 and "holds 'report.md', which kvconform did not write" in merged.stderr
    assert (mine / "report.md").read_text() == "my notes\n"
    for _ in range(2):   # a new folder, then the same folder again (an earlier merge's)
        again = cli("report", "merge", str(tmp_path / "out" / "report.json"), "--out", str(tmp_path / "merged"))
        assert again.returncode == 3, again.stdout[-2000:] + again.stderr[-2000:]
