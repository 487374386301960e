"""The `kvconform` command: one module per command (run.py, listing.py, check_backend.py, coverage.py,
replay.py, report.py), the parser and dispatch in parser.py, shared arguments in arguments.py. The top layer
of kvconform.conformance: it may import every layer below, and a command's module is imported only when
that command runs.
"""
from kvconform.conformance.cli.parser import main

__all__ = ["main"]
