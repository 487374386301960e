"""Strategies and comparison contract for the recurrent-state store op `recurrent_store_step`
(spec/recurrent.md RS-21 … RS-27, section 3 "The store as a backend op").

Registered in `strategies/recurrent.py` (VARIANTS, STRATEGIES, CHECKS), where the engine looks up an op of
the recurrent family. One column, `base`: every command is drawn. Claims: both pools draw their dtype from
the op's `kv_dtypes` (float32/float64, RS-6), independently; a case's `dtype` param names the conv pool's,
`kv_dtype` the SSM pool's.

A case is a state reached from an empty store by a short history of valid commands run through the
reference (as the page-table manager's cases, strategies/metadata.py), then one more valid command. Pools
are small (2 … 4 slots; a conv row [C, W-1] with C <= 2, W-1 <= 3; an SSM row [D, N] or [H, P, N] with
dimensions <= 2) and there may be more sequence ids (up to 6) than slots, so allocations can run out.
Rows hold random finite bit patterns; rows written by restore/rollback are drawn the same way.

Reach (recurrent_reach.py): the `long` column's tier `rows` ends with one assignment of hundreds of
sequences (fresh ones, kept ones and copies on write) over a pool of hundreds of slots; tier `state`
draws rows of real sizes (a conv row of 257+ channels, an SSM row of N past 128). The `range` column's rows
(and the rows a restore or rollback writes) hold the edges of the pool format: +-0.0, subnormals, the
largest finite, +-inf, NaN payloads: a row moved through arithmetic instead of as bits changes some.

Don't-care locations (poison regions): `free_rows`, the rows of slots no sequence refers to (stale data,
RS-24; a fresh sequence's row is *set* to zeros, RS-5/RS-22, so NaN there must never surface), and for a
rollback `unused_snapshots`, the snapshots other than the one it restores (RS-26). Comparison (class E):
the metadata, state_indices, has_initial_state and checkpoints exactly; the pools bit for bit on the rows
of slots some sequence refers to after the step, rows of free slots being unspecified (section 4).
"""
from __future__ import annotations

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from kvconform import reference
from kvconform.backends.base import OpClaims
from kvconform.conformance.engine import tolerance
from kvconform.conformance.engine.case import Case, PoisonRegion
from kvconform.reference import dtypes
from kvconform.reference.recurrent import StoreError

from ..values import floats, pick, sampled_from, seeds
from . import reach
from .common import POOL_DTYPES, Variant

OP = "recurrent_store_step"
STORE_CLAUSES = ("RS-21", "RS-22", "RS-23", "RS-24", "RS-25", "RS-26")
STORE_VARIANTS = (Variant("base", (), STORE_CLAUSES),
                  Variant("long", (), ("RS-22", "RS-42"), reach="long"),
                  Variant("range", (), ("RS-22", "RS-25", "RS-26", "RS-43", "NU-R5"), reach="range"))
MAX_SEQS = 6
#: the arguments each command reads (besides the state); the case holds only these
COMMAND_ARGS = {"assign": ("seq_ids", "num_tokens"), "copy": ("src", "dst"), "remove": ("seq",),
                "keep": ("seq",), "checkpoint": ("seq",), "restore": ("seq", "saved_pos", "saved_conv", "saved_ssm"),
                "rollback": ("seq", "num_tokens", "snapshots_conv", "snapshots_ssm")}
STATE = ("seq_slot", "seq_pos", "conv_pool", "ssm_pool")


def pool_dtypes(draw, claims: OpClaims) -> tuple[str, str]:
    """(conv pool dtype, SSM pool dtype), each a claimed pool dtype (RS-6)."""
    options = [d for d in POOL_DTYPES if d in claims.kv_dtypes]
    return pick(draw, options, "pool dtype"), pick(draw, options, "pool dtype")


def _values(rng, shape, dtype: str, special: bool) -> np.ndarray:
    """Row values: random finite bit patterns, or the edges of the format (the range column)."""
    return reach.special_values(rng, shape, dtype) if special else floats(rng, shape, dtype)


@st.composite
def empty_state(draw, claims: OpClaims, *, tier: str = "", special: bool = False) -> dict:
    """An empty store (RS-21) over pools of random finite rows (stale data: every row is free); the `state`
    tier's rows are of real sizes, `special` rows hold the edges of the format."""
    conv_dtype, ssm_dtype = pool_dtypes(draw, claims)
    num_slots = draw(st.integers(2, 4))
    max_seqs = draw(st.integers(1, MAX_SEQS))
    if tier == "state":
        conv_row = (draw(sampled_from(reach.CONV_CHANNELS)), 3)                           # [C, W-1]
        ssm_row = (draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(sampled_from(reach.STATE_SIZES)))
    else:
        conv_row = (draw(st.integers(1, 2)), draw(st.integers(1, 3)))                 # [C, W-1]
        ssm_row = tuple(draw(st.lists(st.integers(1, 2), min_size=2, max_size=3)))    # [D, N] | [H, P, N]
    rng = np.random.default_rng(draw(seeds))
    meta = reference.new_store(max_seqs)
    return dict(seq_slot=meta.seq_slot, seq_pos=meta.seq_pos,
                conv_pool=_values(rng, (num_slots,) + conv_row, conv_dtype, special),
                ssm_pool=_values(rng, (num_slots,) + ssm_row, ssm_dtype, special))


