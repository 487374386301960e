"""Faulty backends for the engine's meta-tests (not part of the package): ones that crash or hang in
write_kv (worker isolation), and ones that mishandle malformed write_kv input (the errors layer)."""
import os
import time

from kvconform import reference
from kvconform.backends.numpy import NumpyBackend


class _OnlyWriteKv(NumpyBackend):
    def capabilities(self):
        return {"write_kv": super().capabilities()["write_kv"]}


class Aborts(_OnlyWriteKv):
    name = "aborts"

    def write_kv(self, *args, **kw):
        os.abort()


class Hangs(_OnlyWriteKv):
    name = "hangs"

    def write_kv(self, *args, **kw):
        time.sleep(600)


def make_aborts():
    return Aborts()


def make_hangs():
    return Hangs()


# --- backends that mishandle malformed input (errors layer, conformance/rejection.py) --------------

class KernelArgumentError(ValueError):
    """A backend's own error class: a ValueError subclass, which the errors layer accepts."""


class _MalformedWriteKv(_OnlyWriteKv):
    """write_kv through the reference; `on_reject` decides what becomes of a precondition error."""

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **kw):
        try:
            return reference.write_kv(k_pages, v_pages, k, v, slot_mapping, **kw)
        except (ValueError, TypeError) as exc:
            return self.on_reject(exc, k_pages, v_pages)


class AcceptsInvalid(_MalformedWriteKv):
    """Skips validation: returns the pools unchanged (a silent answer to a malformed call)."""
    name = "accepts-invalid"

    def on_reject(self, exc, k_pages, v_pages):
        from kvconform.reference.kv_write import KVPages
        return KVPages(k_pages.copy(), v_pages.copy())


class VagueErrors(_MalformedWriteKv):
    """Rejects, in the right family, with a message that names no argument."""
    name = "vague-errors"

    def on_reject(self, exc, k_pages, v_pages):
        raise type(exc)("invalid input") from None


class WrongFamily(_MalformedWriteKv):
    """Rejects naming the argument, but swaps ValueError and TypeError."""
    name = "wrong-family"

    def on_reject(self, exc, k_pages, v_pages):
        raise (ValueError if isinstance(exc, TypeError) else TypeError)(str(exc)) from None


class OwnErrorClass(_MalformedWriteKv):
    """Rejects with its own ValueError subclass (TypeErrors unchanged): conforms."""
    name = "own-error-class"

    def on_reject(self, exc, k_pages, v_pages):
        if isinstance(exc, TypeError):
            raise exc
        raise KernelArgumentError(str(exc)) from None


def make_accepts_invalid():
    return AcceptsInvalid()


def make_vague_errors():
    return VagueErrors()


def make_wrong_family():
    return WrongFamily()


def make_own_error_class():
    return OwnErrorClass()


class MisspelledFeature(_OnlyWriteKv):
    """Claims a feature name with a typo: the run must fail naming the close match, never turn the column
    `unsupported` with exit 0."""
    name = "misspelled"

    def capabilities(self):
        claims = super().capabilities()["write_kv"]
        import dataclasses
        return {"write_kv": dataclasses.replace(claims, features=("quantised_kv",))}


def make_misspelled():
    return MisspelledFeature()


class BrokenCapabilities(_OnlyWriteKv):
    """capabilities() raises: the run must fail ("claims cannot be read"), never pass as unsupported."""
    name = "broken-claims"

    def capabilities(self):
        raise RuntimeError("driver not initialised")


class ClaimsNothingUsable(_OnlyWriteKv):
    """Claims write_kv but no dtype: every test is unsupported, so nothing numerical is checked."""
    name = "claims-nothing"

    def capabilities(self):
        import dataclasses
        claims = super().capabilities()["write_kv"]
        return {"write_kv": dataclasses.replace(claims, dtypes=(), kv_dtypes=())}


def make_broken_capabilities():
    return BrokenCapabilities()


def make_claims_nothing():
    return ClaimsNothingUsable()


class Twin(_OnlyWriteKv):
    """Two builds of one library: the same `name`, another version. A run with both must keep them apart."""
    name = "twin"


def make_twin_a():
    twin = Twin()
    twin.version = "1.0"
    return twin


def make_twin_b():
    twin = Twin()
    twin.version = "2.0"
    return twin


class MarkupInText(_OnlyWriteKv):
    """Backend-supplied text with HTML and Markdown in it (its name, its exception messages): the reports
    must show it as text, never let `<!--` hide the rest of a step summary or `|` split a table cell."""
    name = "markup<b>name</b>|pipe"

    def write_kv(self, *args, **kw):
        # all on the first line: a group of failures in report.md quotes only its message's first line
        raise RuntimeError("kernel failed <!-- the rest is hidden <script>alert(1)</script> | a & b\nsecond line")


def make_markup_in_text():
    return MarkupInText()


class RaisesNested(_OnlyWriteKv):
    """Raises from a function two calls below its op: the reports must show that site and the error."""
    name = "raises-nested"

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **kw):
        return _launch(slot_mapping.shape[0])


def _launch(n_tokens):
    return _check_grid(n_tokens)


