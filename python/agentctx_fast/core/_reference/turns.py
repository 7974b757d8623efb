"""Turn segmentation (SPEC §4), forward for whole histories and backward for windows."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from agentctx_fast.core._reference.read import MessageView, read, type_name
from agentctx_fast.core.messages import KIND_AI, KIND_TOOL, KIND_USER
from agentctx_fast.errors import InvalidMessageTypeError


def check_sequence(messages: object) -> Sequence[object]:
    """``messages`` itself, or a typed error when it is not a sequence (a list or a tuple)."""
    if not isinstance(messages, Sequence):
        raise InvalidMessageTypeError(
            f"messages must be a sequence of Message, got {type_name(messages)}"
        )
    return messages


class History:
    """A caller's history, read by index, each index at most once: what a window saw of a
    message stays what it saw, whatever Python code (a status's ``__eq__``, an estimator)
    does to the list meanwhile. Its length is read once."""

    __slots__ = ("_read", "len", "messages")

    def __init__(self, messages: object) -> None:
        self.messages = check_sequence(messages)
        self.len = len(self.messages)
        self._read: dict[int, tuple[object, MessageView]] = {}

    def get(self, index: int) -> tuple[object, MessageView]:
        """``messages[index]`` and its view."""
        found = self._read.get(index)
        if found is None:
            found = read(self.messages, index)
            self._read[index] = found
        return found

    def view(self, index: int) -> MessageView:
        return self.get(index)[1]


def stream(messages: object, end: int | None = None) -> Iterator[MessageView]:
    """The views of ``messages[:end]``, each message read once, in order."""
    seq = check_sequence(messages)
    stop = len(seq) if end is None else min(end, len(seq))
    for index in range(stop):
        yield read(seq, index)[1]


def turn_starts(views: Iterable[MessageView]) -> list[int]:
    """Index of the first message of every turn, oldest first.

    A user message starts a turn unless a turn is already open and the previous model-visible
    message carries the same (non-None) ``turn_id``.
    """
    starts: list[int] = []
    previous_turn_id: str | None = None
    for index, message in enumerate(views):
        if message.kind == KIND_USER:
            continues = (
                bool(starts) and message.turn_id is not None and previous_turn_id == message.turn_id
            )
            if not continues:
                starts.append(index)
        if message.visible:
            previous_turn_id = message.turn_id
    return starts


def turns_backward(history: History) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of every turn, newest first, reading only as far back as it is pulled.

    Gives the same turns as `turn_starts`: a user message's start is decided when the previous
    visible message is read, and a run of continuations that reaches the beginning of the list
    starts at its earliest user message.
    """
    end = history.len
    pending_user = -1  # a user message whose start is undecided until the previous visible one
    pending_turn_id: str | None = None
    earliest_user = -1  # the earliest user message of the open turn, decided a continuation
    for index in range(history.len - 1, -1, -1):
        message = history.view(index)
        if not message.visible:
            continue
        if pending_user >= 0:
            if pending_turn_id is not None and message.turn_id == pending_turn_id:
                earliest_user = pending_user
            else:
                yield pending_user, end
                end = pending_user
                earliest_user = -1
            pending_user = -1
        if message.kind == KIND_USER:
            pending_user, pending_turn_id = index, message.turn_id
    if pending_user >= 0:
        yield pending_user, end
    elif earliest_user >= 0:
        yield earliest_user, end


Turn = list[tuple[int, object, MessageView]]  # (index in the history, message, view)


def visible_turn(history: History, start: int, end: int) -> Turn:
    """The model-visible messages of ``history[start:end]``."""
    turn: Turn = []
    for index in range(start, end):
        message, view = history.get(index)
        if view.visible:
            turn.append((index, message, view))
    return turn


def inferred_completed(turn: Turn, has_missing_result: bool) -> bool:
    """A turn is complete when it ends with a final answer and every tool call has its result."""
    if not turn or has_missing_result:
        return False
    last = turn[-1][2]
    return last.kind == KIND_AI and last.final_text


def has_tool_calls(turn: Turn) -> bool:
    """True when any AI message of the turn calls a tool (or any tool result is present)."""
    return any(
        (view.kind == KIND_AI and view.call_ids) or view.kind == KIND_TOOL for _, _, view in turn
    )
