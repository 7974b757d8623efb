"""Chat memory: the business timeline of one conversation, never cleared by the library.

A store implements the small abstract core (`add_message_if_absent`, `get_messages`,
`get_message`, `update_message`, `message_count`, `clear`); the rest has default
implementations built on it, which database stores override with indexed queries.

>>> from agentctx_fast import UserMessage
>>> memory = InMemoryChatMemory()
>>> memory.add_message_if_absent(UserMessage("hi", message_id="u1"))
True
>>> memory.add_message_if_absent(UserMessage("hi", message_id="u1"))
False
>>> [m.message_id for m in memory.get_messages()]
['u1']
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from agentctx_fast._blocking import (
    AwaitableAdapter,
    BlockingAdapter,
    awaitable,
    blocking,
    implementation,
    run_sync,
)
from agentctx_fast._ids import check_expected_version, check_identifier
from agentctx_fast.core.messages import Message
from agentctx_fast.errors import (
    DuplicateMessageError,
    InvalidArgumentError,
    InvalidMessageTypeError,
    MessageNotFoundError,
    VersionConflictError,
)

if TYPE_CHECKING:
    from agentctx_fast.core.messages import SystemMessage
    from agentctx_fast.core.types import ContextWindow, WindowOptions
    from agentctx_fast.stores.turn_store import Fence

ChatMemoryProvider = Callable[[str], "ChatMemory"]
"""Locates the memory of a conversation id; it does not create ids or own the lifecycle."""

_PAGE = 256  # page size of the default `get_model_messages`


def check_message(message: object) -> Message:
    """``message`` if it is a `Message`, else `InvalidMessageTypeError`."""
    if not isinstance(message, Message):
        raise InvalidMessageTypeError(f"not a Message: {type(message).__name__}")
    return message


def check_messages(messages: object, name: str = "messages") -> list[Message]:
    """``messages`` as a new list, every item checked (before anything is written); errors name
    the argument ``name`` and the index."""
    if isinstance(messages, (str, bytes, Message)) or not isinstance(messages, Sequence):
        raise InvalidMessageTypeError(
            f"{name} must be a sequence of messages, got {type(messages).__name__}"
        )
    batch = list(messages)
    for index, message in enumerate(batch):
        if not isinstance(message, Message):
            raise InvalidMessageTypeError(
                f"{name}[{index}] is not a Message: {type(message).__name__}"
            )
    return batch


def first_of_each(batch: Sequence[Message], appended: set[str]) -> list[bool]:
    """Per message of ``batch``, whether it was appended: its id is in ``appended`` and an
    earlier message of the batch did not carry it already."""
    flags: list[bool] = []
    seen: set[str] = set()
    for message in batch:
        flags.append(message.message_id in appended and message.message_id not in seen)
        seen.add(message.message_id)
    return flags


def check_page(count: object, offset: object) -> None:
    """Validates the paging arguments of `ChatMemory.get_messages`."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise InvalidArgumentError(f"count must be None or an int >= 0, got {count!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidArgumentError(f"offset must be an int >= 0, got {offset!r}")


def check_first(count: object) -> int:
    """Validates the count of `ChatMemory.get_first_messages`."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidArgumentError(f"count must be an int >= 0, got {count!r}")
    return count


def first_page(count: int, total: int) -> tuple[int, int]:
    """The ``get_messages`` page (count, offset) of the ``count`` oldest of ``total`` messages
    (the default `ChatMemory.get_first_messages`: pages are counted from the newest)."""
    return min(count, total), max(total - count, 0)


def check_version(expected_version: object) -> int:
    """Validates the ``expected_version`` of a compare-and-set update."""
    return check_expected_version(expected_version)


def check_update(stored: Message, message: Message) -> None:
    """An update keeps the message's type, so its role and model visibility never change."""
    if type(stored) is not type(message):
        raise InvalidArgumentError(
            f"update_message cannot turn {type(stored).__name__} {message.message_id!r} "
            f"into a {type(message).__name__}"
        )


class ChatMemory(ABC):
    """The timeline of one conversation, oldest first, with paged reads and CAS updates."""

    @abstractmethod
    def add_message_if_absent(self, message: Message) -> bool:
        """Append ``message`` unless its ``message_id`` is stored; True when it was appended.

        Atomic: of concurrent calls with one id, exactly one returns True.
        """

    @abstractmethod
    def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        """The ``count`` messages that end ``offset`` messages before the newest, oldest first.

        ``count=None`` means every message up to that point. ``offset`` is keyword-only, so a
        Java-style ``get_messages(offset, count)`` call fails loudly.
        """

    @abstractmethod
    def get_message(self, message_id: str) -> Message | None:
        """The stored message with this id, or None."""

    @abstractmethod
    def update_message(self, message: Message, expected_version: int) -> Message:
        """Replace the stored message with ``message``'s id if its version is ``expected_version``.

        Returns the stored message, carrying ``expected_version + 1``. Raises
        `VersionConflictError` on another version and `MessageNotFoundError` for an unknown id.
        """

    def delete_message(self, message_id: str, expected_version: int) -> None:
        """Remove the stored message ``message_id`` if its version is ``expected_version``
        (compare-and-set, atomic: of concurrent deletes of one message at most one succeeds).

        Raises `VersionConflictError` on another version and `MessageNotFoundError` when no
        message has the id (deleted already, or never stored); `LeaseLostError` when the
        memory is fenced and the lease moved on. The messages after it move up one place, so
        ``get_messages(count, offset=...)`` and `message_count` count without it. A delete
        whose reply was lost and that the client library sends again (redis-py's retry) finds
        its own effect and succeeds, while any other call finds the id absent (the Redis
        stores note each delete's call token); a SQL delete is one transaction that commits
        or not, never re-sent by the driver.
        A window over what is left never holds an orphan: the window's repairs give a call
        whose result was deleted a synthetic result, and leave out a result whose call was.
        The stores implement it; this default, for custom memories, cannot."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete messages")

    @abstractmethod
    def message_count(self) -> int:
        """How many messages the conversation holds, UI messages included."""

    def get_first_messages(self, count: int) -> list[Message]:
        """The ``count`` oldest messages, oldest first (fewer when the history is shorter):
        the head of a long history, where its leading system message is. The stores read it
        in one query; this default, for custom memories, counts the messages first."""
        check_first(count)
        size, offset = first_page(count, self.message_count())
        return self.get_messages(size, offset=offset)

    @abstractmethod
    def clear(self) -> None:
        """Remove every message, and a store's compression state built from them (its summary
        quotes them). Exists for applications; the library never calls it."""

    def add_message(self, message: Message) -> None:
        """Append ``message``; `DuplicateMessageError` if its id is already stored."""
        _check_added(self.add_message_if_absent(message), message)

    def add_messages_if_absent(self, messages: Sequence[Message]) -> list[bool]:
        """Append each message whose id is not stored yet, in order; a flag per message.

        The stores do it in one atomic write (one transaction or script). This default, for
        custom memories, checks every message first and then appends them one by one.
        """
        batch = check_messages(messages)
        return [self.add_message_if_absent(message) for message in batch]

    def get_model_messages(self, count: int | None = None) -> list[Message]:
        """The last ``count`` model-visible messages, oldest first (UI messages dropped first)."""

        async def page(size: int, offset: int) -> list[Message]:
            return self.get_messages(size, offset=offset)

        return run_sync(model_messages(page, count))

    def window(
        self, options: WindowOptions | None = None, system: SystemMessage | str | None = None
    ) -> ContextWindow:
        """The window of this conversation for a model call: what
        ``build_window(self.get_messages(), options, system=system)`` gives, with only
        the tail the window can reach read (the runner's right-sized read, see
        `agentctx_fast._memory_window`). For services that bring their own loop;
        ``options=None`` means `WindowOptions()`. Its ``dropped_turns`` counts the turns left
        out of the tail read, not the older ones it did not read."""
        from agentctx_fast._memory_window import memory_window  # it reads as the runner does

        return run_sync(memory_window(awaitable_memory(self), options, system))

    def fenced(self, fence: Fence) -> ChatMemory:
        """This memory with its writes accepted only while ``fence`` holds the conversation's
        lease, checked in the write's own script or transaction (`LeaseLostError`
        otherwise). The runner writes a turn through it. The stores' memories can; a memory
        that cannot check it on its server returns itself."""
        return self


class AsyncChatMemory(ABC):
    """`ChatMemory` for asyncio programs: the same contract, every method a coroutine."""

    @abstractmethod
    async def add_message_if_absent(self, message: Message) -> bool:
        """Append ``message`` unless its ``message_id`` is stored; True when it was appended."""

    @abstractmethod
    async def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        """The ``count`` messages that end ``offset`` messages before the newest, oldest first."""

    @abstractmethod
    async def get_message(self, message_id: str) -> Message | None:
        """The stored message with this id, or None."""

    @abstractmethod
    async def update_message(self, message: Message, expected_version: int) -> Message:
        """Compare-and-set replace of the stored message with ``message``'s id."""

    async def delete_message(self, message_id: str, expected_version: int) -> None:
        """Compare-and-set removal of the stored message (see `ChatMemory.delete_message`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete messages")

    @abstractmethod
    async def message_count(self) -> int:
        """How many messages the conversation holds, UI messages included."""

    async def get_first_messages(self, count: int) -> list[Message]:
        """The ``count`` oldest messages, oldest first (see `ChatMemory.get_first_messages`)."""
        check_first(count)
        size, offset = first_page(count, await self.message_count())
        return await self.get_messages(size, offset=offset)

    @abstractmethod
    async def clear(self) -> None:
        """Remove every message and a store's compression state built from them."""

    async def add_message(self, message: Message) -> None:
        """Append ``message``; `DuplicateMessageError` if its id is already stored."""
        _check_added(await self.add_message_if_absent(message), message)

    async def add_messages_if_absent(self, messages: Sequence[Message]) -> list[bool]:
        """Append each message whose id is not stored yet, in order; a flag per message (see
        `ChatMemory.add_messages_if_absent`)."""
        batch = check_messages(messages)
        return [await self.add_message_if_absent(message) for message in batch]

    async def get_model_messages(self, count: int | None = None) -> list[Message]:
        """The last ``count`` model-visible messages, oldest first (UI messages dropped first)."""

        async def page(size: int, offset: int) -> list[Message]:
            return await self.get_messages(size, offset=offset)

        return await model_messages(page, count)

    async def window(
        self, options: WindowOptions | None = None, system: SystemMessage | str | None = None
    ) -> ContextWindow:
        """The window of this conversation, reading only its tail (see `ChatMemory.window`)."""
        from agentctx_fast._memory_window import memory_window  # it reads as the runner does

        return await memory_window(self, options, system)

    def fenced(self, fence: Fence) -> AsyncChatMemory:
        """This memory with fenced writes (see `ChatMemory.fenced`)."""
        return self


