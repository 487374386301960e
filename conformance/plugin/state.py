"""One run's state in the controlling process: its options, output folder, records and progress."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from kvconform.conformance.engine import artifacts, canaries, finite_json, loading
from kvconform.conformance.harness import profiles
from kvconform.conformance.run import expectations, interrupt, outdir, selection

from .options import _parse_shard, _seed
from .outcomes import _CONFIG

FINAL = {"pass", "fail", "crash", "flaky", "unsupported", "unclaimed-pass", "xfail", "xpass", "skip", "error",
         "not run"}


class RunState:
    def __init__(self, config):
        opt = config.getoption
        self.config = config
        # collect-only runs nothing: no verdict, and the output folder is left as it is (run/selection.py)
        self.collect_only = selection.collect_only(config)
        self.out = Path(opt("kvc_out")).resolve() if opt("kvc_out") and not self.collect_only else None
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
        self.gate_on = bool(opt("kvc_backend") or opt("kvc_out")) and not self.collect_only
        inherited = getattr(config, "workerinput", {})   # from the controller (pytest_configure_node)
        self.not_runnable: dict[str, str] = dict(inherited.get("kvc_not_runnable", {}))
        self.names: dict[str, str] = dict(inherited.get("kvc_names", {}))
        self.records: list[dict] = []         # this session's records (controller), for the gate
        self.foreign_failures = False         # a failed test that is not a conformance test
        self.lost: list[dict] = []            # engine trouble the records cannot show (gate reasons)
        self.selected: int | None = None      # conformance tests selected before sharding and resuming
        self.planned: int | None = None       # conformance tests this session is to run (None: not collected here)
        self.suite_ops: set[str] | None = None
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
        from kvconform.backends.base import OPS, did_you_mean
        unknown = [o for o in ops or () if o not in OPS]
        if unknown:   # as `kvconform run --ops`: a typo is bad input, not "no test was selected"
            raise pytest.UsageError("; ".join(f"--kvc-ops: unknown op {o!r}{did_you_mean(o, OPS)}" for o in unknown))
        given = {"profile": opt("kvc_profile"), "ops": ops,
                 "backends": list(dict.fromkeys(opt("kvc_backend"))) or None,   # a repeated spec runs once
                 "seed": _seed(config), "timeout": opt("kvc_timeout"),
                 "expectations": [str(Path(p).resolve()) for p in opt("kvc_expectations")] or None,
                 "run_unclaimed": opt("kvc_run_unclaimed"), "max_crashes": opt("kvc_max_crashes")}
        if self.resume and self.out is not None and outdir.read_run(self.out) is not None:
            try:
                given = outdir.resumed_options(self.out, given, config.getoption("kvc_shard"))
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
            outdir.refuse_foreign(self.out, "--kvc-out")
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
                    "ops": self.ops, "run_id": _run_identity(self.config, self)}
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
                                    finite_json.dumps(dict(loaded.description, spec=loaded.spec), indent=2, default=str)
                                    + "\n")
            except OSError as exc:   # a full disk: the run stops after this test
                interrupt.STOP.write_error = interrupt.STOP.write_error or (
                    f"cannot write {self.out}/backends: {exc.strerror or exc}")
                _stop_session(_CONFIG.get("session"), interrupt.STOP.write_error)

    def _canaries(self, loaded: loading.Loaded) -> None:
        """A backend in the Triton interpreter or Pallas interpret mode: the platform's canaries
        (engine/canaries.py) in its description, where the diagnosis, the reports and run.json find them."""
        if not loaded.description.get("available") or "canaries" in loaded.description:
            return
        cache = None
        if self.out is not None:
            cache = self.out / "canaries"
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
        return {"selected": self.selected, "suite_ops": self.suite_ops, "whole": self.shard is None, "extra": list(extra)}

    def close(self):
        for loaded in self.loaded.values():
            loaded.stop()
            if getattr(loaded.worker, "crash_output", None) is not None:
                loaded.worker.crash_output.discard()
        if self.out is not None and self.controller:
            interrupt.restore()
            outdir.unlock(self.out)


def _run_identity(config, state) -> str:
    """The identity of a run, the same for each of its shards wherever they run (the options that decide
    which tests run and how; no paths): `report merge` tells a missing or foreign shard by it."""
    import hashlib

    from kvconform.version import SPEC_VERSION, __version__
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