def live_seqs(state: dict) -> list[int]:
    return [int(s) for s in np.flatnonzero(np.asarray(state["seq_slot"]) >= 0)]


def free_slots(state: dict) -> np.ndarray:
    """bool[num_slots]: slots no sequence refers to."""
    free = np.ones(np.shape(state["conv_pool"])[0], bool)
    slots = np.asarray(state["seq_slot"])
    free[slots[slots >= 0]] = False
    return free


def _rows(rng, state: dict, count: int | None, special: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Random rows for both pools: one row each, or [count, *row]."""
    lead = () if count is None else (count,)
    return tuple(_values(rng, lead + np.shape(state[p])[1:], dtypes.dtype_name(np.asarray(state[p]).dtype), special)
                 for p in ("conv_pool", "ssm_pool"))


@st.composite
def commands(draw, state: dict, only: str | None = None, special: bool = False) -> dict:
    """One well-formed command for `state` (of kind `only` when given) as keywords of recurrent_store_step;
    it may still be refused (no free slot, RS-22/RS-25), which `step` reports as None."""
    max_seqs = np.shape(state["seq_slot"])[0]
    live = live_seqs(state)
    pos = np.asarray(state["seq_pos"])
    seq_ids = st.integers(0, max_seqs - 1)
    # weighted towards assignments and copies: they build the shared slots copy on write is about
    options = ["assign", "assign"] + (["copy", "copy", "assign", "checkpoint", "restore", "rollback", "rollback",
                                       "remove", "keep"] if live else ["restore"])
    if only is not None:
        assume(only in options)
        options = [only]
    command = draw(sampled_from(options))
    if command == "assign":
        ids = draw(st.lists(seq_ids, min_size=1, max_size=min(3, max_seqs), unique=True))
        if draw(st.booleans()):
            tokens = draw(st.integers(0, 3))
        else:
            tokens = np.array([draw(st.integers(0, 3)) for _ in ids], np.int32)
        return dict(command="assign", seq_ids=np.array(ids, np.int32), num_tokens=tokens)
    if command == "copy":
        return dict(command="copy", src=draw(sampled_from(live)), dst=draw(seq_ids))
    if command in ("remove", "keep"):
        return dict(command=command, seq=draw(sampled_from(live) if draw(st.booleans()) else seq_ids))
    if command == "checkpoint":
        return dict(command="checkpoint", seq=draw(sampled_from(live)))
    rng = np.random.default_rng(draw(seeds))
    if command == "restore":
        conv, ssm = _rows(rng, state, None, special)
        return dict(command="restore", seq=draw(seq_ids), saved_pos=draw(st.integers(0, 6)), saved_conv=conv,
                    saved_ssm=ssm)
    seq = draw(sampled_from(live))
    r = draw(st.integers(0, int(pos[seq])).map(lambda v: min(v, 3)))
    conv, ssm = _rows(rng, state, r + draw(st.integers(1, 2)), special)
    return dict(command="rollback", seq=seq, num_tokens=r, snapshots_conv=conv, snapshots_ssm=ssm)


def step(state: dict, cmd: dict):
    """The reference step, or None where the store refuses it (StoreError, RS-27: never drawn as valid)."""
    try:
        return reference.recurrent_store_step(**state, **cmd)
    except StoreError:
        return None


def state_of(out) -> dict:
    """The state keywords of the next step from a StoreStep."""
    return {k: np.asarray(getattr(out, k)) for k in STATE}


def step_case(state: dict, cmd: dict, **params) -> Case:
    """The case of one step, its don't-care locations declared (module docstring)."""
    free = free_slots(state)
    poison = [PoisonRegion("free_rows", p, free, "RS-24", "rows of slots no sequence refers to (stale data)")
              for p in ("conv_pool", "ssm_pool")]
    if cmd["command"] == "rollback":
        unused = np.arange(np.shape(cmd["snapshots_conv"])[0]) != cmd["num_tokens"]
        poison += [PoisonRegion("unused_snapshots", s, unused, "RS-26", "snapshots other than the restored one")
                   for s in ("snapshots_conv", "snapshots_ssm")]
    summary = {k: (v.tolist() if isinstance(v, np.ndarray) and v.dtype.kind in "iub" else v)
               for k, v in cmd.items() if not (isinstance(v, np.ndarray) and v.dtype.kind == "f")}
    return Case(OP, dict(state, **cmd),
                dict(dtype=dtypes.dtype_name(state["conv_pool"].dtype),
                     kv_dtype=dtypes.dtype_name(state["ssm_pool"].dtype),
                     num_slots=int(np.shape(state["conv_pool"])[0]), num_seqs=len(live_seqs(state)),
                     tokens=int(np.asarray(state["seq_pos"]).sum()), **summary, **params),
                poison=tuple(poison))


@st.composite
def history(draw, claims: OpClaims, *, max_steps: int = 6, tier: str = "", special: bool = False) -> dict:
    """A state reached from an empty store by up to `max_steps` valid reference steps."""
    state = draw(empty_state(claims, tier=tier, special=special))
    for _ in range(draw(st.integers(0, max_steps))):
        out = step(state, draw(commands(state, special=special)))
        if out is not None:
            state = state_of(out)
    return state


@st.composite
def many_sequences_case(draw, claims: OpClaims) -> Case:
    """The `rows` tier: B (hundreds) sequences in one assignment over B + 16 slots: half of them already
    hold state, two share a slot with another (copy on write), the rest are fresh (zeroed rows)."""
    conv_dtype, ssm_dtype = pool_dtypes(draw, claims)
    batch = draw(sampled_from(reach.DECODE_ROWS))
    num_slots, kept = batch + 16, batch // 2
    rng = np.random.default_rng(draw(seeds))
    meta = reference.new_store(batch + 8)
    state = dict(seq_slot=meta.seq_slot, seq_pos=meta.seq_pos,
                 conv_pool=floats(rng, (num_slots, 1, 3), conv_dtype), ssm_pool=floats(rng, (num_slots, 1, 2), ssm_dtype))
    state = state_of(step(state, dict(command="assign", seq_ids=np.arange(kept, dtype=np.int32), num_tokens=1)))
    for src, dst in ((0, kept), (1, kept + 1)):
        state = state_of(step(state, dict(command="copy", src=src, dst=dst)))
    order = np.asarray(draw(st.permutations(range(batch))), dtype=np.int32)
    cmd = dict(command="assign", seq_ids=order, num_tokens=draw(st.integers(1, 3)))
    assume(step(state, cmd) is not None)
    return step_case(state, cmd, tier="rows")


@st.composite
def store_step_cases(draw, claims: OpClaims, variant=STORE_VARIANTS[0], *, tier: str = ""):
    """A drawn history, then one valid command: any command for the `base` column, else the command the
    variant is named after (`command_variant`, used by the errors layer); the long tiers and the range
    column (module docstring)."""
    if tier == "rows":
        return draw(many_sequences_case(claims))
    special = variant.range
    state = draw(history(claims, tier=tier, special=special))
    only = variant.name if variant.name in COMMAND_ARGS else None
    if tier or special:     # the simplest draw moves whole rows bit for bit: a restore into a free slot
        only = draw(sampled_from(("restore", None)))
    cmd = draw(commands(state, only=only, special=special))
    assume(step(state, cmd) is not None)
    params = {"tier": tier} if tier else {"regime": "format_edges"} if special else {}
    return step_case(state, cmd, **params)


def command_variant(command: str) -> Variant:
    """A column of valid cases that all end with `command` (no feature: every claim of the op allows it)."""
    return Variant(command, (), STORE_CLAUSES)


# --- comparison contract (spec/numerics.md class E) -------------------------------------------------

def live_rows(expected: dict, pool: str) -> np.ndarray:
    """bool mask of `pool`'s shape: rows of slots some sequence refers to after the step."""
    shape = np.shape(expected[pool])
    live = np.zeros(shape[0], bool)
    slots = np.asarray(expected["seq_slot"])
    live[slots[slots >= 0]] = True
    return np.broadcast_to(live.reshape((-1,) + (1,) * (len(shape) - 1)), shape)


def store_checks(case: Case, expected: dict, actual: dict) -> dict:
    """Every field exact; the pools on the rows of slots in use after the step (free rows unspecified)."""
    exact = tolerance.exact("class E: store metadata and bit copies of state rows (RS-21 … RS-26)")
    checks = {name: (exact, None) for name in expected if name not in ("conv_pool", "ssm_pool")}
    checks.update({p: (exact, live_rows(expected, p)) for p in ("conv_pool", "ssm_pool")})
    return checks


VARIANTS = {OP: STORE_VARIANTS}
STRATEGIES = {OP: store_step_cases}
CHECKS = {OP: store_checks}
#: the history property redraws the pools' values (same shapes and metadata, NU-12)
HISTORY_INPUTS = {OP: ("conv_pool", "ssm_pool")}
