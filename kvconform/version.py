"""The package's and the spec's versions (a leaf module: every layer may read it)."""
__version__ = "0.1.0"
SPEC_VERSION = "0.1"
