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

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentctx_fast.messages import AiMessage, Message

ScriptedReply = AiMessage | Callable[[Sequence[Message], Sequence[Any]], AiMessage]
"""A canned reply, or a function of the call's messages and tools that makes one."""


class ScriptExhaustedError(RuntimeError):
    """The scripted model was called more often than it has replies."""


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One recorded call: the window the model was sent and the tools it was offered."""

    messages: tuple[Message, ...]
    tools: tuple[Any, ...]


class ScriptedChatModel:
    """Replays ``replies`` in order (``cycle=True`` starts over when they run out).

    A reply may be an `AiMessage` or a callable ``(messages, tools) -> AiMessage``; an
    exception instance in the script is raised instead, to script a failing model.
    """

    def __init__(
        self, replies: Iterable[ScriptedReply | BaseException], *, cycle: bool = False
    ) -> None:
        self._replies = list(replies)
        self._cycle = cycle
        self._next = 0
        self._lock = threading.Lock()
        self.calls: list[ScriptedCall] = []

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
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
