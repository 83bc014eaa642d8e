"""Fixtures shared by tests/ and e2e/, registered once so that a whole run starts one control plane."""

pytest_plugins = ["tests.cluster_fixtures", "tests.operator_fixtures", "tests.image_fixtures"]
