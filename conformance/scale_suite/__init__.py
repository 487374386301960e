"""The `scale` profile's tests (conformance/scale.py, spec/numerics.md NU-13): `kvconform run --profile scale`
natively on a GPU, `--profile scale-smoke` anywhere (a regular package, like kvconform.conformance.suite)."""
