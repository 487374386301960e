"""A backend whose texts break naive reports (hostile backends, round two, item 5; not part of the package):
a lone surrogate, markdown emphasis, backticks, a table bar and HTML in its name and its error message."""
from kvconform.backends.numpy import NumpyBackend

#: what the name and the message carry; none of it may reach a report as markup or as an unwritable text
HOSTILE = "\ud800 *bold* _under_ `tick` | bar <b>x</b> [link](http://x)"


class BreaksText(NumpyBackend):
    name = "breaks" + HOSTILE

    def capabilities(self):
        return {"write_kv": super().capabilities()["write_kv"]}

    def write_kv(self, *args, **kw):
        raise ValueError("failed" + HOSTILE)


def make():
    return BreaksText()


