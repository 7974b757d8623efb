"""Scripted summary models for compressor tests: canned replies, every call recorded."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from agentctx_fast import AiMessage, Message, SystemMessage, UserMessage
from agentctx_fast.compression.compressors import DATA_CLOSE, DATA_OPEN, find_identifiers


class Raw:
    """A reply returned as it is (not wrapped in an AiMessage), to test bad replies."""

    def __init__(self, value: object) -> None:
        self.value = value


Reply = str | AiMessage | BaseException | Raw
ReplyFunction = Callable[[list[Message]], Reply]


class ScriptedSummaryModel:
    """A `ChatModel` double replying from a list of canned replies or a function of the input.

    A ``str`` reply becomes ``AiMessage(text)``; an exception is raised; `Raw` is returned
    unwrapped. Every call's messages and tools are recorded in ``calls``.
    """

    def __init__(self, replies: Sequence[Reply] | ReplyFunction = ()) -> None:
        self.calls: list[tuple[list[Message], tuple[Any, ...]]] = []
        self._function = replies if callable(replies) else None
        self._replies = [] if callable(replies) else list(replies)

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> Any:
        self.calls.append((list(messages), tuple(tools)))
        if self._function is not None:
            reply = self._function(list(messages))
        elif self._replies:
            reply = self._replies.pop(0)
        else:
            raise AssertionError("the scripted summary model has no reply left")
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Raw):
            return reply.value
        return AiMessage(reply) if isinstance(reply, str) else reply

    @property
    def inputs(self) -> list[list[Message]]:
        """The messages of every call, in call order."""
        return [messages for messages, _ in self.calls]

    def request_text(self, call: int = -1) -> str:
        """The text of the first user message of call ``call`` (the transcript)."""
        return next(m.text for m in self.inputs[call] if isinstance(m, UserMessage))

    def system_text(self, call: int = -1) -> str:
        """The system prompt of call ``call``."""
        first = self.inputs[call][0]
        assert isinstance(first, SystemMessage)
        return first.text


def echo_identifiers(messages: list[Message]) -> str:
    """A summary naming every identifier of the request, so no retry is needed."""
    request = "\n".join(m.text for m in messages if isinstance(m, UserMessage))
    return "Summary. Identifiers: " + " ".join(find_identifiers(request))


_BLOCK = re.compile(
    r'messageId: ("(?:[^"\\]|\\.)*") \((?:user|assistant)\)\n'
    + re.escape(DATA_OPEN)
    + r"\n(.*?)\n"
    + re.escape(DATA_CLOSE),
    re.S,
)


def requested_blocks(request: str) -> dict[str, str]:
    """``{message_id: quoted text}`` of a per-message request."""
    return {json.loads(m.group(1)): m.group(2) for m in _BLOCK.finditer(request)}


def per_message_echo(messages: list[Message]) -> str:
    """A valid per-message reply: each summary keeps its own message's identifiers."""
    request = next(m.text for m in messages if isinstance(m, UserMessage))
    return json_reply(
        {
            message_id: " ".join(["short", *find_identifiers(text)])
            for message_id, text in requested_blocks(request).items()
        }
    )


def json_reply(summaries: dict[str, str]) -> str:
    """A per-message reply as the model should send it."""
    return json.dumps([{"messageId": k, "summary": v} for k, v in summaries.items()])


def any_summary(messages: list[Message]) -> str:
    """Answers both kinds of request: a JSON array for per-message prompts, else a summary."""
    system = messages[0].text if isinstance(messages[0], SystemMessage) else ""
    if "messageId" in system:
        return per_message_echo(messages)
    return echo_identifiers(messages)