AsyncChatMemoryProvider = Callable[[str], AsyncChatMemory]
"""Locates the async memory of a conversation id."""


def _check_added(added: bool, message: Message) -> None:
    if not added:
        raise DuplicateMessageError(f"message {message.message_id!r} is already stored")


async def model_messages(
    page: Callable[[int, int], Awaitable[list[Message]]], count: int | None
) -> list[Message]:
    """The default `get_model_messages`: pages backwards until ``count`` visible ones are read."""
    check_page(count, 0)
    if count == 0:
        return []
    kept: list[Message] = []
    offset = 0
    while count is None or len(kept) < count:
        chunk = await page(_PAGE, offset)
        kept.extend(m for m in reversed(chunk) if m.model_visible)
        if len(chunk) < _PAGE:
            break
        offset += _PAGE
    kept = kept if count is None else kept[:count]
    kept.reverse()
    return kept


class BlockingChatMemory(BlockingAdapter[AsyncChatMemory], ChatMemory):
    """The blocking `ChatMemory` over an `AsyncChatMemory` whose I/O never suspends (a store's
    one implementation driven by its blocking port)."""

    __slots__ = ()

    @property
    def conversation_id(self) -> str:
        """The conversation this memory holds."""
        return str(getattr(self._inner, "conversation_id", ""))

    add_message_if_absent = blocking(AsyncChatMemory.add_message_if_absent)
    add_messages_if_absent = blocking(AsyncChatMemory.add_messages_if_absent)
    get_messages = blocking(AsyncChatMemory.get_messages)
    get_model_messages = blocking(AsyncChatMemory.get_model_messages)
    get_message = blocking(AsyncChatMemory.get_message)
    update_message = blocking(AsyncChatMemory.update_message)
    delete_message = blocking(AsyncChatMemory.delete_message)
    message_count = blocking(AsyncChatMemory.message_count)
    get_first_messages = blocking(AsyncChatMemory.get_first_messages)
    clear = blocking(AsyncChatMemory.clear)

    def fenced(self, fence: Fence) -> ChatMemory:
        return BlockingChatMemory(self._inner.fenced(fence))


