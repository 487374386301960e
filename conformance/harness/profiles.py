"""Run profiles: Hypothesis settings plus the engine's own knobs (per-call timeout, targeting).

| profile  | examples/test | derandomize | database          | shrink budget | use                         |
|----------|---------------|-------------|-------------------|---------------|-----------------------------|
| quick    | 8             | no          | none              | 30 s          | local runs, `kvconform run` default |
| ci       | 25            | yes         | none              | 60 s          | the CI gate: same cases every run |
| thorough | 250           | no          | <out>/hypothesis-db (shared) | 300 s | long runs; `target(error / allowed)` |
| repro    | 1             | yes         | none              | no shrinking  | re-run one example, verbose |
| scale    | 1 (fixed cases) | yes       | none              | no shrinking  | GPU limits: `scale_suite/`, native backends only |
| scale-smoke | 1 (fixed cases) | yes    | none              | no shrinking  | the scale tests at small sizes, anywhere |
| models   | 1 (fixed cases) | yes       | none              | no shrinking  | real models' shapes and batches: `models_suite/` |

`scale` runs `conformance/scale_suite/` (not the regular suite): pools past 2**31 elements, 128k-token
sequences, 256-row decode batches, more than 65535 rows (conformance/scale.py; judged by sampling,
spec/numerics.md NU-13). It needs a backend that runs natively on an accelerator (`Availability.native`):
elsewhere `kvconform run` refuses with one line and exit status 2, because a CI job that asked for the
GPU limits and silently checked nothing would be green for nothing. `scale-smoke` runs the same tests at
small sizes on any backend, to check the machinery (it proves nothing about the limits).

`models` runs `conformance/models_suite/` (not the regular suite): one call per model case of
conformance/models.py (Llama-3.1, Qwen3, Mistral, Gemma-2, gpt-oss, DeepSeek-V3 MLA, Qwen3-Next, Mamba-2,
RWKV-6 at their real head counts, dims and state sizes, in mixed decode / prefill batches), on any
backend; `kvconform list --profile models` prints the table. It is not part of the CI gate (minutes on
the numpy backend, docs/performance.md).

No profile has a deadline: the first call of a JIT backend compiles (seconds), which a deadline would
report as a flaky failure; hangs are caught by the worker timeout instead. A test may scale its example
count with a `budget` factor (a state machine step costs more than a differential example).

**Shrink budget.** Shrinking a failure calls the backend once per attempt, hundreds of times: against a
slow backend it took 320 s for one test and 17 minutes for one run (issue 31). `shrink_seconds` caps the
shrinking of each test (every failure Hypothesis shrinks in it, together); once it is spent, the smallest
failing example found so far is the counterexample, replayed and diagnosed as usual, and the failure
message says `shrinking stopped at its 60 s budget`. `--kvc-shrink-seconds S` (or `kvconform run ... --
--kvc-shrink-seconds S`) overrides it for one invocation. The mechanism (`ShrinkBudget`): Hypothesis
6.170 has no shrink-time setting, but its engine stops shrinking once `engine.MAX_SHRINKING_SECONDS`
(300 s by default, documented there as monkeypatchable) have passed since shrinking began
(hypothesis/internal/conjecture/engine.py:95, deadline set at :1697, checked after every test call at
:767-781) and then reports its best failing example, exactly as when shrinking ends normally. The
budget sets that module constant around each test's run (one test at a time per process), swallows the
warning Hypothesis prints then (it says "five minutes"), and learns that the budget ran out from the
engine's statistics (`stopped-because`, through `hypothesis.statistics.collector`). The deadline is
checked after each call, so one slow call can overrun it by its own length; the final replay, the
diagnosis and the flaky replays come after it.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Profile:
    name: str
    max_examples: int
    derandomize: bool
    use_database: bool
    target: bool
    call_timeout: float
    verbose: bool = False
    shrink: bool = True
    suite: str = "suite"          # the test package under conformance/ that the profile runs
    native_only: bool = False     # refuse backends that do not run natively on an accelerator
    ops: tuple[str, ...] = ()     # the ops its suite checks (the NOT CHECKED gate); () = every op
    shrink_seconds: float = 60.0  # shrinking budget of one test (see "Shrink budget" above)


#: the folder of kvconform.conformance that holds the suites (suite/, models_suite/, scale_suite/)
CONFORMANCE_DIR = Path(__file__).resolve().parent.parent


def suite_dir(name: str = "suite") -> Path:
    """The folder of the suite package `name` (a profile's `suite`)."""
    return CONFORMANCE_DIR / name


#: the ops conformance/scale_suite/ checks
SCALE_OPS = ("write_kv", "ragged_paged_attention", "selective_state_update", "causal_conv1d_update",
             "gated_delta_rule_update", "mla_paged_attention")

#: the ops conformance/models_suite/ checks (conformance/models.py OPS; a literal here, so that reading the
#: profiles imports no Hypothesis before pytest starts)
MODELS_OPS = ("ragged_paged_attention", "write_kv", "mla_paged_attention", "gated_delta_rule_update",
              "gated_delta_rule_chunked", "causal_conv1d_update", "selective_state_update", "ssd_chunked_scan",
              "rwkv6_wkv")

PROFILES = {
    "quick": Profile("quick", 8, derandomize=False, use_database=False, target=False, call_timeout=120.0,
                     shrink_seconds=30.0),
    "ci": Profile("ci", 25, derandomize=True, use_database=False, target=False, call_timeout=300.0,
                  shrink_seconds=60.0),
    "thorough": Profile("thorough", 250, derandomize=False, use_database=True, target=True, call_timeout=300.0,
                        shrink_seconds=300.0),
    "repro": Profile("repro", 1, derandomize=True, use_database=False, target=False, call_timeout=600.0,
                     verbose=True, shrink=False),
    "scale": Profile("scale", 1, derandomize=True, use_database=False, target=False, call_timeout=1800.0,
                     shrink=False, suite="scale_suite", native_only=True, ops=SCALE_OPS),
    "scale-smoke": Profile("scale-smoke", 1, derandomize=True, use_database=False, target=False,
                           call_timeout=600.0, shrink=False, suite="scale_suite", ops=SCALE_OPS),
    "models": Profile("models", 1, derandomize=True, use_database=False, target=False, call_timeout=600.0,
                      shrink=False, suite="models_suite", ops=MODELS_OPS),
}


def get(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}: choose one of {', '.join(PROFILES)}")
    return PROFILES[name]


#: the longest --timeout: a day. A wait far longer overflows the pipe's poll (OverflowError in every call,
#: which deadlocked a run with --timeout 1e9); a day is "no limit" for any kernel call.
MAX_TIMEOUT = 86400.0


def timeout_seconds(text: str) -> float:
    """`--timeout` / `--kvc-timeout` (argparse type): a finite number of seconds > 0, at most MAX_TIMEOUT.
    A zero or negative limit would kill every backend call at once, and the backend would be blamed with
    crashes."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0 and at most {MAX_TIMEOUT:.0f} "
                                         f"(a day), got {text!r}")
    return seconds


def hypothesis_settings(profile: Profile, *, budget: float = 1.0, out_dir: Path | None = None,
                        seed_examples: int | None = None) -> "hypothesis.settings":
    """Hypothesis settings of `profile` for one test (`budget` scales its example count).

    Hypothesis is imported here, not at module level: `kvconform run` reads the profiles before it starts
    pytest, and a hypothesis imported by then cannot be assert-rewritten by pytest, which warned so
    (PytestAssertRewriteWarning) on every run."""
    from hypothesis import HealthCheck, Phase, Verbosity, settings
    from hypothesis.database import DirectoryBasedExampleDatabase
    examples = seed_examples or max(1, round(profile.max_examples * budget))
    database = None
    if profile.use_database and out_dir is not None:
        database = DirectoryBasedExampleDatabase(str(Path(out_dir) / "hypothesis-db"))
    # No Phase.explain: after shrinking, Hypothesis would re-run the counterexample with its parts varied
    # to print which ones matter; the engine's own diagnosis (diagnosis.py) does that in the suite's
    # terms (poison regions, features, dtypes) and is what the reports show, so explain only cost time.
    phases = [p for p in Phase if p is not Phase.explain]
    if not profile.shrink:
        phases = [p for p in phases if p is not Phase.shrink]
    return settings(
        max_examples=examples,
        derandomize=profile.derandomize,
        database=database,
        deadline=None,
        print_blob=True,
        phases=phases,
        verbosity=Verbosity.verbose if profile.verbose else Verbosity.normal,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
    )


def ignore_source_constants() -> None:
    """Keep Hypothesis from drawing literals found in the source of this process's "local" modules.

    Hypothesis (6.170 here) now and then draws a constant it found in the source of every loaded module
    that lies outside site-packages and the standard library (hypothesis/internal/conjecture/providers.py,
    `_get_local_constants`, line 325 in 6.170.15): kvconform's own modules when it runs from a checkout, a conftest, a backend
    module imported in-process. The cases the ci profile draws, derandomized to be the same on every run,
    then change with any literal edited in any of those files, and differ between a checkout and an
    installed wheel (found in issue 16: one added `4096` changed what a mutant's attention test shrank to).
    Emptying the local pool leaves Hypothesis's built-in constants (fixed per Hypothesis version, which
    ci/constraints.txt pins). Process-wide, so it is called where a process starts drawing suite cases
    and before any draw: when pytest has collected conformance tests (plugin.py) and in check-backend. A
    pytest session without conformance tests (the plugin is loaded in every session of the environment)
    keeps Hypothesis as it is. Idempotent; a no-op on a Hypothesis without that pool."""
    from hypothesis.internal.conjecture import providers
    if getattr(providers, "_kvconform_no_local_constants", False) or not hasattr(providers, "_get_local_constants"):
        return
    empty = providers.Constants()
    providers._get_local_constants = lambda: empty
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if cache is not None:   # pools this thread already built with local constants in them
        cache.cache.clear()
    providers._kvconform_no_local_constants = True


class ShrinkBudget:
    """Caps Hypothesis's shrinking of one test at `seconds` (module docstring, "Shrink budget"):
    `with ShrinkBudget(60) as budget: run()`, then `budget.stopped` says whether the cap ended it.

    Sets hypothesis.internal.conjecture.engine.MAX_SHRINKING_SECONDS for the block (restored after),
    keeps Hypothesis's own warning for that case off the reporter, and reads the engine's statistics
    (`stopped-because`) through hypothesis.statistics.collector, passing them on to any outer collector."""

    #: the engine's reason when its shrink deadline passed (engine.py ExitReason.very_slow_shrinking)
    STOPPED = "shrinking was very slow"
    #: the start of the warning the engine reports then (engine.py:773)
    WARNING = "WARNING: Hypothesis has spent more than"

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.stopped = False
        self._stack = None

    def __enter__(self) -> "ShrinkBudget":
        import contextlib
        from hypothesis.internal.conjecture import engine
        from hypothesis.reporting import current_reporter, with_reporter
        from hypothesis.statistics import collector
        self._saved = engine.MAX_SHRINKING_SECONDS
        engine.MAX_SHRINKING_SECONDS = self.seconds
        outer_report, outer_collect = current_reporter(), collector.value

        def report(text) -> None:
            if not (isinstance(text, str) and text.startswith(self.WARNING)):
                outer_report(text)

        def collect(stats) -> None:
            if stats.get("stopped-because") == self.STOPPED:
                self.stopped = True
            if outer_collect is not None:
                outer_collect(stats)

        self._stack = contextlib.ExitStack()
        self._stack.enter_context(with_reporter(report))
        self._stack.enter_context(collector.with_value(collect))
        return self

    def __exit__(self, *exc) -> None:
        from hypothesis.internal.conjecture import engine
        engine.MAX_SHRINKING_SECONDS = self._saved
        self._stack.close()

    def note(self, profile_name: str) -> str:
        """The failure message's line when the budget ended shrinking."""
        return (f"shrinking stopped at its {self.seconds:g} s budget (profile {profile_name}): the smallest "
                f"counterexample found by then")

