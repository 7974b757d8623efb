"""A small run of ``benches/bench_load.py`` (SPEC §19, §20): worker processes on one PostgreSQL
and one Redis Cluster, one of them SIGKILLed mid-turn and replaced, another SIGSTOPped past its
lease while a second worker takes its conversations over, then continued, every worker behind
proxies that lose a reply now and then after the server acted; the audit must be all zeros.

Only correctness is asserted here; the speed figures belong to the benchmark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench_load import LoadConfig, format_report, run_load

pytestmark = pytest.mark.servers  # the servers come from fixtures looked up by name

SMALL = LoadConfig(
    workers=2,
    conversations=3,
    turns=3,
    model_seconds=0.02,  # long enough for the kill to find turns in flight
    tool_result_bytes=2000,
    lease_seconds=1.5,
    kill_at=0.45,
    timeout_seconds=120.0,
)


@pytest.mark.parametrize("backend", ["postgresql", "redis-cluster"])
def test_a_killed_worker_loses_and_duplicates_nothing(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    server: Any = request.getfixturevalue(
        "postgres_server" if backend == "postgresql" else "redis_cluster"
    )
    config = SMALL
    report = run_load(backend, server.url, config, tmp_path)
    summary = format_report(report)
    assert report.failed_workers == [], summary
    assert report.interrupted_turns >= 1, summary  # the kill did land in the middle of turns
    assert report.paused_turns >= 1, summary  # and so did the pause
    assert report.lost_replies >= 1, summary  # and replies were lost after the server acted
    assert report.messages_lost == 0, summary
    assert report.messages_duplicated == 0, summary
    assert report.requests_missing == 0, summary
    assert report.invalid_protocol_histories == 0, summary
    assert report.dead_leases_after_expiry == 0, summary
    assert report.running_turns_without_owner == 0, summary
    requests = config.workers * config.conversations * config.turns
    # every request is stored once, and its turn completed unless the kill interrupted it (then
    # the replacement closed it FAILED or CANCELLED; a request not stored yet is asked again)
    assert report.requests_completed + report.requests_interrupted == requests, summary
    # a request is interrupted only by a fault: the kill, the pause or a lost reply
    faults = report.interrupted_turns + report.paused_turns + report.lost_replies
    assert report.requests_interrupted <= faults, summary
    assert report.completed_turns <= report.requests_completed, summary  # acknowledged ones
