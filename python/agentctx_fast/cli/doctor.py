"""``agentctx doctor --store URL [--repair] [CONVERSATION...]``: the CLI's driver of
`agentctx_fast.stores.doctor` (the logic is there, over the async stores; this opens the store
from its URL, runs it with `asyncio.run` and prints one line per finding and per repair)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agentctx_fast.errors import AgentCtxError, InvalidArgumentError


def open_store(url: str, prefix: str | None, cluster: bool = False, **options: Any) -> Any:
    """The async store of ``url`` (SQLite, PostgreSQL or Redis; with ``cluster``, a Redis
    Cluster reached through the node of ``url``), made with the store's keyword ``options``;
    make it on the loop that uses it."""
    try:
        if url.startswith(("redis://", "rediss://", "unix://")):
            if prefix is not None:
                options["key_prefix"] = prefix
            return _redis_store(url, cluster, options)
        if cluster:
            raise InvalidArgumentError("--cluster needs a redis:// URL")
        if url.split(":", 1)[0].split("+", 1)[0] in ("sqlite", "postgresql", "postgres"):
            from agentctx_fast.stores.sql import AsyncSqlAgentStore

            if prefix is not None:
                options["table_prefix"] = prefix
            return AsyncSqlAgentStore(url, **options)
    except AgentCtxError:
        raise
    except Exception as error:  # a URL the driver refuses
        raise InvalidArgumentError(f"cannot open store {url!r}: {error}") from None
    raise InvalidArgumentError(
        f"unknown store URL {url!r}: use sqlite:///PATH, postgresql://… or redis://…"
    )


def _redis_store(url: str, cluster: bool, options: dict[str, Any]) -> Any:
    from agentctx_fast.stores.redis import AsyncRedisAgentStore

    if not cluster:
        return AsyncRedisAgentStore(url, **options)
    from redis.asyncio.cluster import RedisCluster

    class ClusterStore(AsyncRedisAgentStore):
        """A store on a cluster client this command made: closing it closes the client."""

        async def aclose(self) -> None:
            await self.client.aclose()

    return ClusterStore(RedisCluster.from_url(url), **options)


async def _doctor(
    url: str, conversations: Sequence[str], repair: bool, prefix: str | None, cluster: bool
) -> int:
    from agentctx_fast.stores import doctor

    store = open_store(url, prefix, cluster)
    try:
        ids = list(conversations) or None
        if repair:
            done, findings = await doctor.repair(store, ids)
            for line in done:
                print(line)
        else:
            findings = await doctor.diagnose(store, ids)
    finally:
        await store.aclose()
    for finding in findings:
        print(finding.line())
    if not findings:
        print("agentctx doctor: healthy")
        return 0
    print(f"agentctx doctor: {len(findings)} problem(s) remain")
    return 1


def run_doctor(
    url: str,
    conversations: Sequence[str],
    *,
    repair: bool,
    prefix: str | None,
    cluster: bool = False,
) -> int:
    """Exit status 0 when healthy (or everything repaired), 1 when problems remain; bad usage
    raises an `AgentCtxError` (the CLI prints it as one line, status 2)."""
    return asyncio.run(_doctor(url, conversations, repair, prefix, cluster))
