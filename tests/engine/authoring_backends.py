"""Backends with the mistakes a new backend author makes, for `kvconform check-backend`
(tests/engine/test_check_backend.py): a misspelled feature, a claimed op without a method, a method
that cannot take the suite's arguments, and one whose op returns wrong values."""
import dataclasses

from kvconform import reference
from kvconform.backends.base import Backend, OpClaims
from kvconform.backends.numpy import NumpyBackend


class _WriteKvOnly(NumpyBackend):
    def capabilities(self):
        return {"write_kv": super().capabilities()["write_kv"]}


class MisspelledFeature(NumpyBackend):
    name = "misspelled-feature"

    def capabilities(self):
        claims = super().capabilities()["ragged_paged_attention"]
        return {"ragged_paged_attention": dataclasses.replace(claims, features=("slidng_window",))}


class NoMethod(Backend):
    """Claims rotate_keys but has no method for it."""
    name = "no-method"

    def capabilities(self):
        return {"rotate_keys": OpClaims(dtypes=("float32",), kv_dtypes=("float32",))}


class WrongSignature(_WriteKvOnly):
    name = "wrong-signature"

    def write_kv(self, k_pages, v_pages, k, v, slots, *, k_scale=None, v_scale=None):   # slots, not slot_mapping
        return reference.write_kv(k_pages, v_pages, k, v, slots, k_scale=k_scale, v_scale=v_scale)


class WrongValues(_WriteKvOnly):
    name = "wrong-values"

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, **kw):
        return reference.write_kv(k_pages, v_pages, -k, v, slot_mapping, **kw)
