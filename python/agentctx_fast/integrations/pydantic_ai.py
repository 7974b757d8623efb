"""PydanticAI v2 interoperability (extra ``pydantic-ai``): the model window as a capability.

`AgentCtxHistoryProcessor(**window_options)` windows what each model request sees:

>>> from pydantic_ai import Agent
>>> agent = Agent("test", system_prompt="Be brief.",
...               capabilities=[AgentCtxHistoryProcessor(max_attached_turns=4)])

On every model request it sends the model the window of the run's messages, as PydanticAI
messages: the system prompt kept (the first request's ``SystemPromptPart``s), whole turns, a
``ToolCallPart`` never without its ``ToolReturnPart`` (or retry), within the window's limits.
Only the request is windowed: the run's history (``result.all_messages()``) keeps everything.
The instance is also a plain history processor (``processor(messages) -> messages``): passed
to ``ProcessHistory(processor)`` it trims the run's history itself, as ``ProcessHistory`` does.

How PydanticAI messages are read (to classify and count; the window returns the caller's own
objects): a ``ModelResponse`` is one AI message (``TextPart``s its text, ``ToolCallPart``s its
tool calls, every other part, thinking, built-in tool calls and returns, files, one of its
provider items). A ``ModelRequest``'s parts are read one by one: a ``UserPromptPart`` is a user
message, a ``ToolReturnPart`` (or a legacy ``RetryPromptPart`` naming a tool) a tool result,
a ``SystemPromptPart`` a system message, and any other part (retry feedback, compaction
summaries, capability parts) a user-channel message of the turn it is in. A turn is a run: a
``UserPromptPart`` starts one unless it is from the run of the turn's first prompt (a steering
message); without ``run_id``s every ``UserPromptPart`` starts one. Media in a prompt counts as a
short marker, not its size; a request's ``instructions`` are sent with every request and not
counted. A history with no user prompt has no turn to window: it is sent as it is.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from agentctx_fast._extras import missing_dependency
from agentctx_fast.core.messages import (
    AiMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agentctx_fast.core.window import WindowOptions, build_window
from agentctx_fast.errors import AgentCtxError, InvalidArgumentError, InvalidMessageTypeError
from agentctx_fast.integrations._options import checked_window_options, turns_reach

try:
    from pydantic_ai import messages as pm
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import RunContext
except ImportError as error:  # pragma: no cover - exercised in a subprocess test
    raise missing_dependency("pydantic-ai", error) from error

__all__ = ["AgentCtxHistoryProcessor", "window_model_messages"]

T = TypeVar("T")
Where = tuple[int, int]
"""(index of a PydanticAI message, index of its part)."""


class _Reading:
    """PydanticAI messages read as ours: each of ours with the parts it stands for."""

    def __init__(self, history: Sequence[Any], start: int = 0) -> None:
        """Reads ``history[start:]`` (``start`` a turn's first request, see `_reach`) and the
        leading system prompt before it."""
        self.messages: list[Message] = []
        self.parts: dict[str, tuple[Message, tuple[Where, ...]]] = {}
        self.tool_names: dict[str, str] = {}
        self._turn: str | None = None
        self._turn_run: str | None = None
        self._turns = 0
        self._system: list[tuple[Where, str]] = []
        for index in range(start):  # before the reach: only the leading system prompt
            message = history[index]
            if isinstance(message, pm.ModelRequest) and not _named(
                index, self._leading_system, index, message
            ):
                # The turns before the reach: what is left of them is not sent. (When no turn
                # starts before it, the reach's request holds the first prompt, and its system
                # parts before that prompt are still the leading system prompt.)
                self._turn = "t0"
                break
        for index in range(start, len(history)):
            message = history[index]
            read = self._response if isinstance(message, pm.ModelResponse) else self._request
            _named(index, read, index, message)

    def _leading_system(self, index: int, message: Any) -> bool:
        """Takes the system prompts of a request before the first turn; False once a part
        that starts a turn is reached."""
        for j, part in enumerate(message.parts):
            if isinstance(part, pm.SystemPromptPart):
                self._system.append(((index, j), _system_text(part)))
            elif not isinstance(part, pm.ToolReturnPart | pm.RetryPromptPart):
                return False
        return True

    def _add(self, message: Message, where: tuple[Where, ...]) -> None:
        self.messages.append(message)
        self.parts[message.message_id] = (message, where)

    def _new_turn(self, run_id: str | None) -> None:
        self._turns += 1
        self._turn, self._turn_run = f"t{self._turns}", run_id
        if self._system:  # the leading system prompt: every system part before the first turn
            wheres, texts = zip(*self._system, strict=True)
            self._add(SystemMessage("\n\n".join(texts)), wheres)
            self._system = []

    def _response(self, index: int, message: Any) -> None:
        texts: list[str] = []
        calls: list[ToolCall] = []
        items: list[dict[str, Any]] = []
        for part in message.parts:
            if isinstance(part, pm.TextPart):
                texts.append(part.content)
            elif isinstance(part, pm.ToolCallPart):
                calls.append(ToolCall(part.tool_call_id, part.tool_name, part.args_as_json_str()))
                self.tool_names[part.tool_call_id] = part.tool_name
            else:  # thinking, built-in tool calls and returns, files: travel with the reply
                items.append({"part_kind": str(part.part_kind), "text": _part_text(part)})
        reply = AiMessage(
            "".join(texts) or None, tuple(calls), provider_items=tuple(items), turn_id=self._turn
        )
        self._add(reply, tuple((index, j) for j in range(len(message.parts))))

    def _in_turn_order(self, message: Any) -> list[tuple[int, Any]]:
        """The parts of a request in the order they are read: where a prompt starts a turn,
        the system and other parts before it are read after it (they come with the new
        prompt), the results before it before it (they close the previous turn's calls)."""
        parts = list(enumerate(message.parts))
        run_id = message.run_id
        if self._turn is None or (run_id is not None and run_id == self._turn_run):
            return parts
        first = next((j for j, part in parts if isinstance(part, pm.UserPromptPart)), None)
        if first is None:
            return parts
        results = pm.ToolReturnPart | pm.RetryPromptPart
        before = parts[:first]
        return [
            *(p for p in before if isinstance(p[1], results)),
            parts[first],
            *(p for p in before if not isinstance(p[1], results)),
            *parts[first + 1 :],
        ]

    def _request(self, index: int, message: Any) -> None:
        run_id = message.run_id
        for j, part in self._in_turn_order(message):
            ours: Message
            if isinstance(part, pm.SystemPromptPart):
                if self._turn is None:
                    self._system.append(((index, j), _system_text(part)))
                    continue
                ours = SystemMessage(part.content, turn_id=self._turn)
            elif isinstance(part, pm.UserPromptPart):
                if self._turn is None or run_id is None or run_id != self._turn_run:
                    self._new_turn(run_id)
                ours = UserMessage(_prompt_text(part.content), turn_id=self._turn)
            elif isinstance(part, pm.ToolReturnPart):
                ours = ToolMessage(
                    part.tool_call_id,
                    part.model_response_str(),
                    tool_name=part.tool_name,
                    is_error=part.outcome != "success",
                    turn_id=self._turn,
                )
            elif isinstance(part, pm.RetryPromptPart) and part.tool_name is not None:
                ours = ToolMessage(
                    part.tool_call_id,
                    part.model_response(),
                    tool_name=part.tool_name,
                    is_error=True,
                    turn_id=self._turn,
                )
            else:  # retry feedback, compaction, capability parts: user-channel text of the turn
                if self._turn is None:
                    self._new_turn(run_id)
                ours = UserMessage(_part_text(part), turn_id=self._turn)
            self._add(ours, ((index, j),))


def _named(index: int, read: Callable[..., T], *args: Any) -> T:
    """``read(*args)`` for ``messages[index]``, its errors naming the message: a message built
    with wrong types (a None part, a None text, arguments that are not JSON) is an
    `InvalidArgumentError`, not the TypeError its reading would hit."""
    where = f"messages[{index}]"
    try:
        return read(*args)
    except AgentCtxError as error:
        if str(error).startswith(where):
            raise
        raise type(error)(f"{where}: {error}") from None
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise InvalidArgumentError(f"{where}: malformed PydanticAI message: {error}") from None


def _system_text(part: Any) -> str:
    """A system prompt's text, checked where it is read (it is joined with the others when
    the first turn starts)."""
    if not isinstance(part.content, str):
        raise InvalidArgumentError(
            f"a SystemPromptPart's content must be a str, got {type(part.content).__name__}"
        )
    return str(part.content)


def _marker(media: Any) -> str:
    """A file, image or audio as text to count: a marker (its bytes are not what the model
    is charged for)."""
    return f"[{getattr(media, 'media_type', None) or type(media).__name__}]"


def _prompt_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for item in content:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, pm.TextContent):
            texts.append(item.content)
        else:
            texts.append(_marker(item))
    return "\n".join(texts)


def _part_text(part: Any) -> str:
    """What a part shows the model, as text to count."""
    for method in ("model_response_str", "model_response"):
        render = getattr(part, method, None)
        if callable(render):
            return str(render())
    if isinstance(part, pm.BaseToolCallPart):
        return f"{part.tool_name} {part.args_as_json_str()}"
    content = getattr(part, "content", None)
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if hasattr(content, "media_type"):  # a file the model made
        return _marker(content)
    return json.dumps(content, ensure_ascii=False, default=repr)


def _reach(history: Sequence[Any], options: WindowOptions) -> int:
    """The index of the request where the turns a window of ``options`` can attach begin
    (`turns_reach`): only the messages from there on (and the leading system prompt) are read.
    Checks that every item is a PydanticAI message."""
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if isinstance(message, pm.ModelResponse):
            continue
        if not isinstance(message, pm.ModelRequest):
            raise InvalidMessageTypeError(
                f"messages[{index}] is not a PydanticAI ModelRequest or ModelResponse: "
                f"got {type(message).__name__}"
            )
        if not isinstance(message.parts, list | tuple):
            raise InvalidArgumentError(
                f"messages[{index}]: parts must be a list, got {type(message.parts).__name__}"
            )
    return turns_reach(_turn_starts(history), options)


def _turn_starts(history: Sequence[Any]) -> Iterator[int]:
    """Where turns start, newest first, but for the first turn: a request with a prompt that
    does not continue the run of the prompt before it (`_Reading._request`)."""
    later: tuple[int, str | None] | None = None  # the latest prompt seen (scanning back)
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if not isinstance(message, pm.ModelRequest):
            continue
        for part in reversed(message.parts):
            if not isinstance(part, pm.UserPromptPart):
                continue
            if later is not None and (later[1] is None or later[1] != message.run_id):
                yield later[0]
            later = (index, message.run_id)


def window_model_messages(
    messages: Sequence[Any], options: WindowOptions | None = None, **window_options: Any
) -> list[Any]:
    """The window (`build_window` with ``options`` or ``window_options``) of PydanticAI
    messages, as PydanticAI messages; ``messages`` and its messages are never changed.

    Kept messages are the caller's own objects. A ``ModelRequest`` only part of which is kept
    (the first request's system prompt, when its user prompt's turn is left out) comes back as
    a copy of it (``dataclasses.replace``) holding the kept parts. What the window adds is new:
    a result closing a call left without one (a failed ``ToolReturnPart``), and a tool result
    replaced by a placeholder. A history with no user prompt (nothing to window: no turn) is
    returned as it is, in a new list. Anything but a ``ModelRequest`` or ``ModelResponse``
    raises `InvalidMessageTypeError` naming its index, and a message built with wrong types
    (a None part or text, arguments that are not JSON) `InvalidArgumentError` naming it.
    """
    checked = checked_window_options(options, window_options)
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidArgumentError(
            f"messages must be a list of PydanticAI messages, got {type(messages).__name__}"
        )
    reading = _Reading(messages, _reach(messages, checked))
    if not any(isinstance(message, UserMessage) for message in reading.messages):
        return list(messages)
    window = build_window(reading.messages, checked)
    return _rebuilt(messages, reading, window.messages)


def _rebuilt(history: Sequence[Any], reading: _Reading, window: Sequence[Message]) -> list[Any]:
    """The PydanticAI messages of ``window``: the caller's own where whole, a copy holding the
    kept parts where a request is kept in part, new requests for what the window made."""
    out: list[Any] = []
    group: int | None = None  # the PydanticAI message the parts in `kept` come from
    kept: list[tuple[int, Any]] = []
    made: list[Any] = []  # request parts the window made, for one new request

    def flush() -> None:
        nonlocal group, kept, made
        if group is not None:
            original = history[group]
            parts = [part for _, part in sorted(kept, key=lambda kept_part: kept_part[0])]
            whole = len(parts) == len(original.parts) and all(
                part is original.parts[j] for j, part in kept
            )
            out.append(original if whole else dataclasses.replace(original, parts=parts))
        if made:
            out.append(pm.ModelRequest(parts=made))
        group, kept, made = None, [], []

    for message in window:
        ours, wheres = reading.parts.get(message.message_id, (None, ()))
        if ours is not message and not isinstance(message, ToolMessage):
            ours = None  # a placeholder is a ToolMessage; anything else the window made is new
        if ours is None:  # made by the window (or a compressor)
            if group is not None:
                flush()
            if isinstance(message, AiMessage):
                flush()
                out.append(_response(message))
            else:
                made.append(_request_part(message, reading.tool_names))
            continue
        if made:
            flush()
        for index, j in wheres:
            if index != group:
                flush()
                group = index
            part = history[index].parts[j]
            if ours is not message and isinstance(message, ToolMessage):  # a placeholder
                part = dataclasses.replace(part, content=message.text)
            kept.append((j, part))
    flush()
    return out


def _request_part(message: Message, tool_names: dict[str, str]) -> Any:
    if isinstance(message, SystemMessage):
        return pm.SystemPromptPart(message.text)
    if isinstance(message, ToolMessage):
        name = message.tool_name or tool_names.get(message.tool_call_id, "unknown")
        return pm.ToolReturnPart(
            name,
            message.text,
            tool_call_id=message.tool_call_id,
            outcome="failed" if message.is_error else "success",
        )
    if isinstance(message, UserMessage):
        return pm.UserPromptPart(message.text)
    raise InvalidMessageTypeError(  # pragma: no cover - a window holds model-visible messages
        f"message {message.message_id!r} has no PydanticAI form"
    )


def _response(message: AiMessage) -> Any:
    parts: list[Any] = [pm.TextPart(message.text)] if message.text else []
    parts += [
        pm.ToolCallPart(call.name, call.arguments, tool_call_id=call.id)
        for call in message.tool_calls
    ]
    return pm.ModelResponse(parts=parts)


@dataclasses.dataclass(init=False, repr=False)
class AgentCtxHistoryProcessor(AbstractCapability[Any]):
    """A PydanticAI capability sending each model request the window of the run's messages.

    ``Agent(..., capabilities=[AgentCtxHistoryProcessor(max_attached_turns=6,
    max_attached_tokens=8000)])``; the options are `build_window`'s (or pass ``options=`` a
    `WindowOptions`), checked here. Only the request is windowed; the run's history keeps
    everything. Calling the instance on a message list returns its window
    (`window_model_messages`), so ``ProcessHistory(processor)`` trims the history instead.
    """

    options: WindowOptions = dataclasses.field(default_factory=WindowOptions)

    def __init__(self, options: WindowOptions | None = None, **window_options: Any) -> None:
        self.options = checked_window_options(options, window_options)

    def __call__(self, messages: list[pm.ModelMessage]) -> list[pm.ModelMessage]:
        """The window of ``messages``; a history processor for ``ProcessHistory``."""
        return window_model_messages(messages, self.options)

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Sends this request the window; the run's own history (``ctx.messages``) is left
        as it is."""
        request_context.messages = self(request_context.messages)
        return request_context

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """None: not part of agent specs (a window holds Python objects, e.g. an estimator)."""
        return None

    def __repr__(self) -> str:
        return f"AgentCtxHistoryProcessor({self.options!r})"
