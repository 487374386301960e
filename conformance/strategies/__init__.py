"""Hypothesis strategies, one module per op family (named like the family in backends.base.OPS).

Each family module exports strategies drawing `Case`s within a backend's claims and `CHECKS`, the
comparison contract {op: checks(case, expected_fields, actual_fields) -> {field: (Tolerance, mask)}}
that `kvconform replay` uses too. `values` holds the bit-pattern and poison helpers they share.
"""
