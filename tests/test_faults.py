"""The fault-injection proxy (tests/faults.py) on the real servers, and a lost reply of a store's
write (SPEC §20: "Retries are safe": a write whose reply was lost can be sent again)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agentctx_fast import StoreUnavailableError, UserMessage
from faults import FaultProxy
from server_fixtures import require_module
from servers import PostgresServer, RedisServer

redis = require_module("redis")
psycopg = require_module("psycopg")


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


@pytest.fixture
def redis_proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    with FaultProxy(redis_server.port) as proxy:
        yield proxy


@pytest.fixture
def postgres_proxy(postgres_server: PostgresServer) -> Iterator[FaultProxy]:
    with FaultProxy(postgres_server.port) as proxy:
        yield proxy


def _no_retry_client(port: int) -> Any:
    """A redis-py client that does not re-send a command whose connection was lost."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(host="127.0.0.1", port=port, retry=Retry(NoBackoff(), 0))


def test_a_dropped_redis_reply_after_the_server_acted(
    redis_server: RedisServer, redis_proxy: FaultProxy
) -> None:
    direct = redis.Redis.from_url(redis_server.url)
    proxied = _no_retry_client(redis_proxy.port)
    key = _unique("k")
    try:
        assert proxied.ping()  # connected (its handshake passed the unarmed proxy)
        redis_proxy.drop_reply(key.encode())
        with pytest.raises(redis.ConnectionError):
            proxied.set(key, "v")
        assert redis_proxy.fired == 1 and redis_proxy.fired_event.is_set()
        assert direct.get(key) == b"v"  # the server did set it
        assert proxied.get(key) == b"v"  # unarmed again: the client reconnects and goes on
        assert redis_proxy.fired == 1
    finally:
        proxied.close()
        direct.close()


def test_a_dropped_postgres_reply_after_an_autocommitted_insert(
    postgres_server: PostgresServer, postgres_proxy: FaultProxy
) -> None:
    table = f"faults_{uuid.uuid4().hex}"
    value = _unique("row")
    proxied_dsn = postgres_proxy.url(postgres_server.dsn)
    with psycopg.connect(postgres_server.dsn, autocommit=True) as direct:
        direct.execute(f"CREATE TABLE {table} (value text)")
        with psycopg.connect(proxied_dsn, autocommit=True) as proxied:
            postgres_proxy.drop_reply(value.encode())
            with pytest.raises(psycopg.OperationalError):
                proxied.execute(f"INSERT INTO {table} VALUES (%s)", (value,))
            assert postgres_proxy.fired == 1
        rows = direct.execute(f"SELECT value FROM {table}").fetchall()
        assert rows == [(value,)]  # committed once, though its reply was lost


def test_a_held_reply_waits_for_its_release(
    redis_server: RedisServer, redis_proxy: FaultProxy
) -> None:
    direct = redis.Redis.from_url(redis_server.url)
    proxied = _no_retry_client(redis_proxy.port)
    key = _unique("k")
    replies: list[Any] = []
    try:
        proxied.ping()
        redis_proxy.hold_reply(key.encode())
        writer = threading.Thread(target=lambda: replies.append(proxied.incr(key)))
        writer.start()
        assert redis_proxy.wait_fired(10)  # the server ran INCR and began to answer
        assert direct.get(key) == b"1"
        assert replies == [] and writer.is_alive()  # its reply is held back
        assert direct.incr(key) == 2  # another client's write in between
        redis_proxy.release()
        writer.join(10)
        assert replies == [1]  # the held reply, as the server sent it
        assert proxied.incr(key) == 3
        assert redis_proxy.fired == 1
    finally:
        redis_proxy.release()
        proxied.close()
        direct.close()


def test_the_nth_match_fires_and_the_proxy_can_be_armed_again(
    redis_server: RedisServer, redis_proxy: FaultProxy
) -> None:
    direct = redis.Redis.from_url(redis_server.url)
    proxied = _no_retry_client(redis_proxy.port)
    key = _unique("k")
    try:
        proxied.ping()
        redis_proxy.drop_reply(key.encode(), nth=2)
        assert proxied.incr(key) == 1  # the first match passes
        with pytest.raises(redis.ConnectionError):
            proxied.incr(key)  # the second is dropped
        assert redis_proxy.fired == 1 and direct.get(key) == b"2"
        assert proxied.incr(key) == 3  # fired once, then unarmed
        redis_proxy.drop_reply(key.encode())
        assert not redis_proxy.fired_event.is_set()  # armed again: the event is cleared
        with pytest.raises(redis.ConnectionError):
            proxied.incr(key)
        assert redis_proxy.fired == 2 and redis_proxy.fired_event.is_set()
        redis_proxy.drop_reply(key.encode())
        redis_proxy.disarm()
        assert proxied.incr(key) == 5
        assert redis_proxy.fired == 2 and direct.get(key) == b"5"
    finally:
        proxied.close()
        direct.close()


