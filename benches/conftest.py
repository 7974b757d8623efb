"""Benchmarks reuse the test suite's real servers (tests/ is on the pytest pythonpath)."""

from server_fixtures import *  # noqa: F403
