"""The conformance suite's tests, one module per spec file (a regular package, so that a backend author's
own pytest can collect it: `pytest --pyargs kvconform.conformance.suite --kvc-backend SPEC`)."""
