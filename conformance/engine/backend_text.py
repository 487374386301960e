"""Text a backend controls (exception messages, tracebacks, what it prints, its name): bounded in size and
with its control characters made visible, before the engine stores or shows it.

A record keeps at most a few kilobytes of each text (`cap`: the head and the tail, with how much was cut
in between and where the whole text is); a failure's whole texts go to one file in its reproducer
directory (artifacts.py, `failure.txt`). So a 5 MB exception message or a backend printing a megabyte
per call cannot blow up results.jsonl, the reports or the CLI output.

`visible` writes control characters (ESC, NUL, DEL, C1, bidirectional overrides) as escapes (`\\x1b`),
so a backend's text cannot move a terminal's cursor, hide part of a report or break XML; newlines and
tabs stay.
"""
from __future__ import annotations

import re

#: characters of a record's message (what report.md/html and JUnit show first)
MESSAGE_CAP = 4000
#: characters of a backend traceback kept in the record (its innermost frames are at the end)
TRACEBACK_CAP = 8000
#: characters of a backend's captured output kept in the record
OUTPUT_CAP = 4000
#: bytes of one text kept in a failure's whole-text file (failure.txt): bounded too, far above any cap
FULL_TEXT_CAP = 64 * 1024 * 1024

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def visible(text) -> str:
    """`text` with every control character but newline and tab written as an escape: `\\x1b`, `\\x00`,
    `\\r`, `\\u202e` (a right-to-left override)."""
    return _CONTROL.sub(_escape, str(text))


def _escape(match: re.Match) -> str:
    char = match.group()
    if char == "\r":
        return "\\r"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def cap(text: str, limit: int, whole: str = "") -> str:
    """`text` if it has at most `limit` characters, else its first quarter and last three quarters of
    `limit` with a line between them saying how many characters were cut and where the whole text is
    (`whole`, e.g. "repro/<id>/failure.txt"). The tail gets more: a traceback's innermost frames and the
    last lines a backend printed before failing are at the end."""
    if len(text) <= limit:
        return text
    head, tail = limit // 4, limit - limit // 4
    cut = len(text) - head - tail
    where = f"; the whole text: {whole}" if whole else ""
    return f"{text[:head]}\n[... {cut:,} characters cut{where} ...]\n{text[-tail:]}"


def was_cut(text: str, limit: int) -> bool:
    return len(text) > limit
