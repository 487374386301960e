"""The engine: a case, a backend called in a worker, its output compared with the reference's.

Cases (case.py), the protocol conversions of inputs and outputs (protocol.py, strided.py), the backend's
worker process (worker.py, loading.py, signatures.py), comparison and tolerances (compare.py, tolerance.py),
rejection of malformed input (rejection.py), replays of a counterexample (flaky.py), reproducers
(artifacts.py), bounded backend text (backend_text.py), per-test timing (timing.py) and the vocabulary of
result records (records.py). The lowest layer of kvconform.conformance: it imports nothing above it.
"""
