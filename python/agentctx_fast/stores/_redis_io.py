"""The I/O ports of the Redis store: its one implementation awaits them, blocking or async.

Every write is one Lua script (atomic on the server); reads are single commands. A script is
run by ``EVALSHA`` of its SHA1, computed once per port; a server that answers ``NOSCRIPT``
(after a restart or ``SCRIPT FLUSH``) gets it by ``SCRIPT LOAD`` (on a cluster, every master)
and the ``EVALSHA`` once more: what redis-py's registered scripts do, without the few µs
their call costs above the bare command.

On Redis Cluster a script may only touch keys of one hash slot, so every key of a conversation
carries the same hash tag (`conversation_tag`), and redis-py's cluster clients route each
``EVALSHA`` and each single-key read to the master of that slot.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agentctx_fast._extras import missing_dependency
from agentctx_fast.errors import (
    AgentCtxError,
    LeaseLostError,
    SerializationError,
    StoreBusyError,
    StoreError,
    StoreUnavailableError,
)

try:
    import redis
    import redis.asyncio
    from redis import exceptions as redis_exc
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.cluster import RedisCluster
except ImportError as _error:
    raise missing_dependency("redis", _error) from _error


# Retry later: the server unreachable, the connection lost or out of time, the server still
# loading or out of connections, a cluster down or failing over (a write that reached a demoted
# master), or a slot moving (redirections redis-py gave up following, a "try again").
_UNAVAILABLE = (
    redis_exc.ConnectionError,
    redis_exc.TimeoutError,
    redis_exc.ClusterError,
    redis_exc.AskError,
    redis_exc.TryAgainError,
    redis_exc.ReadOnlyError,
    redis_exc.SlotNotCoveredError,
    redis_exc.RedisClusterUnreachableError,
)
# Subclasses of those that no retry fixes: the credentials or the permissions are wrong.
_PERMANENT = (
    redis_exc.AuthenticationError,
    redis_exc.AuthorizationError,
    redis_exc.ExternalAuthProviderError,
)


_ERRORS = (redis_exc.RedisError, redis_exc.RedisClusterException)

_DEFAULT_SOCKET_TIMEOUT = inspect.signature(redis.Redis).parameters["socket_timeout"].default


@contextmanager
def translated(action: str) -> Iterator[None]:
    """Redis errors become typed store errors (`_typed`)."""
    try:
        yield
    except _ERRORS as error:
        raise _typed(error, action) from error


# A fenced script (`write_script`) refuses with this error reply when the lease moved on.
_LEASE_LOST = "AGENTCTX_LEASE_LOST"

# The prelude of a fenced script: the lease key is its last key, the fence (turn id, owner) its
# last two arguments; ARGC counts the script's own arguments, FENCED says it is fenced.
_FENCE = f"""
local ARGC = #ARGV - 2
local FENCED = true
local held = redis.call('HMGET', KEYS[#KEYS], 'turn_id', 'owner')
if held[1] ~= ARGV[ARGC + 1] or held[2] ~= ARGV[ARGC + 2] then
  return redis.error_reply('{_LEASE_LOST}')
end
"""


def write_script(lua: str) -> tuple[str, str]:
    """A write script as it runs without a fence, and fenced: run only while the fence passed
    after its own keys and arguments holds the conversation's lease (SPEC §20), the check and
    the write in one script. A fenced write re-sent after a lost reply may find its own effect
    (the lease is still its own, so no other runner wrote it) and report success."""
    return "local ARGC = #ARGV\nlocal FENCED = false\n" + lua, _FENCE + lua


# The prelude and epilogue of a write script on a store with an idle expiry (`expiring`): the
# caller appends the conversation's keys to renew after the script's own keys (its lease key
# last), then the head of its turn keys, their count and the expiry (ms) after its arguments;
# they are taken off before the script runs, so it sees KEYS and ARGV as it always does (the
# fence's prelude included). The record of the turn the lease names is renewed too.
_EXPIRING_HEAD = """
local EXPIRY = table.remove(ARGV)
local RENEWED = {}
for i = 1, tonumber(table.remove(ARGV)) do RENEWED[i] = table.remove(KEYS) end
local TURN_HEAD = table.remove(ARGV)
local function body()
"""
_EXPIRING_TAIL = """
end
local result = body()
for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], EXPIRY) end
for i = 1, #RENEWED do redis.call('PEXPIRE', RENEWED[i], EXPIRY) end
local open = redis.call('HGET', RENEWED[1], 'turn_id')
if open then redis.call('PEXPIRE', TURN_HEAD .. open, EXPIRY) end
return result
"""
_EXPIRING: dict[str, str] = {}


def expiring(lua: str) -> str:
    """``lua`` renewing, in the same script, the idle expiry of its own keys and of the
    conversation keys passed after them (see `_EXPIRING_HEAD`): no extra round trip."""
    made = _EXPIRING.get(lua)
    if made is None:
        made = _EXPIRING[lua] = _EXPIRING_HEAD + lua + _EXPIRING_TAIL
    return made


def _typed(error: BaseException, action: str) -> AgentCtxError:
    """The typed error of a Redis error, the one place they are told apart: `LeaseLostError`
    for a fenced write refused, `StoreUnavailableError` only when a later retry may succeed
    (`_UNAVAILABLE`), `StoreError` for the rest (a script error, out of memory, wrong
    credentials: permanent)."""
    if isinstance(error, redis_exc.ResponseError) and str(error).startswith(_LEASE_LOST):
        return LeaseLostError(
            f"lease lost while {action}: another runner took the conversation; nothing was written"
        )
    if isinstance(error, _UNAVAILABLE) and not isinstance(error, _PERMANENT):
        return StoreUnavailableError(f"Redis unavailable while {action}: {error}")
    return StoreError(f"Redis error while {action}: {error}")


def raw(value: object) -> bytes:
    """A reply as bytes: the store's own client returns bytes; a caller's may decode to str."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if not isinstance(value, bytes):
        raise SerializationError(f"unexpected Redis reply of type {type(value).__name__}")
    return value