def _check_grid(n_tokens):
    raise RuntimeError(f"grid of {n_tokens} tokens exceeds the launch limit")


class RaisesRemoteTraceback(_OnlyWriteKv):
    """Re-raises an error of its own subprocess with that process's traceback as the message (which starts
    at multiprocessing's `spawn_main`): the reports must show the message's last line, the real error."""
    name = "raises-remote"

    def write_kv(self, *args, **kw):
        raise RuntimeError('Traceback (most recent call last):\n'
                           '  File "/usr/lib/python3/multiprocessing/spawn.py", line 122, in spawn_main\n'
                           '    exitcode = _main(fd, parent_sentinel)\n'
                           '  File "/opt/kernels/compile.py", line 40, in build\n'
                           '    raise ValueError("tile 96 is not a power of two")\n'
                           'ValueError: tile 96 is not a power of two')


def make_raises_nested():
    return RaisesNested()


def make_raises_remote():
    return RaisesRemoteTraceback()


class ReturnsList(_OnlyWriteKv):
    """Returns write_kv's two pools as a list, not the protocol's arrays (which NumPy would stack)."""
    name = "returns-list"

    def write_kv(self, *args, **kw):
        return list(reference.write_kv(*args, **kw))


class ReturnsGenerator(_OnlyWriteKv):
    """Returns a generator of the two pools (which cannot even be pickled back from the worker)."""
    name = "returns-generator"

    def write_kv(self, *args, **kw):
        return (pool for pool in reference.write_kv(*args, **kw))


def make_returns_list():
    return ReturnsList()


def make_returns_generator():
    return ReturnsGenerator()


# --- backends that cannot be checked: loading and claims (issue 26, the exit code's NOT CHECKED) ------

def make_factory_raises():
    raise RuntimeError("no device found")


def make_factory_hangs():
    time.sleep(600)


class AvailabilityRaises(_OnlyWriteKv):
    name = "availability-raises"

    def availability(self):
        raise RuntimeError("driver not initialised")


def make_availability_raises():
    return AvailabilityRaises()


class NameNotText(_OnlyWriteKv):
    name = 12345


def make_name_not_text():
    return NameNotText()


class BadClaims(NumpyBackend):
    """One claims mistake of each kind: every one must be named at load time (check-backend and run alike),
    never become an engine error charged to the kernel, nor a quiet `unsupported`."""
    name = "bad-claims"

    def capabilities(self):
        import dataclasses
        claims = super().capabilities()
        return {
            "ragged_paged_atention": claims["ragged_paged_attention"],                      # misspelled op
            "write_kv": dataclasses.replace(claims["write_kv"], dtypes=("fp32",),             # dtype name
                                            features=("quantised_kv",),                       # feature name
                                            page_sizes=(-3, 0),                               # page sizes
                                            limits={"page_size": "sixteen",                   # limit value
                                                    "num_kv_heads": {"value": [1]},           # constraint key
                                                    "max_pages": {"values": 1},               # values type
                                                    "max_kvlen": 8}),                         # limit name
            "rotate_keys": dataclasses.replace(claims["rotate_keys"], layouts=("interleave",)),   # layout
        }


def make_bad_claims():
    return BadClaims()


class ReturnsNone(_OnlyWriteKv):
    name = "returns-none"

    def write_kv(self, *args, **kw):
        return None


def make_returns_none():
    return ReturnsNone()


class ReturnsThreeFields(_OnlyWriteKv):
    """A plain tuple of three arrays where the reference returns two fields."""
    name = "returns-three"

    def write_kv(self, *args, **kw):
        pools = reference.write_kv(*args, **kw)
        return (pools.k_pages, pools.v_pages, pools.v_pages.copy())


def make_returns_three_fields():
    return ReturnsThreeFields()


# --- a slow, wrong backend (the shrink budget, profiles.ShrinkBudget) ------------------------------

class SlowAndWrong(_OnlyWriteKv):
    """Every call takes 0.1 s; with 3 rows or more it writes k one too high: shrinking a failure down to
    3 rows calls it dozens of times."""
    name = "slow-and-wrong"

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **kw):
        time.sleep(0.1)
        wrong = k + 1 if len(k) >= 3 else k
        return getattr(NumpyBackend(), "write_kv")(k_pages, v_pages, wrong, v, slot_mapping, **kw)


def make_slow_and_wrong():
    return SlowAndWrong()


# --- a backend that crashes on padding rows (a crash's diagnosis, issue 31) -----------------------

class CrashesOnPaddingRows(NumpyBackend):
    """causal_conv1d_update that dies on a padding row (state index -1, RS-3), as a kernel indexing the
    pool with it would; right otherwise."""
    name = "crashes-on-padding"

    def capabilities(self):
        return {"causal_conv1d_update": super().capabilities()["causal_conv1d_update"]}

    def causal_conv1d_update(self, x, conv_state, weight, bias=None, *, state_indices=None, **kw):
        if state_indices is not None and (state_indices == -1).any():
            os.abort()
        return getattr(NumpyBackend(), "causal_conv1d_update")(x, conv_state, weight, bias,
                                                               state_indices=state_indices, **kw)


def make_crashes_on_padding():
    return CrashesOnPaddingRows()
