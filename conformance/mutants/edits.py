"""Edits of an op's result or claims that several mutants share (a bug is one of these applied to the
reference's result)."""
from __future__ import annotations

import dataclasses


def replace_out(result, fn):
    if isinstance(result, tuple):
        return type(result)(fn(result[0]), *result[1:])
    return fn(result)


def filled(result, indices, value):
    """`result` with its output (a tuple result's first field) set to `value` at each index of `indices`:
    the rows, heads or dims a mutant poisons (NaN) or never writes (0)."""
    def fill(out):
        out = out.copy()
        for index in indices:
            out[index] = value
        return out
    return replace_out(result, fill)


def narrowed(op: str, dtypes_: tuple, kv_dtypes: tuple, features: tuple = ()):
    """A capabilities() claiming only `dtypes_` x `kv_dtypes` and `features` for `op` (the rest as the
    numpy backend): the columns the mutant cannot be caught by are skipped as unsupported."""
    def capabilities(self):
        claims = super(type(self), self).capabilities()
        claims[op] = dataclasses.replace(claims[op], dtypes=dtypes_, kv_dtypes=kv_dtypes, features=features,
                                         layouts=())
        return claims
    return capabilities
