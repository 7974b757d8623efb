"""Context compressors: callables that shape the older part of a model window.

A compressor takes a list of messages and returns the list to send instead. It never mutates
its input, and never writes memory, turns or snapshots. This module's functions build them,
with no model call (`identity`, `compact_completed_turns`, `text_excerpt`, `chain`) or with a
summary model (`model`, `per_message_model`, `incremental`).

>>> from agentctx_fast import AiMessage, UserMessage
>>> history = [UserMessage("where is ORD-7?", message_id="u1"),
...            AiMessage("ORD-7 has shipped", message_id="a1")]
>>> excerpt = text_excerpt(73)(history)
>>> print(excerpt[0].text)
Excerpt of the earlier conversation:
…ORD-7?
assistant: ORD-7 has shipped
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import replace

from agentctx_fast.compression import _summary
from agentctx_fast.compression._summary import (
    DATA_CLOSE,
    DATA_OPEN,
    PER_MESSAGE_PROMPT_EN,
    PER_MESSAGE_PROMPT_ZH,
    SUMMARY_PROMPT_EN,
    SUMMARY_PROMPT_ZH,
    check_messages,
    find_identifiers,
)
from agentctx_fast.core.messages import (
    AiMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from agentctx_fast.core.turns import segment_turns
from agentctx_fast.core.window import Compressor
from agentctx_fast.errors import (
    CompressorOutputError,
    CoveredMessageNotFoundError,
    InvalidArgumentError,
)
from agentctx_fast.models.protocol import ChatModel

__all__ = [
    "DATA_CLOSE",
    "DATA_OPEN",
    "EXCERPT_HEADER",
    "PER_MESSAGE_PROMPT_EN",
    "PER_MESSAGE_PROMPT_ZH",
    "SUMMARY_PROMPT_EN",
    "SUMMARY_PROMPT_ZH",
    "IncrementalCompressor",
    "chain",
    "compact_completed_turns",
    "find_identifiers",
    "identity",
    "incremental",
    "model",
    "per_message_model",
    "text_excerpt",
]

EXCERPT_HEADER = "Excerpt of the earlier conversation:\n"
"""First line of a `text_excerpt` summary (counted in its limit)."""


def identity() -> Compressor:
    """A compressor returning a copy of its input.

    >>> from agentctx_fast import UserMessage
    >>> history = [UserMessage("hi", message_id="u1")]
    >>> out = identity()(history)
    >>> out == history, out is history
    (True, False)
    """

    def identity(messages: list[Message]) -> list[Message]:
        return check_messages(messages)

    return identity


def compact_completed_turns() -> Compressor:
    """Each completed tool turn becomes ``[its first UserMessage, its final AiMessage]``.

    A turn is compacted when it contains tool calls, every call has its result and it ends
    with a final text answer; other turns, and messages before the first
    user message, pass through as they are.
    """
    return _compact_completed_turns


def text_excerpt(max_characters: int) -> Compressor:
    """The history's text as one summary `UserMessage` of at most ``max_characters``.

    Each model-visible message becomes a line (``user: …``, ``assistant: …``,
    ``assistant called name(args)``, ``tool name: …``) under `EXCERPT_HEADER`. When the text
    does not fit, the most recent part is kept and the cut is marked by a leading ``…``.
    The message id is derived from the last message id and a hash of the content.

    >>> from agentctx_fast import UserMessage
    >>> [m] = text_excerpt(200)([UserMessage("hi", message_id="u")])
    >>> m.text
    'Excerpt of the earlier conversation:\\nuser: hi'
    >>> m.message_id.startswith("excerpt:u:")
    True
    """
    if (
        isinstance(max_characters, bool)
        or not isinstance(max_characters, int)
        or max_characters < 1
    ):
        raise InvalidArgumentError(f"max_characters must be an int >= 1, got {max_characters!r}")

    def text_excerpt(messages: list[Message]) -> list[Message]:
        return _excerpt(check_messages(messages), max_characters)

    return text_excerpt


def chain(*compressors: Compressor) -> Compressor:
    """The compressors applied left to right, each on the previous one's output.

    >>> from agentctx_fast import UserMessage
    >>> len(chain(compact_completed_turns(), text_excerpt(100))([UserMessage("hi")]))
    1
    """
    for index, compressor in enumerate(compressors):
        if not callable(compressor):
            raise InvalidArgumentError(
                f"chain: compressors[{index}] is not callable: {type(compressor).__name__}"
            )
    steps = tuple(compressors)

    def chained(messages: list[Message]) -> list[Message]:
        current = check_messages(messages)
        for index, step in enumerate(steps):
            output: object = step(list(current))
            if not isinstance(output, (list, tuple)):
                raise CompressorOutputError(
                    f"chain: compressors[{index}] must return a list of messages, "
                    f"got {type(output).__name__}"
                )
            current = list(output)
        return current

    return chained


def model(
    summary_model: ChatModel, prompt: str | None = None, *, require_identifiers: bool = True
) -> Compressor:
    """One summary-model call over the input, wrapped as a ``UserMessage`` + ``AiMessage``.

    The model gets ``[SystemMessage(prompt), UserMessage(transcript)]`` and no tools; tool
    output and tool-call arguments are quoted as untrusted data. ``prompt=None`` picks
    `SUMMARY_PROMPT_ZH` when the input is mostly Chinese, else `SUMMARY_PROMPT_EN`. With
    ``require_identifiers``, identifiers (see `find_identifiers`) the summary lost are named
    back to the model in one more call. Any failure raises `CompressionError`.
    """
    model = _summary.check_model(summary_model)
    _summary.check_options(prompt, require_identifiers)

    def summarise(messages: list[Message]) -> list[Message]:
        history = check_messages(messages)
        visible = [m for m in history if m.model_visible]
        if not visible:
            return []
        text = _summary.input_text(visible)
        language = _summary.language_of(text)
        request: list[Message] = [
            SystemMessage(_summary.system_prompt(prompt, language, per_message=False)),
            UserMessage(_summary.summary_request("", visible, language)),
        ]
        required = find_identifiers(text) if require_identifiers else None
        summary = _ask_summary(model, request, required, language)
        return _summary.summary_pair(summary, language, history)

    return summarise


def per_message_model(
    summary_model: ChatModel, prompt: str | None = None, *, require_identifiers: bool = True
) -> Compressor:
    """One model call summarising each user message and each AI reply without tool calls.

    The model answers ``[{"messageId": ..., "summary": ...}]`` (a ```json fence is
    tolerated). Summarised messages keep their class, ``message_id``, ``metadata``,
    ``turn_id`` and ``version``; a multimodal user message becomes plain text. AI messages
    with tool calls, tool results, system and UI messages pass through unchanged and are
    not sent. A malformed reply (bad JSON, a missing, unknown or repeated id) raises
    `CompressionError` and nothing is replaced. With ``require_identifiers``, each
    message's identifiers must be in its own summary.
    """
    model = _summary.check_model(summary_model)
    _summary.check_options(prompt, require_identifiers)

    def summarise(messages: list[Message]) -> list[Message]:
        history = check_messages(messages)
        targets = [m for m in history if _summarisable(m)]
        if not targets:
            return history
        summaries = _ask_per_message(model, prompt, targets, require_identifiers)
        chosen = {id(m) for m in targets}
        return [
            _with_summary(m, summaries[m.message_id]) if id(m) in chosen else m for m in history
        ]

    return summarise


def incremental(
    summary_model: ChatModel, prompt: str | None = None, *, require_identifiers: bool = True
) -> IncrementalCompressor:
    """A compressor keeping one running summary, updated from the newer messages only."""
    return IncrementalCompressor(summary_model, prompt, require_identifiers=require_identifiers)


class IncrementalCompressor:
    """Keeps one running summary of a conversation and extends it with the newer messages.

    Where the summary stopped is ``covered_until_message_id``; a call finds it by message id in
    the history it is given and sends the model only the existing summary and the messages after
    it. The same history twice makes no second model call. An input that starts with this
    compressor's own summary (what a compression coordinator passes: summary + pending
    messages) stands for the covered history, so only the messages after it are new. Persist
    ``summary`` and
    ``covered_until_message_id`` per conversation and `restore` them later. Thread-safe: calls
    on one instance run one at a time, and a failed call keeps the previous state.
    """

    def __init__(
        self,
        summary_model: ChatModel,
        prompt: str | None = None,
        *,
        require_identifiers: bool = True,
    ) -> None:
        self._model = _summary.check_model(summary_model)
        _summary.check_options(prompt, require_identifiers)
        self._prompt = prompt
        self._require_identifiers = require_identifiers
        self._lock = threading.Lock()
        self._summary: tuple[Message, ...] = ()
        self._covered: str | None = None
        self._model_calls = 0
        self._last_input_chars = 0

    def fork(self) -> IncrementalCompressor:
        """A compressor with the same model and options and no summary yet: the runner gives
        each conversation its own, so one agent never mixes conversations."""
        return IncrementalCompressor(
            self._model, self._prompt, require_identifiers=self._require_identifiers
        )

    @property
    def summary(self) -> tuple[Message, ...]:
        """The current summary pair; ``()`` before the first summary."""
        return self._summary

    @property
    def covered_until_message_id(self) -> str | None:
        """Id of the last message the summary covers; None before the first summary."""
        return self._covered

    @property
    def model_calls(self) -> int:
        """Summary-model calls made so far (retries and failed calls included)."""
        return self._model_calls

    @property
    def last_input_chars(self) -> int:
        """Characters of text in the last model input (0 before the first call)."""
        return self._last_input_chars

    def restore(self, summary: Sequence[Message], covered_until_message_id: str | None) -> None:
        """Replace the state with a persisted ``summary`` and ``covered_until_message_id``."""
        messages = check_messages(summary, "summary")
        if covered_until_message_id is not None and not isinstance(covered_until_message_id, str):
            raise InvalidArgumentError(
                f"covered_until_message_id must be a str or None, "
                f"got {type(covered_until_message_id).__name__}"
            )
        with self._lock:
            self._summary = tuple(messages)
            self._covered = covered_until_message_id

    def __call__(self, messages: list[Message]) -> list[Message]:
        """The summary of ``messages``, updated with the ones after the covered message."""
        history = check_messages(messages)
        with self._lock:
            new = [m for m in self._after_covered(history) if m.model_visible]
            if not new:
                return list(self._summary)
            summary = self._summarise(new)
            self._summary = tuple(summary)
            self._covered = history[-1].message_id
            return summary

    def _after_covered(self, history: list[Message]) -> list[Message]:
        if self._covered is None:
            return history
        for index in range(len(history) - 1, -1, -1):
            if history[index].message_id == self._covered:
                return history[index + 1 :]
        # A coordinator passes its stored summary + the pending messages: the summary
        # this compressor produced stands for the covered prefix, which is not in the input.
        if self._starts_with_summary(history):
            return history[len(self._summary) :]
        raise CoveredMessageNotFoundError(
            f"covered message {self._covered!r} is not in the history of {len(history)} "
            "message(s); restore the compression state or start a new summary"
        )

    def _starts_with_summary(self, history: list[Message]) -> bool:
        # Summary ids are digests of the inputs and the summary text, so matching them (and the
        # class) identifies this compressor's own summary, not a look-alike.
        summary = self._summary
        return (
            bool(summary)
            and len(history) >= len(summary)
            and all(
                type(mine) is type(given) and mine.message_id == given.message_id
                for mine, given in zip(summary, history, strict=False)
            )
        )

    def _summarise(self, new: list[Message]) -> list[Message]:
        existing = _summary.summary_text(self._summary)
        text = "\n".join([existing, _summary.input_text(new)])
        language = _summary.language_of(text)
        request: list[Message] = [
            SystemMessage(_summary.system_prompt(self._prompt, language, per_message=False)),
            UserMessage(_summary.summary_request(existing, new, language)),
        ]
        required = find_identifiers(text) if self._require_identifiers else None
        summary = _ask_summary(self._model, request, required, language, self._observe)
        return _summary.summary_pair(summary, language, [*self._summary, *new])

    def _observe(self, request: list[Message]) -> None:
        self._model_calls += 1
        self._last_input_chars = _summary.input_chars(request)


# -- helpers -----------------------------------------------------------------------------------


def _compact_completed_turns(messages: list[Message]) -> list[Message]:
    history = check_messages(messages)
    turns = segment_turns(history)
    if not len(turns):
        return history
    out = history[: int(turns.starts[0])]
    bounds = zip(turns.starts.tolist(), turns.ends.tolist(), turns.completed.tolist(), strict=True)
    for start, end, completed in bounds:
        turn = history[start:end]
        if completed and _has_tool_calls(turn):
            final = next(m for m in reversed(turn) if m.model_visible)
            out.extend((turn[0], final))
        else:
            out.extend(turn)
    return out


def _has_tool_calls(turn: Sequence[Message]) -> bool:
    return any(
        (isinstance(m, AiMessage) and m.tool_calls) or isinstance(m, ToolMessage) for m in turn
    )


def _excerpt_lines(messages: Sequence[Message]) -> list[str]:
    lines: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage):
            text = _summary.user_text(message)
            lines.extend([f"user: {text}"] if text else [])
        elif isinstance(message, AiMessage):
            lines.extend([f"assistant: {message.text}"] if message.text else [])
            lines.extend(f"assistant called {c.name}({c.arguments})" for c in message.tool_calls)
        elif isinstance(message, ToolMessage):
            lines.append(f"tool {message.tool_name or message.tool_call_id}: {message.text}")
        elif isinstance(message, SystemMessage) and message.text:
            lines.append(f"system: {message.text}")
    return lines


def _excerpt(messages: list[Message], max_characters: int) -> list[Message]:
    visible = [m for m in messages if m.model_visible]
    body = "\n".join(_excerpt_lines(visible))
    if not body:
        return []
    content = EXCERPT_HEADER + body
    if len(content) > max_characters:
        room = max_characters - len(EXCERPT_HEADER) - 1
        if room >= 1:
            content = EXCERPT_HEADER + "…" + body[-room:]
        else:  # too small for the header: the mark and the most recent characters only
            content = "…" + body[len(body) - (max_characters - 1) :]
    key = hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return [UserMessage(content, message_id=f"excerpt:{visible[-1].message_id}:{key}")]


def _ask_summary(
    model: ChatModel,
    request: list[Message],
    required: list[str] | None,
    language: str,
    observe: _summary.Observer | None = None,
) -> str:
    def lost(summary: str) -> list[str]:
        return _summary.missing_identifiers(required or (), summary)

    return _summary.ask(
        model,
        request,
        str.strip,
        lost if required else None,
        lambda missing: _summary.retry_request(language, missing, per_message=False),
        observe,
    )


def _summarisable(message: Message) -> bool:
    if isinstance(message, AiMessage) and message.tool_calls:
        return False
    return isinstance(message, (UserMessage, AiMessage)) and bool(_summary.text_of(message).strip())


def _ask_per_message(
    model: ChatModel, prompt: str | None, targets: list[Message], require_identifiers: bool
) -> dict[str, str]:
    ids = [m.message_id for m in targets]
    if len(set(ids)) != len(ids):
        repeated = next(i for i in ids if ids.count(i) > 1)
        raise InvalidArgumentError(
            f"per_message_model: message id {repeated!r} appears more than once"
        )
    language = _summary.language_of(_summary.input_text(targets))
    request: list[Message] = [
        SystemMessage(_summary.system_prompt(prompt, language, per_message=True)),
        UserMessage(_summary.per_message_request(targets, language)),
    ]
    required = {m.message_id: find_identifiers(_summary.text_of(m)) for m in targets}

    def lost(summaries: dict[str, str]) -> list[str]:
        items = []
        for message_id, identifiers in required.items():
            missing = _summary.missing_identifiers(identifiers, summaries[message_id])
            if missing:
                items.append(f"{', '.join(missing)} (message {message_id!r})")
        return items

    return _summary.ask(
        model,
        request,
        lambda reply: _summary.parse_per_message(reply, ids),
        lost if require_identifiers else None,
        lambda missing: _summary.retry_request(language, missing, per_message=True),
    )


def _with_summary(message: Message, summary: str) -> Message:
    if isinstance(message, UserMessage):
        return replace(message, content=summary)
    assert isinstance(message, AiMessage)  # only user and AI messages are summarised
    return replace(message, text=summary)