class AwaitableChatMemory(AwaitableAdapter[ChatMemory], AsyncChatMemory):
    """An `AsyncChatMemory` over a `ChatMemory` whose calls do not block (an in-process memory),
    or that the caller accepts to block on."""

    __slots__ = ()

    add_message_if_absent = awaitable(ChatMemory.add_message_if_absent)
    add_messages_if_absent = awaitable(ChatMemory.add_messages_if_absent)
    get_messages = awaitable(ChatMemory.get_messages)
    get_model_messages = awaitable(ChatMemory.get_model_messages)
    get_message = awaitable(ChatMemory.get_message)
    update_message = awaitable(ChatMemory.update_message)
    delete_message = awaitable(ChatMemory.delete_message)
    message_count = awaitable(ChatMemory.message_count)
    get_first_messages = awaitable(ChatMemory.get_first_messages)
    clear = awaitable(ChatMemory.clear)

    def fenced(self, fence: Fence) -> AsyncChatMemory:
        inner = self._inner.fenced(fence)
        return self if inner is self._inner else AwaitableChatMemory(inner)


def awaitable_memory(memory: ChatMemory) -> AsyncChatMemory:
    """``memory`` as an `AsyncChatMemory` for the library's one implementation: a blocking
    store memory gives back its own implementation, any other memory is wrapped."""
    return implementation(memory, AwaitableChatMemory)


