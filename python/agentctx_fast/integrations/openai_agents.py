"""OpenAI Agents SDK integration (extra ``openai-agents``).

- `AgentCtxSession` is the SDK's ``Session`` on any store of this library (in-memory, SQLite,
  PostgreSQL, Redis, Redis Cluster; blocking stores run in a worker thread, async stores on the
  loop). Items are stored as messages, so a service's agents and this library's runner, window
  and ``agentctx doctor`` read the same conversation; with ``window=`` set, ``get_items``
  returns the model window of the stored history instead of all of it.
- `AgentCtxInputFilter` is a ``RunConfig.call_model_input_filter`` that sends each model call
  the window of its input (whole turns, every tool call with its output, the current turn
  kept), never changing the run's items or the session.

How items are stored. One ``add_items`` batch is read with `from_responses`: consecutive
assistant-side items (reasoning and hosted-tool items, assistant messages, function calls, in
the order the model gave them) become one `AiMessage`, so a window keeps every call with its
output, and every other item is its own message, all written in one atomic
batch under fresh message ids (an item's own ``id`` is kept, not used as the storage key, so
two items with one id are both kept). ``get_items`` gives each message's items back with
`to_responses`; the item ``id`` of a user, tool or assistant message is put back from the
message's ``metadata["openai_agents"]["id"]``. Before writing, each message is converted back
and compared with its items: where the conversion would not give them back exactly (a field
the message model has no place for), the message keeps its items verbatim in
``metadata["openai_agents"]["items"]`` and ``get_items`` returns those. So every item comes
back equal, and none is dropped or refused for being unusual (a malformed item, one
`from_responses` cannot read, raises `ResponsesFormatError` and nothing is written). An item
with neither ``type`` nor ``role`` is no Responses item but the record of a session wrapping
this one (the SDK's ``EncryptedSession`` stores its encrypted envelopes so): it is stored
opaque, as its own message, and given back as it was (a window cannot see into it).

``pop_item`` removes the newest item: the last item of the newest message, whose message is
deleted (compare-and-set on its version) when it held only that item, or rewritten without it
(compare-and-set) when it held several; a lost race is retried on the new newest message, so
concurrent pops never return one item twice.

>>> import asyncio
>>> from agentctx_fast.stores import InMemoryAgentStore
>>> session = AgentCtxSession("chat-1", InMemoryAgentStore())
>>> asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
>>> asyncio.run(session.get_items())
[{'role': 'user', 'content': 'hi'}]
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from agentctx_fast._blocking import run_sync
from agentctx_fast._extras import missing_dependency
from agentctx_fast._ids import check_identifier
from agentctx_fast.core.messages import AiMessage, Message, ToolMessage, UserMessage, new_message_id
from agentctx_fast.core.types import WindowOptions
from agentctx_fast.core.window import build_window
from agentctx_fast.errors import (
    InvalidArgumentError,
    MessageNotFoundError,
    VersionConflictError,
)
from agentctx_fast.formats.responses import ResponsesFormatError, group_responses, to_responses
from agentctx_fast.integrations._options import checked_window_options, turns_reach
from agentctx_fast.memory import AsyncChatMemory, ChatMemory, awaitable_memory

try:
    from agents.memory.session import SessionABC
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
    from agents.run_config import CallModelData, ModelInputData
except ImportError as error:  # pragma: no cover - exercised in a subprocess test
    raise missing_dependency("openai-agents", error) from error

__all__ = ["SESSION_METADATA_KEY", "AgentCtxInputFilter", "AgentCtxSession"]

SESSION_METADATA_KEY = "openai_agents"
"""The metadata key of a stored message holding how its items are given back."""

Item = dict[str, Any]
T = TypeVar("T")


# -- items <-> messages --------------------------------------------------------------------------


def _item_id(message: Message, items: Sequence[Mapping[str, Any]]) -> object:
    """The ``id`` of the item a message was read from (for an AI message, its assistant item)."""
    if not isinstance(message, AiMessage):
        return items[0].get("id")
    for item in items:
        if item.get("type") in (None, "message") and item.get("role") == "assistant":
            return item.get("id")
    return None


def _items_of(message: Message) -> list[Item]:
    """The items ``message`` gives back: its verbatim items, or its `to_responses` form with
    the item id it was read with; a message the window made (a synthetic tool result) is sent
    as the Responses API takes it."""
    marker = message.metadata.get(SESSION_METADATA_KEY)
    kept = None
    if isinstance(marker, dict):
        verbatim = marker.get("items")
        if isinstance(verbatim, list):
            return copy.deepcopy(verbatim)  # the caller may edit them; the store keeps its own
        kept = marker.get("id")
    elif isinstance(message, ToolMessage) and message.tool_name is not None:
        message = replace(message, tool_name=None)  # function_call_output takes no name
    items: list[Item] = to_responses([message], include_ids=isinstance(kept, str))  # type: ignore[assignment]
    if isinstance(kept, str):
        for item in items:
            if not isinstance(message, AiMessage) or item.get("type") == "message":
                item["id"] = kept  # the first assistant item's (others keep their own)
                break
    return items


def _stored(message: Message, items: list[Item], message_id: str) -> Message:
    """``message`` as stored under ``message_id``, with what gives ``items`` back exactly."""
    kept = _item_id(message, items)
    marker: dict[str, Any] = {"id": kept} if isinstance(kept, str) else {}
    stored = _marked(message, message_id, marker)
    if _items_of(stored) != items:
        stored = _marked(message, message_id, {"items": items})
    return stored


def _marked(message: Message, message_id: str, marker: dict[str, Any]) -> Message:
    metadata = dict(message.metadata)
    if marker:
        metadata[SESSION_METADATA_KEY] = marker
    return replace(message, message_id=message_id, metadata=metadata)


def _messages_for(items: object) -> list[Message]:
    """The messages storing ``items`` (checked and converted before anything is written)."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise InvalidArgumentError(f"items must be a list of items, got {type(items).__name__}")
    try:
        batch: list[Item] = copy.deepcopy(list(items))  # the store keeps no reference to theirs
    except (TypeError, copy.Error, RecursionError) as error:  # e.g. a lock: no item holds one
        raise InvalidArgumentError(f"items cannot be copied: {error}") from None
    out: list[Message] = []
    start = 0
    while start < len(batch):
        if _is_record(batch[start]):
            record = AiMessage(None, provider_items=(batch[start],))
            out.append(_stored(record, batch[start : start + 1], new_message_id()))
            start += 1
            continue
        end = next((i for i in range(start, len(batch)) if _is_record(batch[i])), len(batch))
        for message, count in _grouped(batch[start:end], start):
            out.append(_stored(message, batch[start : start + count], new_message_id()))
            start += count
    return out


