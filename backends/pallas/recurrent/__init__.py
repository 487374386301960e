"""Pallas kernels of the recurrent family (spec/recurrent.md); one module per kernel."""