class InMemoryChatMemory(ChatMemory):
    """The plain in-process chat memory; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: list[Message] = []
        self._positions: dict[str, int] = {}
        self._visible: list[int] = []  # positions of model-visible messages

    def add_message_if_absent(self, message: Message) -> bool:
        check_message(message)
        with self._lock:
            return self._append(message)

    def _append(self, message: Message) -> bool:
        if message.message_id in self._positions:
            return False
        self._positions[message.message_id] = len(self._messages)
        if message.model_visible:
            self._visible.append(len(self._messages))
        self._messages.append(message)
        return True

    def add_messages_if_absent(self, messages: Sequence[Message]) -> list[bool]:
        batch = check_messages(messages)
        with self._lock:
            return [self._append(message) for message in batch]

    def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        check_page(count, offset)
        with self._lock:
            end = max(len(self._messages) - offset, 0)
            start = 0 if count is None else max(end - count, 0)
            return self._messages[start:end]

    def get_model_messages(self, count: int | None = None) -> list[Message]:
        check_page(count, 0)
        with self._lock:
            positions = self._visible if count is None else self._visible[-count:] if count else []
            return [self._messages[p] for p in positions]

    def get_message(self, message_id: str) -> Message | None:
        check_identifier(message_id, "message_id")
        with self._lock:
            position = self._positions.get(message_id)
            return None if position is None else self._messages[position]

    def update_message(self, message: Message, expected_version: int) -> Message:
        check_message(message)
        check_version(expected_version)
        with self._lock:
            position = self._positions.get(message.message_id)
            if position is None:
                raise MessageNotFoundError(f"no stored message {message.message_id!r}")
            stored = self._messages[position]
            check_update(stored, message)
            if stored.version != expected_version:
                raise VersionConflictError(
                    f"message {message.message_id!r} is at version {stored.version}, "
                    f"not {expected_version}"
                )
            updated = replace(message, version=expected_version + 1)
            self._messages[position] = updated
            return updated

    def delete_message(self, message_id: str, expected_version: int) -> None:
        """Removes the message and moves the positions after it up one (constant time for the
        newest message, what a session's ``pop_item`` deletes)."""
        check_identifier(message_id, "message_id")
        check_version(expected_version)
        with self._lock:
            position = self._positions.get(message_id)
            if position is None:
                raise MessageNotFoundError(f"no stored message {message_id!r}")
            stored = self._messages[position]
            if stored.version != expected_version:
                raise VersionConflictError(
                    f"message {message_id!r} is at version {stored.version}, not {expected_version}"
                )
            del self._messages[position]
            del self._positions[message_id]
            for later in self._messages[position:]:
                self._positions[later.message_id] -= 1
            cut = bisect_left(self._visible, position)
            after = self._visible[cut:]
            if after and after[0] == position:
                after = after[1:]
            self._visible[cut:] = [p - 1 for p in after]

    def get_first_messages(self, count: int) -> list[Message]:
        check_first(count)
        with self._lock:
            return self._messages[:count]

    def message_count(self) -> int:
        with self._lock:
            return len(self._messages)

    def clear(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        """Forget every message (the caller holds the lock)."""
        self._messages.clear()
        self._positions.clear()
        self._visible.clear()
