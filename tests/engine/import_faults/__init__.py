"""Backend modules that misbehave while they are imported (issue 26): each must become one line and exit 3
(NOT CHECKED) in `kvconform run`, `check-backend`, `list` and the plugin route, never a silent 0, a dead or
hanging CLI, or a traceback. Not part of the package: tests/engine is on the CLI's PYTHONPATH."""
