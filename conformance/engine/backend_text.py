"""Text a backend controls (exception messages, tracebacks, what it prints, its name): bounded in size and
with its control characters made visible, before the engine stores or shows it.

A record keeps at most a few kilobytes of each text (`cap`: the head and the tail, with how much was cut
in between and where the whole text is); a failure's kept texts go to one file in its reproducer
directory (artifacts.py, `failure.txt`). What is kept of a text at all is bounded too (`kept`, KEPT_CAP):
a longer exception message or traceback is cut in the backend's worker, before it crosses to the run,
with a line giving its length. So a 5 MB exception message or a backend printing a megabyte per call
costs neither time nor disk in proportion: results.jsonl, the reports, the CLI output and repro/ stay
the same size.

`visible` writes control characters (ESC, NUL, DEL, C1, bidirectional overrides) as escapes (`\\x1b`),
so a backend's text cannot move a terminal's cursor, hide part of a report or break XML; newlines and
tabs stay. Lone surrogates (`\\ud800`, which a Python str may hold but no UTF-8 file or XML document can)
are written as escapes too, so such a name or message cannot leave a report unwritten.
"""
from __future__ import annotations

import re

#: characters of a record's message (what report.md/html and JUnit show first)
MESSAGE_CAP = 4000
#: characters of a backend traceback kept in the record (its innermost frames are at the end)
TRACEBACK_CAP = 8000
#: characters of a backend's captured output kept in the record
OUTPUT_CAP = 4000
#: characters (bytes, for what a backend printed) of one text of a failure kept at all, in failure.txt:
#: its message, its traceback, its output (conformance/README.md "Records")
KEPT_CAP = 64 * 1024

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                      "\ud800-\udfff]")


def visible(text) -> str:
    """`text` with every control character but newline and tab written as an escape: `\\x1b`, `\\x00`,
    `\\r`, `\\u202e` (a right-to-left override), `\\ud800` (a lone surrogate)."""
    return _CONTROL.sub(_escape, str(text))


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """`text` with its lone surrogates written as escapes (`\\ud800`) and nothing else changed: what a text
    from a backend becomes as it leaves the backend's worker (protocol.plain_text)."""
    return _SURROGATE.sub(_escape, text)


def _escape(match: re.Match) -> str:
    char = match.group()
    if char == "\r":
        return "\\r"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def cap(text: str, limit: int, whole: str = "", *, total: bool = False) -> str:
    """`text` if it has at most `limit` characters, else its first quarter and last three quarters of
    `limit` with a line between them saying how many characters were cut (`total`: of how many) and where
    the whole text is (`whole`, e.g. "repro/<id>/failure.txt"). The tail gets more: a traceback's innermost
    frames and the last lines a backend printed before failing are at the end."""
    if len(text) <= limit:
        return text
    head, tail = limit // 4, limit - limit // 4
    cut = len(text) - head - tail
    where = f"; the whole text: {whole}" if whole else ""
    of = f" of its {len(text):,}" if total else ""
    return f"{text[:head]}\n[... {cut:,}{of} characters cut{where} ...]\n{text[-tail:]}"


def kept(text: str, limit: int = KEPT_CAP) -> str:
    """What kvconform keeps of a text from a backend at all: `text` up to `limit` (KEPT_CAP) characters,
    else its head and tail with a line giving how many of its characters were cut (in the worker, before
    the text is sent: its cost must not grow with it)."""
    return cap(text, limit, f"not kept (kvconform keeps {KEPT_CAP:,} characters of each text of a failure)",
               total=True)


def was_cut(text: str, limit: int) -> bool:
    return len(text) > limit