def text(value: Any) -> str:
    """A reply as str."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def conversation_tag(conversation_id: str) -> str:
    """The ``{…}`` hash tag of a conversation's keys: the id with ``%``, ``{`` and ``}``
    percent-encoded, so a brace inside an id cannot end the tag early (Redis hashes the text
    between the first ``{`` and the next ``}``) and two ids never share a tag.

    >>> conversation_tag("conv-1"), conversation_tag("a}b{c%")
    ('{conv-1}', '{a%7Db%7Bc%25}')
    """
    encoded = conversation_id.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    return "{" + encoded + "}"


def tag_conversation(inside: str) -> str:
    """The conversation id of a tag, given the text between its braces (`conversation_tag`
    undone).

    >>> tag_conversation(conversation_tag("a}b{c%")[1:-1])
    'a}b{c%'
    """
    return inside.replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


def glob_escaped(pattern: str) -> str:
    """``pattern`` with the glob characters of ``SCAN MATCH`` escaped (matched as it is)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in pattern)


def conversation_key(prefix: str, kind: str, conversation_id: str, *parts: str) -> str:
    """The key ``{prefix}{kind}:{tag}[:part…]``; every key of one conversation hashes to the
    slot of its tag (the prefix holds no brace, `check_key_prefix` sees to it).

    >>> conversation_key("agent:", "turn", "c1", "t1")
    'agent:turn:{c1}:t1'
    """
    return ":".join((prefix + kind, conversation_tag(conversation_id), *parts))


