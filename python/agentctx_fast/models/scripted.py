"""`ScriptedChatModel`: a chat model that replays canned replies, for tests and the demo.

It is not a model: it returns the replies it was given, in order, and records every call.

>>> from agentctx_fast import AiMessage, UserMessage
>>> model = ScriptedChatModel([AiMessage("hello"), AiMessage("bye")])
>>> model.chat([UserMessage("hi")], ()).text
'hello'
>>> len(model.calls), model.calls[0].messages[0].text
(1, 'hi')
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentctx_fast.core.messages import AiMessage, Message

ScriptedReply = AiMessage | Callable[[Sequence[Message], Sequence[Any]], AiMessage]
"""A canned reply, or a function of the call's messages and tools that makes one."""


class ScriptExhaustedError(RuntimeError):
    """The scripted model was called more often than it has replies."""


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One recorded call: the window the model was sent and the tools it was offered."""

    messages: tuple[Message, ...]
    tools: tuple[Any, ...]


class _Script:
    """The replies of a scripted model and the calls it was given."""

    def __init__(
        self, replies: Iterable[ScriptedReply | BaseException], *, cycle: bool = False
    ) -> None:
        self._replies = list(replies)
        self._cycle = cycle
        self._next = 0
        self._lock = threading.Lock()
        self.calls: list[ScriptedCall] = []

    def _reply(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        with self._lock:
            self.calls.append(ScriptedCall(tuple(messages), tuple(tools)))
            if self._next >= len(self._replies):
                if not self._cycle or not self._replies:
                    raise ScriptExhaustedError(
                        f"scripted model has {len(self._replies)} replies and was called again"
                    )
                self._next = 0
            reply = self._replies[self._next]
            self._next += 1
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, AiMessage):
            return reply
        return reply(messages, tools)

    @property
    def remaining(self) -> int:
        """Replies not yet used."""
        with self._lock:
            return len(self._replies) - self._next


class ScriptedChatModel(_Script):
    """Replays ``replies`` in order (``cycle=True`` starts over when they run out).

    A reply may be an `AiMessage` or a callable ``(messages, tools) -> AiMessage``; an
    exception instance in the script is raised instead, to script a failing model.
    """

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        """The next scripted reply."""
        return self._reply(messages, tools)


class AsyncScriptedChatModel(_Script):
    """`ScriptedChatModel` as an async, streaming model: ``await chat(...)``, and
    ``stream(...)``, which yields the reply's text word by word and then the reply.
    ``delay`` seconds are awaited before each reply, as a remote model would take.

    >>> import asyncio
    >>> model = AsyncScriptedChatModel([AiMessage("Hello there!")])
    >>> async def main() -> list[object]:
    ...     return [item async for item in model.stream([], ())]
    >>> [getattr(item, "text", item) for item in asyncio.run(main())]
    ['Hello ', 'there!', 'Hello there!']
    """

    def __init__(
        self,
        replies: Iterable[ScriptedReply | BaseException],
        *,
        cycle: bool = False,
        delay: float = 0.0,
    ) -> None:
        super().__init__(replies, cycle=cycle)
        self._delay = delay

    async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        """The next scripted reply, after ``delay`` seconds."""
        if self._delay:
            await asyncio.sleep(self._delay)
        return self._reply(messages, tools)

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[Any]
    ) -> AsyncIterator[str | AiMessage]:
        """The next scripted reply's text in word-sized deltas, then the reply itself."""
        reply = await self.chat(messages, tools)
        for delta in re.findall(r"\S+\s*|\s+", reply.text or ""):
            yield delta
        yield reply