def _is_record(item: object) -> bool:
    """Whether ``item`` has neither ``type`` nor ``role``: not a Responses item but a record a
    session wrapping this one stores (the SDK's ``EncryptedSession`` stores its encrypted
    envelopes so). It is kept opaque, as its own message, and given back as it was."""
    return isinstance(item, Mapping) and item.get("type") is None and item.get("role") is None


def _grouped(items: list[Item], first: int) -> list[tuple[Message, int]]:
    """`group_responses` of ``items``, the ``first``-th item of the batch; an error names the
    item by its index in the batch."""
    try:
        return group_responses(items)
    except ResponsesFormatError as error:
        if not first:
            raise
        text = re.sub(r"^item (\d+)", lambda m: f"item {int(m[1]) + first}", str(error))
        raise ResponsesFormatError(text) from None


def _last_whole_turns(messages: list[Message], limit: int) -> list[Item]:
    """The items of the longest suffix of ``messages`` that starts a turn (a user message) and
    has at most ``limit`` items: a limit on a window drops whole turns."""
    out: list[Item] = []
    tail: list[Item] = []
    for message in reversed(messages):
        tail = _items_of(message) + tail
        if len(tail) > limit:
            break
        if isinstance(message, UserMessage):
            out = tail
    else:
        return tail
    return out


# -- the session's operations, each written once over an AsyncChatMemory ------------------------