class RedisPort:
    """The port over a Redis client: a blocking `redis.Redis` or `redis.cluster.RedisCluster`,
    whose replies come back as they are, or a `redis.asyncio.Redis` or
    `redis.asyncio.cluster.RedisCluster`, whose replies are awaited.

    ``timeout`` (seconds), for an async client the store made itself (`own_async_client`): each
    call, its connection's set-up and redis-py's retries included, gets that long (`_Deadlines`);
    past it the call raises `StoreUnavailableError` (redis-py closes the connection the
    cancelled call was using, so no late reply is read by a later call)."""

    def __init__(self, client: Any, timeout: float | None = None) -> None:
        self.client = client
        self._deadlines = None if timeout is None else _Deadlines(timeout)
        self._shas: dict[str, str] = {}  # script → its SHA1 (hex)
        # An asyncio cluster client learns the slot map on its first command. Commands sent
        # concurrently before that went to the wrong masters; after five MOVED replies redis-py
        # closes every connection, those of commands in flight too, and retries them (a script
        # could then run twice). So the map is loaded once, before any command.
        self._initialized = not isinstance(client, AsyncRedisCluster)
        self._initializing: asyncio.Lock | None = None
        self._blocking = isinstance(client, (redis.Redis, RedisCluster))  # replies not awaited
        pool = getattr(client, "connection_pool", None)
        self._slots = (
            _Slots(pool.max_connections, pool.timeout)
            if isinstance(pool, redis.asyncio.BlockingConnectionPool)
            else None
        )

    async def script(self, action: str, lua: str, keys: list[str], args: list[Any]) -> Any:
        """Run the Lua script ``lua`` atomically on the server."""
        sha = self._shas.get(lua)
        if sha is None:
            digest = hashlib.sha1(lua.encode("utf-8"), usedforsecurity=False)  # a name, no secret
            sha = self._shas[lua] = digest.hexdigest()
        try:  # `translated`, inline: every write is a script
            if not self._initialized:
                await self._initialize()
            try:
                return await self._call(action, self.client.evalsha(sha, len(keys), *keys, *args))
            except redis_exc.NoScriptError:
                self._shas[lua] = sha = text(await self._call(action, self.client.script_load(lua)))
                return await self._call(action, self.client.evalsha(sha, len(keys), *keys, *args))
        except _ERRORS as error:
            raise _typed(error, action) from error

    async def _call(self, action: str, reply: Any) -> Any:
        """A blocking client's reply, or an async client's awaited (within the time limit)."""
        if self._blocking:
            return reply
        if self._slots is not None:
            return await self._slots.run(action, reply, self._answer)
        return await self._answer(action, reply)

    async def _answer(self, action: str, reply: Any) -> Any:
        """An async client's reply, awaited (within the time limit)."""
        if self._deadlines is not None:
            return await self._deadlines.run(action, reply)
        return await _reply(reply)

    async def command(self, action: str, name: str, *args: Any) -> Any:
        """Run one Redis command (a client method by name: ``hget``, ``llen``, …)."""
        try:  # `translated`, inline: a page read is the hot path
            if not self._initialized:
                await self._initialize()
            return await self._call(action, getattr(self.client, name)(*args))
        except _ERRORS as error:
            raise _typed(error, action) from error

    async def scan(self, action: str, match: str) -> list[Any]:
        """Every key matching ``match`` (``SCAN``; on a cluster, of every master). On an async
        client each step of the scan is a call of this port, as every other command is: it
        gets the time limit and waits its turn for a connection (the store's own client has
        no socket timeout: without this, a server that stops answering would hang the scan).
        """
        try:
            if not self._initialized:
                await self._initialize()
            found = self.client.scan_iter(match=match, count=1000)
            if self._blocking:
                return list(found)
            keys: list[Any] = []
            try:
                while True:
                    keys.append(await self._call(action, anext(found)))
            except StopAsyncIteration:
                return keys
            finally:
                await found.aclose()
        except _ERRORS as error:
            raise _typed(error, action) from error

    async def _initialize(self) -> None:
        if self._initialized:
            return
        if self._initializing is None:
            self._initializing = asyncio.Lock()
        async with self._initializing:
            if not self._initialized:
                await self.client.initialize()
                self._initialized = True


class _Slots:
    """At most ``size`` calls of a port in flight at once (the connections of its client's
    `redis.asyncio.BlockingConnectionPool`), let in in the order they came, each waiting at
    most ``wait`` seconds (the pool's timeout) before it fails with `StoreUnavailableError`.

    The pool waits too, but hands a freed connection to whichever caller gets its lock first:
    under load some calls pass at once while others wait for most of the run (1,000
    concurrent turns on 8 connections: a median wait of 0 s, a 99th percentile of 10 s), past
    any time limit. Here the wait is shared out in order, and a call's own time limit
    (`_Deadlines`) starts once it has its connection, so it measures the server's reply, not
    the queue. One semaphore per event loop (a store may serve several, one after another)."""

    def __init__(self, size: int, wait: float | None) -> None:
        self.size = size
        self.wait = wait
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._by_loop = weakref.WeakKeyDictionary()

    async def run(
        self, action: str, reply: Any, answer: Callable[[str, Any], Awaitable[Any]]
    ) -> Any:
        """``answer(action, reply)`` once a slot is free (``reply``, not yet awaited, is
        closed if none frees in time)."""
        loop = asyncio.get_running_loop()
        slots = self._by_loop.get(loop)
        if slots is None:
            slots = self._by_loop[loop] = asyncio.Semaphore(self.size)
        try:
            if slots.locked():  # a timer only for a call that waits
                async with asyncio.timeout(self.wait):
                    await slots.acquire()
            else:
                await slots.acquire()  # returns at once
        except TimeoutError:
            _close(reply)
            raise StoreBusyError(
                f"Redis busy while {action}: no free connection within {self.wait} s "
                f"({self.size} in use)"
            ) from None
        except BaseException:
            _close(reply)
            raise
        try:
            return await answer(action, reply)
        finally:
            slots.release()


def _close(reply: Any) -> None:
    """A reply coroutine never awaited, closed (so it is not reported as never awaited)."""
    if inspect.iscoroutine(reply):
        reply.close()


