"""Backends whose claims ask for the impossible (hostile backends, round two, item 4; not part of the
package): a page size of 2**30 tokens, and a page-count limit whose minimum is 10**9."""
import dataclasses

from kvconform.backends.numpy import NumpyBackend


class HugePages(NumpyBackend):
    name = "huge-pages"

    def capabilities(self):
        claims = super().capabilities()["write_kv"]
        return {"write_kv": dataclasses.replace(claims, page_sizes=(2 ** 30,))}


class HugeMinimum(NumpyBackend):
    name = "huge-minimum"

    def capabilities(self):
        claims = super().capabilities()["write_kv"]
        return {"write_kv": dataclasses.replace(claims, limits={"max_pages": {"min": 10 ** 9}})}


def make_huge_pages():
    return HugePages()


def make_huge_minimum():
    return HugeMinimum()


class GiganticPages(HugePages):
    """A page of 2**40 tokens: no machine holds the drawn case, whatever budget is set."""
    name = "gigantic-pages"

    def capabilities(self):
        claims = NumpyBackend.capabilities(self)["write_kv"]
        return {"write_kv": dataclasses.replace(claims, page_sizes=(2 ** 40,))}


def make_gigantic_pages():
    return GiganticPages()