async def _get_items(
    memory: AsyncChatMemory, limit: int | None, window: WindowOptions | None
) -> list[Item]:
    if window is not None:
        messages = list((await memory.window(window)).messages)
        if limit is None:
            return [item for m in messages for item in _items_of(m)]
        return _last_whole_turns(messages, limit) if limit > 0 else []
    if limit is None:
        return [item for m in await memory.get_messages() for item in _items_of(m)]
    items: list[Item] = []
    offset = 0
    while len(items) < limit:  # a stored message holds one item or more (UI messages none)
        page = await memory.get_messages(limit - len(items), offset=offset)
        if not page:
            break
        items[:0] = [item for m in page for item in _items_of(m)]
        offset += len(page)
    return items[-limit:] if limit > 0 else []


async def _add_items(memory: AsyncChatMemory, messages: list[Message]) -> None:
    await memory.add_messages_if_absent(messages)  # fresh ids: one atomic batch, all appended


async def _pop_item(memory: AsyncChatMemory) -> Item | None:
    offset = 0
    while True:
        page = await memory.get_messages(1, offset=offset)
        if not page:
            return None
        newest = page[0]
        items = _items_of(newest)
        if not items:  # a UI message another writer stored: not an item, skipped
            offset += 1
            continue
        try:
            if len(items) == 1:
                await memory.delete_message(newest.message_id, newest.version)
            else:
                [(rest, _)] = group_responses(items[:-1])  # a prefix of one message's items
                rest = _stored(rest, items[:-1], newest.message_id)
                await memory.update_message(replace(rest, turn_id=newest.turn_id), newest.version)
        except (VersionConflictError, MessageNotFoundError):
            offset = 0  # another writer changed the tail first: read it again
            continue
        return items[-1]


# -- the session ---------------------------------------------------------------------------------


def _check_window(window: object) -> WindowOptions | None:
    if window is None:
        return None
    if type(window) is not WindowOptions:
        raise InvalidArgumentError(
            f"window must be a WindowOptions or None, got {type(window).__name__}"
        )
    return replace(window, current_turn="none")