def test_unarmed_traffic_passes_untouched(
    redis_server: RedisServer, redis_proxy: FaultProxy
) -> None:
    proxied = _no_retry_client(redis_proxy.port)
    prefix = _unique("k")
    try:
        values = {f"{prefix}:{n}": bytes([n % 251]) * (n * 997 % 200_000) for n in range(300)}
        for key, value in values.items():
            assert proxied.set(key, value)
        pipe = proxied.pipeline(transaction=False)  # pipelined: many commands per chunk
        for key in values:
            pipe.get(key)
        assert pipe.execute() == list(values.values())
        assert [proxied.get(key) for key in values] == list(values.values())
        assert redis_proxy.fired == 0 and redis_proxy.connections == 1
    finally:
        proxied.close()


def test_a_marker_split_over_two_reads_is_found_once() -> None:
    with FaultProxy(1) as proxy:  # never connected: only its marker search is used
        proxy.drop_reply(b"EVALSHA", nth=2)
        assert proxy._match(b"", b"xx EVA") is None  # not yet a whole marker
        assert proxy._match(b"xx EVA", b"LSHA 1") is None  # the first, split: counted
        assert proxy._match(b"xx EVALSHA 1", b" k") is None  # in the tail only: not again
        fired = proxy._match(b"A 1 k", b"EVALSHA")
        assert fired is not None and fired.mode == "drop"
        assert proxy._match(b"", b"EVALSHA") is None  # fired once, then unarmed


# -- a store's write whose reply is lost ------------------------------------------------------


def _stores(kind: str, server: Any, proxy: FaultProxy) -> tuple[Any, Any]:
    """A store straight on ``server`` and one through ``proxy``."""
    if kind == "postgresql":
        from agentctx_fast.stores.sql import SqlAgentStore

        direct = SqlAgentStore(server.url)
        direct.schema.initialize()
        return direct, SqlAgentStore(proxy.url(server.url))
    from agentctx_fast.stores.redis import RedisAgentStore

    if kind == "redis-url":  # the store's own client: redis-py re-sends nothing
        return RedisAgentStore(server.url), RedisAgentStore(proxy.url(server.url))
    # a caller's client with redis-py's default retry (the store does not close it)
    client = redis.Redis(host="127.0.0.1", port=proxy.port)
    assert client.connection_pool.make_connection().retry.get_retries() > 0

    class ClosingStore(RedisAgentStore):
        def close(self) -> None:
            client.close()

    return RedisAgentStore(server.url), ClosingStore(client)


@pytest.mark.parametrize("kind", ["redis-url", "redis-retrying-client", "postgresql"])
def test_add_message_if_absent_after_a_lost_reply(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """The write's reply is lost after the server stored the message. With redis-py's retry
    (a client made by ``redis.Redis(host, port)``) the script is sent again, finds the message
    and answers False. The store's own Redis client (from a URL) and PostgreSQL raise
    `StoreUnavailableError`, and the caller's retry finds the message. Either way it is stored
    once, and writing it again changes nothing."""
    server = request.getfixturevalue("postgres_server" if kind == "postgresql" else "redis_server")
    with FaultProxy(server.port) as proxy:
        direct, proxied = _stores(kind, server, proxy)
        try:
            conversation = _unique("conv")
            message = UserMessage("refund ORD-1", message_id=_unique("m"), turn_id="t1")
            memory = proxied.chat_memory(conversation)
            # connected, and the Redis script loaded, before the fault is armed (a first
            # EVALSHA is answered NOSCRIPT: the server would not have acted)
            earlier = UserMessage("hello", message_id=_unique("m"), turn_id="t0")
            assert memory.add_message_if_absent(earlier) is True
            proxy.drop_reply(message.message_id.encode())
            if kind == "redis-retrying-client":
                first = memory.add_message_if_absent(message)
            else:
                with pytest.raises(StoreUnavailableError):
                    memory.add_message_if_absent(message)
                first = memory.add_message_if_absent(message)  # the caller's retry
            assert proxy.fired == 1
            assert first is False  # the retry found the message its lost write stored
            stored = direct.chat_memory(conversation).get_messages()
            assert [m.message_id for m in stored] == [earlier.message_id, message.message_id]
            assert memory.add_message_if_absent(message) is False
            assert direct.chat_memory(conversation).get_messages() == stored
            assert memory.get_messages() == stored
        finally:
            proxied.close()
            direct.close()
