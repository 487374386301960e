"""The `models` profile's tests (conformance/models.py): `kvconform run --profile models`, the shapes of real
models in realistic batches, on any backend (a regular package, like kvconform.conformance.suite)."""
