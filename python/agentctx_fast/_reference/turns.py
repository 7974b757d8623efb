"""Turn segmentation (SPEC §4), forward for whole histories and backward for windows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from agentctx_fast.errors import InvalidMessageTypeError
from agentctx_fast.messages import AiMessage, Message, ToolMessage, UserMessage


def check_sequence(messages: object) -> Sequence[object]:
    """``messages`` itself, or a typed error when it is not a sequence (a list or a tuple)."""
    if not isinstance(messages, Sequence):
        raise InvalidMessageTypeError(
            f"messages must be a sequence of Message, got {type(messages).__name__}"
        )
    return messages


def check_message(messages: Sequence[object], index: int) -> Message:
    """``messages[index]``, or a typed error naming the index when it is not a message."""
    message = messages[index]
    if not isinstance(message, Message):
        raise InvalidMessageTypeError(
            f"messages[{index}] is not a Message: got {type(message).__name__}"
        )
    return message


def turn_starts(messages: Sequence[object]) -> list[int]:
    """Index of the first message of every turn, oldest first.

    A ``UserMessage`` starts a turn unless a turn is already open and the previous model-visible
    message carries the same (non-None) ``turn_id``.
    """
    starts: list[int] = []
    previous_visible: Message | None = None
    for index in range(len(messages)):
        message = check_message(messages, index)
        if isinstance(message, UserMessage):
            continues = (
                bool(starts)
                and message.turn_id is not None
                and previous_visible is not None
                and previous_visible.turn_id == message.turn_id
            )
            if not continues:
                starts.append(index)
        if message.model_visible:
            previous_visible = message
    return starts


def turns_backward(messages: Sequence[object]) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of every turn, newest first, reading only as far back as it is pulled.

    Gives the same turns as `turn_starts`: a user message's start is decided when the previous
    visible message is read, and a run of continuations that reaches the beginning of the list
    starts at its earliest user message.
    """
    end = len(messages)
    pending_user = -1  # a user message whose start is undecided until the previous visible one
    earliest_user = -1  # the earliest user message of the open turn, decided a continuation
    for index in range(len(messages) - 1, -1, -1):
        message = check_message(messages, index)
        if not message.model_visible:
            continue
        if pending_user >= 0:
            user = messages[pending_user]
            assert isinstance(user, UserMessage)
            if user.turn_id is not None and message.turn_id == user.turn_id:
                earliest_user = pending_user
            else:
                yield pending_user, end
                end = pending_user
                earliest_user = -1
            pending_user = -1
        if isinstance(message, UserMessage):
            pending_user = index
    if pending_user >= 0:
        yield pending_user, end
    elif earliest_user >= 0:
        yield earliest_user, end


def visible_messages(messages: Sequence[object], start: int, end: int) -> list[Message]:
    """The model-visible messages of ``messages[start:end]`` (already type-checked)."""
    return [m for m in messages[start:end] if isinstance(m, Message) and m.model_visible]


def inferred_completed(turn: Sequence[Message], has_missing_result: bool) -> bool:
    """A turn is complete when it ends with a final answer and every tool call has its result."""
    visible = [m for m in turn if m.model_visible]
    if not visible or has_missing_result:
        return False
    last = visible[-1]
    return isinstance(last, AiMessage) and last.has_final_text


def has_tool_calls(turn: Sequence[Message]) -> bool:
    """True when any AI message of the turn calls a tool (or any tool result is present)."""
    return any(
        (isinstance(m, AiMessage) and m.tool_calls) or isinstance(m, ToolMessage) for m in turn
    )