class _Deadlines:
    """A time limit on each call of a port, with one timer for all of them.

    ``asyncio.timeout`` arms a timer per call and cancels it after (some 10 µs a call here);
    a call here only notes its task and deadline, and the one timer, when it fires, cancels the
    calls past theirs and is armed again for the earliest deadline left (while calls keep
    coming, it fires about once per ``timeout``). A call cancelled so raises
    `StoreUnavailableError`; a cancellation from elsewhere stays a `asyncio.CancelledError`
    (told apart by the task's cancellation count, as ``asyncio.timeout`` does)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._calls: dict[asyncio.Task[Any], float] = {}  # the calls in flight: deadlines
        self._expired: set[asyncio.Task[Any]] = set()  # those the timer cancelled
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self, action: str, reply: Awaitable[Any]) -> Any:
        """``reply``, awaited within the time limit."""
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._calls or task is None:  # calls in flight on another loop: a timer each
                return await self._alone(action, reply)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._loop = loop
        if task is None or task in self._calls:
            return await self._alone(action, reply)
        deadline = loop.time() + self.timeout
        self._calls[task] = deadline
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire)
        cancelling = task.cancelling()
        try:
            return await reply
        except asyncio.CancelledError:
            if task in self._expired and task.uncancel() <= cancelling:
                raise self._error(action) from None
            raise
        finally:
            del self._calls[task]
            self._expired.discard(task)

    def _expire(self) -> None:
        """Cancel the calls past their deadline; arm the timer for the earliest one left."""
        assert self._loop is not None
        self._timer = None
        now = self._loop.time()
        earliest: float | None = None
        for task, deadline in self._calls.items():
            if task in self._expired:
                continue
            if deadline <= now:
                self._expired.add(task)
                task.cancel()
            elif earliest is None or deadline < earliest:
                earliest = deadline
        if earliest is not None:
            self._timer = self._loop.call_at(earliest, self._expire)

    async def _alone(self, action: str, reply: Awaitable[Any]) -> Any:
        """``reply`` within the time limit, by a timer of its own."""
        try:
            async with asyncio.timeout(self.timeout) as scope:
                return await reply
        except TimeoutError:
            if not scope.expired():
                raise
            raise self._error(action) from None

    def _error(self, action: str) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"Redis unavailable while {action}: no reply within {self.timeout} s"
        )


POOL_SIZE = 100
"""Connections a store's own client opens at most (redis-py's default), unless the URL sets
``?max_connections=``."""
POOL_WAIT = 20.0
"""Seconds a call of a store's own client waits for a free connection when all are in use
(redis-py's default), unless the URL sets ``?timeout=``; past it, `StoreUnavailableError`."""


def own_client(url: str) -> Any:
    """A `redis.Redis` client for ``url`` whose pool waits for a free connection (bounded by
    `POOL_WAIT`) when more threads call at once than it has connections, instead of failing."""
    pool = redis.BlockingConnectionPool.from_url(url, **_pool_options(url))
    return redis.Redis.from_pool(pool)


def own_async_client(url: str) -> tuple[Any, float | None]:
    """A `redis.asyncio.Redis` client for ``url`` and the socket timeout its `RedisPort`
    keeps for it (the URL's ``socket_timeout``, else redis-py's default). Its pool waits for a
    free connection, as `own_client`'s: a service runs more concurrent calls than it keeps
    connections.

    The client itself keeps no socket timeout: redis.asyncio bounds each write with
    ``asyncio.wait_for``, which starts a task per command on Python 3.11, and each read with
    a timer of its own, a third of what an async command costs above a blocking one here; the
    port's `_Deadlines` cost a few µs. The connect timeout stays (the URL's, else the socket
    timeout)."""
    import redis.asyncio as aioredis

    pool = aioredis.BlockingConnectionPool.from_url(url, **_pool_options(url))
    client = aioredis.Redis.from_pool(pool)
    options = client.connection_pool.connection_kwargs
    timeout = options.get("socket_timeout", _DEFAULT_SOCKET_TIMEOUT)
    options["socket_timeout"] = None
    if "orig_socket_timeout" in options:  # what redis-py restores after a maintenance notice
        options["orig_socket_timeout"] = None
    options.setdefault("socket_connect_timeout", timeout or None)  # 0: no limit, as for calls
    return client, timeout or None


def _pool_options(url: str) -> dict[str, Any]:
    """The defaults of a store's own pool (options the URL sets win: redis-py's ``from_url``
    applies them over these)."""
    return {"max_connections": POOL_SIZE, "timeout": POOL_WAIT}


async def _reply(reply: Any) -> Any:
    return await reply if inspect.isawaitable(reply) else reply


__all__ = [
    "AsyncRedisCluster",
    "RedisCluster",
    "RedisPort",
    "conversation_key",
    "conversation_tag",
    "expiring",
    "glob_escaped",
    "own_async_client",
    "own_client",
    "raw",
    "redis",
    "tag_conversation",
    "text",
    "translated",
]
