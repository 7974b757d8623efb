"""Database URLs as users write them: ``postgres://`` (the spelling libpq and many hosting
services give) is accepted wherever ``postgresql://`` is, and both run on psycopg, the driver
the ``postgresql`` extra installs: the blocking and the async store, ``agentctx schema``,
``agentctx doctor`` and ``agentctx demo`` (on a real PostgreSQL server)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from agentctx_fast import UserMessage
from agentctx_fast.cli.main import main
from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore
from servers import PostgresServer

pytestmark = pytest.mark.servers


def _url(server: PostgresServer, scheme: str) -> str:
    return f"{scheme}://{server.dsn.split('://', 1)[1]}"


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_the_blocking_store_opens_the_url(scheme: str, postgres_server: PostgresServer) -> None:
    store = SqlAgentStore(_url(postgres_server, scheme), table_prefix=f"u{uuid.uuid4().hex[:8]}_")
    try:
        assert store.engine.dialect.driver == "psycopg"
        store.schema.initialize()
        memory = store.chat_memory("c1")
        memory.add_message(UserMessage("hi", message_id="u1"))
        assert [m.message_id for m in memory.get_messages()] == ["u1"]
    finally:
        store.close()


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_the_async_store_opens_the_url(scheme: str, postgres_server: PostgresServer) -> None:
    async def body() -> list[str]:
        url = _url(postgres_server, scheme)
        store = AsyncSqlAgentStore(url, table_prefix=f"u{uuid.uuid4().hex[:8]}_")
        try:
            assert store.engine.dialect.driver == "psycopg"
            await store.schema.initialize()
            memory = store.chat_memory("c1")
            await memory.add_message(UserMessage("hi", message_id="u1"))
            return [m.message_id for m in await memory.get_messages()]
        finally:
            await store.aclose()

    assert asyncio.run(body()) == ["u1"]


def test_the_cli_takes_postgres_urls(
    postgres_server: PostgresServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(postgres_server, "postgres")
    assert main(["schema", "--url", url]) == 0
    ddl = capsys.readouterr().out
    assert main(["schema", "--url", _url(postgres_server, "postgresql")]) == 0
    assert capsys.readouterr().out == ddl and "CREATE TABLE agent_messages" in ddl
    prefix = f"u{uuid.uuid4().hex[:8]}_"
    store = SqlAgentStore(url, table_prefix=prefix)
    try:
        store.schema.initialize()
    finally:
        store.close()
    assert main(["doctor", "--store", url, "--prefix", prefix]) == 0
    assert capsys.readouterr().out == "agentctx doctor: healthy\n"
    assert main(["demo", "--store", url]) == 0