class AgentCtxSession(SessionABC):
    """The OpenAI Agents SDK ``Session`` on a store of this library (see the module).

    ``store`` is any store (blocking or asyncio); ``window`` (a `WindowOptions`, its
    ``current_turn`` set to ``"none"``: every stored turn is history) makes ``get_items``
    return the window of the stored history: whole turns, every function call with its
    output, reasoning items with their message; a history without a user message gives no
    items. Without ``window``, ``get_items`` returns exactly what was stored. ``limit`` (or
    ``session_settings.limit``) returns the last ``limit`` items, with ``window`` the last
    whole turns of the window that fit in ``limit`` items; a limit <= 0 returns no items.

    The SDK checks the tail it wrote by reading it back (``get_items(limit=N)``) when it
    resumes a run state with a pending session write or rewinds after a conversation lock
    error; those checks need the stored items, so a session used for them keeps
    ``window=None`` and windows each model call with `AgentCtxInputFilter` instead.
    """

    def __init__(
        self,
        session_id: str,
        store: Any,
        *,
        window: WindowOptions | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        check_identifier(session_id, "session_id")
        self.session_id = session_id
        self.session_settings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )
        self.window = _check_window(window)
        provider = getattr(store, "chat_memory_provider", None)
        if not callable(provider):
            raise InvalidArgumentError(f"store must be a store, got {type(store).__name__}")
        memory = provider()(session_id)
        self._blocking = isinstance(memory, ChatMemory)
        if not self._blocking and not isinstance(memory, AsyncChatMemory):
            raise InvalidArgumentError(f"the store gave no chat memory: {type(memory).__name__}")
        self._memory: AsyncChatMemory = awaitable_memory(memory) if self._blocking else memory
        self._store = store
        self._owned = False  # from_url made the store: close() closes it
        self._create_tables = False

    @classmethod
    def from_url(
        cls,
        session_id: str,
        url: str,
        *,
        window: WindowOptions | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        create_tables: bool = False,
        **store_options: Any,
    ) -> AgentCtxSession:
        """A session on the asyncio store of ``url``: ``sqlite:///PATH``, ``postgresql://…``
        (or ``postgres://``), ``redis://…``, or ``memory:`` (an in-process store); the store's
        keyword ``store_options`` (``table_prefix``, ``key_prefix``, ``ttl_seconds``…) are
        passed on (``cluster=True``: a Redis Cluster reached through the node of ``url``).
        ``create_tables=True`` creates a SQL store's tables (if absent) on first
        use; otherwise they are created with ``agentctx schema``. `close` closes the store."""
        if url == "memory:":
            from agentctx_fast.stores import AsyncInMemoryAgentStore

            if store_options:
                raise InvalidArgumentError(
                    f"the memory: store takes no options, got {', '.join(sorted(store_options))}"
                )
            store: Any = AsyncInMemoryAgentStore()
        else:
            from agentctx_fast.cli.doctor import open_store

            store = open_store(url, None, **store_options)
        session = cls(session_id, store, window=window, session_settings=session_settings)
        session._owned = True
        session._create_tables = create_tables and hasattr(store, "schema")
        return session

    async def _run(self, operation: Callable[[AsyncChatMemory], Awaitable[T]]) -> T:
        """``operation`` on this session's memory: on the loop for an asyncio store, in a
        worker thread for a blocking one (its coroutines never suspend, `run_sync` runs them)."""
        if self._create_tables:
            # No lock: a session may be shared by event loops (an asyncio lock belongs to
            # one), and `initialize` is safe to run concurrently, so each first call runs it.
            await self._store.schema.initialize()
            self._create_tables = False
        if self._blocking:
            return await asyncio.to_thread(run_sync, operation(self._memory))  # type: ignore[arg-type]
        return await operation(self._memory)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The stored items, oldest first (the window of them with ``window`` set); the last
        ``limit`` ones when ``limit`` (or ``session_settings.limit``) is set."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidArgumentError(f"limit must be None or an int, got {limit!r}")
        window = self.window
        return await self._run(lambda memory: _get_items(memory, limit, window))

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` in one atomic write (nothing is written if one is malformed)."""
        messages = _messages_for(items)
        if messages:
            await self._run(lambda memory: _add_items(memory, messages))

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item, or None when the session holds none."""
        return await self._run(_pop_item)

    async def clear_session(self) -> None:
        """Remove every item of this session (the conversation's messages)."""

        async def clear(memory: AsyncChatMemory) -> None:
            await memory.clear()

        await self._run(clear)

    async def close(self) -> None:
        """Close the store `from_url` made (a store given to the constructor stays open)."""
        if self._owned:
            self._owned = False
            aclose = getattr(self._store, "aclose", None)
            if aclose is not None:
                await aclose()


# -- the input filter ----------------------------------------------------------------------------


def _is_user(item: object) -> bool:
    """Whether ``item`` is a user input message: where a turn starts."""
    return (
        isinstance(item, Mapping)
        and item.get("role") == "user"
        and item.get("type") in (None, "message")
    )


def _reachable(items: list[Any], options: WindowOptions) -> list[Any]:
    """The items a window of ``options`` can reach (the filter converts only those, as the
    runner reads only a store's tail): its turns (`turns_reach`; a user item starts a turn) and
    what precedes the first user item (where the leading system message is). A compressor
    summarizes older turns too, so it is given them all."""
    if options.context_compressor is not None:
        return items
    starts = (index for index in range(len(items) - 1, -1, -1) if _is_user(items[index]))
    start = turns_reach(starts, options)
    head = next((index for index, item in enumerate(items) if _is_user(item)), 0)
    return [*items[:head], *items[start:]] if start > head else items


class AgentCtxInputFilter:
    """A ``RunConfig(call_model_input_filter=...)`` sending each model call the window of its
    input (``options`` or the `WindowOptions` keyword arguments; the current turn is the
    run's: its last user input and the tool loop after it are kept). The window's messages
    are given back as the run's own items (the SDK's objects, unchanged); only what the window
    adds (a synthetic output closing a call that has none) is new. The run's items and its
    session are never changed; the filter runs inside the run's trace, as every hook does.
    """

    def __init__(self, options: WindowOptions | None = None, **window_options: Any) -> None:
        self.options = checked_window_options(options, window_options)

    def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        items = _reachable(data.model_data.input, self.options)
        origin: dict[int, list[Any]] = {}
        messages: list[Message] = []
        start = 0
        for message, count in group_responses(items):
            origin[id(message)] = items[start : start + count]
            messages.append(message)
            start += count
        window = build_window(messages, self.options)
        kept: list[Any] = []
        for message in window.messages:
            own = origin.get(id(message))
            kept.extend(own if own is not None else _items_of(message))
        return ModelInputData(input=kept, instructions=data.model_data.instructions)
