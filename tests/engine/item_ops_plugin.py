"""A pytest plugin for tests/engine/test_suite_modules.py: prints each collected conformance test's id and
op (`KVC-ITEM <id> <op>`), before the kvconform plugin leaves out other ops' tests (its hook wraps this)."""


def pytest_collection_modifyitems(items):
    for item in items:
        marker = item.get_closest_marker("kvconform")
        if marker is not None:
            print(f"KVC-ITEM {item.nodeid} {marker.kwargs.get('op')}")
