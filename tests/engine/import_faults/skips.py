"""Skips itself at module level, as a test module would: pytest.importorskip of a missing dependency."""
import pytest

pytest.importorskip("kvconform_no_such_dependency")

from ._factory import make  # noqa: E402,F401  (never reached)
