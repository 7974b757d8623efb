"""`CompressionCoordinator` (SPEC §9) against every compression-state store.

Every test runs on a plain `InMemoryCompressionStateStore` and on the compression-state store
of each `AgentStore` (memory, SQLite, PostgreSQL, Redis), unless it needs no store.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentctx_fast import (
    AgentActionMessage,
    AgentCtxError,
    AgentFormMessage,
    AiMessage,
    CompressionError,
    CompressionStateConflictError,
    CompressorOutputError,
    CoveredMessageNotFoundError,
    HeuristicTokenEstimator,
    InvalidArgumentError,
    InvalidMessageTypeError,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    build_window,
)
from agentctx_fast.compression import compressors
from agentctx_fast.compression.coordinator import (
    CompressionCoordinator,
    CompressionResult,
    CompressionState,
    CompressionStateStore,
    CompressionTriggerInput,
    InMemoryCompressionStateStore,
)
from agentctx_fast.memory import InMemoryChatMemory
from store_fixtures import STORE_KINDS, make_store, new_conversation_id
from summary_models import Raw, ScriptedSummaryModel

STATE_STORE_KINDS = ("state-store-only", *STORE_KINDS)
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(params=STATE_STORE_KINDS)
def state_store(request: pytest.FixtureRequest) -> Iterator[CompressionStateStore]:
    """A bare `InMemoryCompressionStateStore`, or the state store of each `AgentStore`."""
    if request.param == "state-store-only":
        yield InMemoryCompressionStateStore()
        return
    store = make_store(str(request.param), request)
    try:
        yield store.compression_state_store()
    finally:
        store.close()


# -- doubles -----------------------------------------------------------------------------------


class RecordingStore:
    """Delegates to ``inner`` and records every load and save."""

    def __init__(self, inner: CompressionStateStore) -> None:
        self.inner = inner
        self.loads: list[str] = []
        self.saves: list[tuple[CompressionState, int, bool]] = []

    def load(self, conversation_id: str) -> CompressionState | None:
        self.loads.append(conversation_id)
        return self.inner.load(conversation_id)

    def save(self, state: CompressionState, expected_version: int) -> bool:
        saved = self.inner.save(state, expected_version)
        self.saves.append((state, expected_version, saved))
        return saved


class OtherWriterFirst(RecordingStore):
    """Lets another writer save ``other`` (on the same expected version) before each save."""

    def __init__(self, inner: CompressionStateStore, other: CompressionState) -> None:
        super().__init__(inner)
        self.other = other

    def save(self, state: CompressionState, expected_version: int) -> bool:
        assert self.inner.save(self.other, expected_version) is True
        return super().save(state, expected_version)


class SummaryCompressor:
    """A compressor returning a fresh summary pair per call; records every input."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.inputs: list[list[Message]] = []

    def __call__(self, messages: list[Message]) -> list[Message]:
        self.inputs.append(list(messages))
        n = len(self.inputs)
        return [
            UserMessage(f"summary {n} of {len(messages)}", message_id=f"{self.prefix}sum{n}-u"),
            AiMessage(f"noted {n}", message_id=f"{self.prefix}sum{n}-a"),
        ]


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Trigger:
    """Answers ``decision`` (a value or a function of the input) and records every input."""

    def __init__(self, decision: object = True) -> None:
        self.decision = decision
        self.inputs: list[CompressionTriggerInput] = []

    def __call__(self, trigger_input: CompressionTriggerInput) -> Any:
        self.inputs.append(trigger_input)
        return self.decision(trigger_input) if callable(self.decision) else self.decision


def seven_per_message(messages: Sequence[Message]) -> int:
    return 7 * len(messages)


# -- histories ---------------------------------------------------------------------------------


def new_prefix() -> str:
    """Ids unique in the run: token caches are keyed by (message_id, version)."""
    return uuid.uuid4().hex[:10] + "-"


def plain_turn(prefix: str, number: int) -> list[Message]:
    return [
        UserMessage(f"question {number:05d} about the parcel", message_id=f"{prefix}u{number}"),
        AiMessage(f"answer {number:05d}: it is on its way", message_id=f"{prefix}a{number}"),
    ]


def tool_turn(prefix: str, number: int, result: str = "résultat: livré ✓") -> list[Message]:
    call = ToolCall(f"call_{number}", "lookup_order", '{"order": 1}')
    return [
        UserMessage(f"where is order {number}?", message_id=f"{prefix}u{number}"),
        AiMessage(None, (call,), message_id=f"{prefix}c{number}"),
        ToolMessage(call.id, result, tool_name="lookup_order", message_id=f"{prefix}r{number}"),
        AgentActionMessage(payload={"button": "track"}, message_id=f"{prefix}x{number}"),
        AiMessage(f"order {number} is delivered", message_id=f"{prefix}a{number}"),
    ]


def turns(prefix: str, start: int, stop: int) -> list[Message]:
    out: list[Message] = []
    for number in range(start, stop):
        out.extend(plain_turn(prefix, number))
    return out


def coordinator(
    store: CompressionStateStore,
    trigger: Callable[[CompressionTriggerInput], Any],
    compressor: Callable[[list[Message]], Any],
    **options: Any,
) -> CompressionCoordinator:
    options.setdefault("clock", Clock())
    return CompressionCoordinator(
        store, trigger, compressor, options.pop("token_estimator", seven_per_message), **options
    )


def compress_once(
    store: CompressionStateStore, conversation_id: str, history: list[Message]
) -> CompressionResult:
    """A first compression with a summary compressor, to start from a saved state."""
    result = coordinator(store, Trigger(True), SummaryCompressor(new_prefix())).compress(
        conversation_id, history
    )
    assert result.compressed and result.state is not None and result.state.version == 1
    return result


# -- loading and the trigger input -------------------------------------------------------------


def test_every_call_loads_the_state(state_store: CompressionStateStore) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    recording = RecordingStore(state_store)
    trigger = Trigger(False)
    compressor = SummaryCompressor(prefix)
    subject = coordinator(recording, trigger, compressor)
    history = turns(prefix, 0, 2)
    for _ in range(3):
        subject.compress(conversation_id, history)
    assert recording.loads == [conversation_id] * 3
    assert recording.saves == []
    trigger.decision = True
    subject.compress(conversation_id, history)  # compresses
    subject.compress(conversation_id, history)  # nothing pending: loads, saves nothing
    assert recording.loads == [conversation_id] * 5
    assert [(expected, saved) for _, expected, saved in recording.saves] == [(0, True)]
    assert len(compressor.inputs) == 1


def test_trigger_input_before_the_first_compression(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    estimator = HeuristicTokenEstimator()
    history = [
        *tool_turn(prefix, 0, result="短い"),
        *tool_turn(prefix, 1, result="résultat ✓ " * 30),  # 330 characters, more bytes
        *plain_turn(prefix, 2),
    ]
    trigger = Trigger(False)
    coordinator(
        state_store, trigger, SummaryCompressor(prefix), token_estimator=estimator
    ).compress(conversation_id, history)
    [seen] = trigger.inputs
    assert seen.conversation_id == conversation_id
    assert seen.state == CompressionState(conversation_id)
    assert seen.pending_messages == tuple(history)
    assert seen.estimated_pending_tokens == estimator.estimate(history)
    assert seen.estimated_pending_tokens > 0
    assert seen.pending_turns == 3
    assert seen.largest_tool_result_chars == 330
    assert seen.seconds_since_last_compression is None


def test_trigger_input_after_a_compression(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    clock = Clock()
    trigger = Trigger(True)
    subject = coordinator(state_store, trigger, SummaryCompressor(prefix), clock=clock)
    history = [*tool_turn(prefix, 0, result="x" * 500), *plain_turn(prefix, 1)]
    first = subject.compress(conversation_id, history)
    assert first.state is not None and first.state.updated_at == T0
    clock.advance(90.5)
    trigger.decision = False
    grown = [*history, *turns(prefix, 2, 5)]
    subject.compress(conversation_id, grown)
    seen = trigger.inputs[-1]
    assert seen.state == first.state == state_store.load(conversation_id)
    assert seen.pending_messages == tuple(grown[len(history) :])
    assert seen.estimated_pending_tokens == 7 * 6
    assert seen.pending_turns == 3
    assert seen.largest_tool_result_chars == 0  # the big result is already covered
    assert seen.seconds_since_last_compression == 90.5


def test_a_naive_saved_time_is_taken_as_utc(state_store: CompressionStateStore) -> None:
    """A state saved with a naive ``updated_at`` (a clock without a time zone, or a state saved
    directly) is read by a coordinator on an aware clock, and the other way round."""
    conversation_id, prefix = new_conversation_id(), new_prefix()
    naive = Clock(T0.replace(tzinfo=None))
    history = turns(prefix, 0, 2)
    first = coordinator(state_store, Trigger(True), SummaryCompressor(prefix), clock=naive)
    first.compress(conversation_id, history)
    trigger = Trigger(False)
    aware = Clock(T0 + timedelta(seconds=30))
    grown = [*history, *turns(prefix, 2, 3)]
    coordinator(state_store, trigger, SummaryCompressor(prefix), clock=aware).compress(
        conversation_id, grown
    )
    assert trigger.inputs[-1].seconds_since_last_compression == 30.0
    trigger.decision = True
    result = coordinator(state_store, trigger, SummaryCompressor(prefix), clock=aware).compress(
        conversation_id, grown
    )
    assert result.compressed and result.state is not None and result.state.version == 2
    naive.advance(45)
    trigger.decision = False
    coordinator(state_store, trigger, SummaryCompressor(prefix), clock=naive).compress(
        conversation_id, [*grown, *turns(prefix, 3, 4)]
    )
    assert trigger.inputs[-1].seconds_since_last_compression == 15.0
    other = new_conversation_id()
    saved = CompressionState(
        other, covered_until_message_id=history[-1].message_id, updated_at=naive.now
    )
    assert state_store.save(saved, 0)
    later = Clock(T0 + timedelta(seconds=100))
    coordinator(state_store, trigger, SummaryCompressor(prefix), clock=later).compress(other, grown)
    assert trigger.inputs[-1].seconds_since_last_compression == 55.0


@pytest.mark.parametrize("now", ["2026-03-01", 1.0, None], ids=repr)
def test_a_clock_that_returns_no_datetime_is_an_invalid_argument(
    state_store: CompressionStateStore, now: object
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = turns(prefix, 0, 2)
    compress_once(state_store, conversation_id, history)
    saved = state_store.load(conversation_id)
    compressor = SummaryCompressor(prefix)
    broken = coordinator(state_store, Trigger(True), compressor, clock=lambda: now)
    with pytest.raises(InvalidArgumentError, match="clock"):
        broken.compress(conversation_id, [*history, *turns(prefix, 2, 3)])
    assert compressor.inputs == []
    assert state_store.load(conversation_id) == saved


@pytest.mark.parametrize("now", ["2026-03-01", None], ids=repr)
def test_a_clock_that_returns_no_datetime_is_refused_before_the_first_compression(
    now: object,
) -> None:
    """No state saved yet (no ``updated_at`` to subtract from): the clock is still checked
    before the compressor runs (a summary model call is not paid for, then thrown away)."""
    conversation_id, prefix = new_conversation_id(), new_prefix()
    states = InMemoryCompressionStateStore()
    compressor = SummaryCompressor(prefix)
    broken = coordinator(states, Trigger(True), compressor, clock=lambda: now)
    with pytest.raises(InvalidArgumentError, match="clock"):
        broken.compress(conversation_id, turns(prefix, 0, 2))
    assert compressor.inputs == []
    assert states.load(conversation_id) is None


def test_a_callable_or_a_token_estimator_is_accepted() -> None:
    prefix = new_prefix()
    history = turns(prefix, 0, 3)
    for estimator, expected in [
        (seven_per_message, 42),
        (HeuristicTokenEstimator(), HeuristicTokenEstimator().estimate(history)),
    ]:
        trigger = Trigger(False)
        subject = CompressionCoordinator(
            InMemoryCompressionStateStore(), trigger, SummaryCompressor(prefix), estimator
        )
        subject.compress("c1", history)
        assert trigger.inputs[0].estimated_pending_tokens == expected


# -- when to compress --------------------------------------------------------------------------


def test_trigger_false_calls_nothing_and_saves_nothing(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = turns(prefix, 0, 3)
    before = compress_once(state_store, conversation_id, history)
    assert before.state is not None
    recording = RecordingStore(state_store)
    compressor = SummaryCompressor(prefix)
    grown = [*history, *turns(prefix, 3, 5)]
    result = coordinator(recording, Trigger(False), compressor).compress(conversation_id, grown)
    assert compressor.inputs == []
    assert recording.saves == []
    assert result.compressed is False
    assert result.model_messages == [*before.state.summary, *grown[len(history) :]]
    assert result.state == before.state == state_store.load(conversation_id)


def test_trigger_false_on_a_new_conversation_sends_the_whole_history(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = turns(prefix, 0, 2)
    result = coordinator(state_store, Trigger(False), SummaryCompressor(prefix)).compress(
        conversation_id, history
    )
    assert result.model_messages == history
    assert result.state == CompressionState(conversation_id)
    assert state_store.load(conversation_id) is None


def test_trigger_true_without_pending_messages_calls_no_compressor(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = turns(prefix, 0, 3)
    before = compress_once(state_store, conversation_id, history)
    assert before.state is not None
    recording = RecordingStore(state_store)
    compressor = SummaryCompressor(prefix)
    result = coordinator(recording, Trigger(True), compressor).compress(conversation_id, history)
    assert compressor.inputs == []
    assert recording.saves == []
    assert result.compressed is False
    assert result.model_messages == list(before.state.summary)
    # An empty history on a new conversation: nothing to compress either.
    empty = coordinator(recording, Trigger(True), compressor).compress(new_conversation_id(), [])
    assert (empty.model_messages, empty.compressed, compressor.inputs) == ([], False, [])


def test_compressions_advance_the_state_by_compare_and_set(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    recording = RecordingStore(state_store)
    compressor = SummaryCompressor(prefix)
    clock = Clock()
    subject = coordinator(recording, Trigger(True), compressor, clock=clock)
    history: list[Message] = []
    chunks = [
        turns(prefix, 0, 3),
        [*tool_turn(prefix, 3), *plain_turn(prefix, 4)],
        turns(prefix, 5, 6),
    ]
    previous_summary: list[Message] = []
    covered_tokens = covered_turns = 0
    for step, chunk in enumerate(chunks, start=1):
        history = [*history, *chunk]
        clock.advance(60)
        result = subject.compress(conversation_id, history)
        covered_tokens += 7 * len(chunk)
        covered_turns += {1: 3, 2: 2, 3: 1}[step]
        assert compressor.inputs[-1] == [*previous_summary, *chunk]
        assert len(compressor.inputs) == step
        assert result.compressed is True
        assert result.model_messages == [
            UserMessage(
                f"summary {step} of {len(previous_summary) + len(chunk)}",
                message_id=f"{prefix}sum{step}-u",
            ),
            AiMessage(f"noted {step}", message_id=f"{prefix}sum{step}-a"),
        ]
        expected = CompressionState(
            conversation_id,
            version=step,
            compression_version=step,
            covered_until_message_id=chunk[-1].message_id,
            summary=tuple(result.model_messages),
            covered_tokens=covered_tokens,
            covered_turns=covered_turns,
            updated_at=clock.now,
        )
        assert result.state == expected
        assert state_store.load(conversation_id) == expected
        previous_summary = result.model_messages
    assert [(expected, saved) for _, expected, saved in recording.saves] == [
        (0, True),
        (1, True),
        (2, True),
    ]


def test_trigger_decides_on_the_pending_part_only(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    compressor = SummaryCompressor(prefix)
    subject = coordinator(state_store, Trigger(lambda t: t.pending_turns >= 3), compressor)
    history: list[Message] = []
    outcomes = []
    for number in range(7):
        history = [*history, *plain_turn(prefix, number)]
        outcomes.append(subject.compress(conversation_id, history).compressed)
    # A threshold reached once does not call the compressor on every later request.
    assert outcomes == [False, False, True, False, False, True, False]
    assert len(compressor.inputs) == 2


# -- what must not be saved --------------------------------------------------------------------


@pytest.mark.parametrize("shown", ["other-history", "partial-page", "empty"])
def test_covered_message_missing_raises_and_saves_nothing(
    state_store: CompressionStateStore, shown: str
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = turns(prefix, 0, 4)
    before = compress_once(state_store, conversation_id, history)
    given = {
        "other-history": turns(new_prefix(), 0, 6),
        "partial-page": turns(prefix, 4, 6),  # only messages after the covered one
        "empty": [],
    }[shown]
    recording = RecordingStore(state_store)
    trigger, compressor = Trigger(True), SummaryCompressor(prefix)
    with pytest.raises(CoveredMessageNotFoundError, match=re.escape(repr(f"{prefix}a3"))):
        coordinator(recording, trigger, compressor).compress(conversation_id, given)
    assert recording.saves == []
    assert compressor.inputs == [] and trigger.inputs == []
    assert state_store.load(conversation_id) == before.state


@pytest.mark.parametrize("at_version", [0, 1])
def test_cas_conflict_keeps_the_other_writers_summary(
    state_store: CompressionStateStore, at_version: int
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = turns(prefix, 0, 4)
    if at_version:
        compress_once(state_store, conversation_id, history[:4])
    theirs = CompressionState(
        conversation_id,
        compression_version=at_version + 1,
        covered_until_message_id=history[5].message_id,
        summary=(UserMessage("their summary", message_id=f"{prefix}theirs-u"),),
        covered_tokens=123,
        covered_turns=3,
        updated_at=T0,
    )
    racing = OtherWriterFirst(state_store, theirs)
    with pytest.raises(CompressionStateConflictError, match=f"version {at_version}"):
        coordinator(racing, Trigger(True), SummaryCompressor(prefix)).compress(
            conversation_id, history
        )
    assert [(expected, saved) for _, expected, saved in racing.saves] == [(at_version, False)]
    assert state_store.load(conversation_id) == replace(theirs, version=at_version + 1)
    # The caller may retry: it then continues from the other writer's summary.
    retry = SummaryCompressor(prefix + "retry-")
    result = coordinator(state_store, Trigger(True), retry).compress(conversation_id, history)
    assert retry.inputs == [[*theirs.summary, *history[6:]]]
    assert result.state is not None and result.state.version == at_version + 2
    assert result.state.covered_tokens == 123 + 7 * 2


def test_concurrent_coordinators_have_one_winner(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = turns(prefix, 0, 3)
    both_loaded = threading.Barrier(2, timeout=10)
    outcomes: dict[str, object] = {}

    def run(name: str) -> None:
        def compressor(messages: list[Message]) -> list[Message]:
            both_loaded.wait()  # both have loaded version 0 before either saves
            return [UserMessage(f"summary by {name}", message_id=f"{prefix}{name}")]

        try:
            outcomes[name] = coordinator(state_store, Trigger(True), compressor).compress(
                conversation_id, history
            )
        except CompressionStateConflictError as error:
            outcomes[name] = error

    threads = [threading.Thread(target=run, args=(name,)) for name in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [n for n, o in outcomes.items() if isinstance(o, CompressionResult)]
    losers = [n for n, o in outcomes.items() if isinstance(o, CompressionStateConflictError)]
    assert len(winners) == 1 and len(losers) == 1
    stored = state_store.load(conversation_id)
    assert stored is not None and stored.version == 1
    assert stored.summary == (
        UserMessage(f"summary by {winners[0]}", message_id=f"{prefix}{winners[0]}"),
    )


class Boom(Exception):
    pass


@pytest.mark.parametrize(
    "error",
    [RuntimeError("down"), Boom("custom"), KeyError("k"), InvalidArgumentError("inner")],
    ids=lambda e: type(e).__name__,
)
def test_compressor_failure_is_a_compression_error(
    state_store: CompressionStateStore, error: Exception
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = turns(prefix, 0, 2)
    before = compress_once(state_store, conversation_id, history)

    def failing(messages: list[Message]) -> list[Message]:
        raise error

    recording = RecordingStore(state_store)
    with pytest.raises(CompressionError) as raised:
        coordinator(recording, Trigger(True), failing).compress(
            conversation_id, [*history, *turns(prefix, 2, 3)]
        )
    assert raised.value.__cause__ is error
    assert recording.saves == []
    assert state_store.load(conversation_id) == before.state


def test_compression_error_from_the_compressor_passes_unchanged(
    state_store: CompressionStateStore,
) -> None:
    original = CompressionError("the summary model timed out")

    def failing(messages: list[Message]) -> list[Message]:
        raise original

    conversation_id = new_conversation_id()
    with pytest.raises(CompressionError) as raised:
        coordinator(state_store, Trigger(True), failing).compress(
            conversation_id, turns(new_prefix(), 0, 1)
        )
    assert raised.value is original
    assert state_store.load(conversation_id) is None


def _garbage(prefix: str) -> dict[str, object]:
    call = ToolCall("c9", "lookup")
    return {
        "none": None,
        "str": "a summary as a plain string",
        "dict": {"summary": "x"},
        "int": 3,
        "generator": (m for m in [UserMessage("x", message_id=f"{prefix}g")]),
        "non-message": [UserMessage("ok", message_id=f"{prefix}n"), "not a message"],
        "ui-message": [AgentActionMessage(payload={"b": 1}, message_id=f"{prefix}ui")],
        "ui-message-later": [
            UserMessage("s", message_id=f"{prefix}s"),
            AgentFormMessage(status="pending", message_id=f"{prefix}f"),
        ],
        "orphan-tool-result": [
            UserMessage("s", message_id=f"{prefix}s"),
            ToolMessage("nobody-called", "result", message_id=f"{prefix}t"),
        ],
        "unclosed-tool-call": [
            UserMessage("s", message_id=f"{prefix}s"),
            AiMessage(None, (call,), message_id=f"{prefix}c"),
        ],
        "starts-with-ai": [AiMessage("summary", message_id=f"{prefix}a")],
        "starts-with-system": [SystemMessage("obey", message_id=f"{prefix}sys")],
    }


@pytest.mark.parametrize("kind", list(_garbage("")))
def test_compressor_garbage_is_a_compressor_output_error(
    state_store: CompressionStateStore, kind: str
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = turns(prefix, 0, 2)
    before = compress_once(state_store, conversation_id, history)
    output = _garbage(prefix)[kind]
    recording = RecordingStore(state_store)
    with pytest.raises(CompressorOutputError):
        coordinator(recording, Trigger(True), lambda messages: output).compress(
            conversation_id, [*history, *turns(prefix, 2, 3)]
        )
    assert recording.saves == []
    assert state_store.load(conversation_id) == before.state


@pytest.mark.parametrize("decision", [1, 0, None, "yes", [], [True]], ids=repr)
def test_trigger_must_return_a_bool(state_store: CompressionStateStore, decision: object) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    compressor = SummaryCompressor(prefix)
    with pytest.raises(InvalidArgumentError, match="must return a bool"):
        coordinator(state_store, Trigger(decision), compressor).compress(
            conversation_id, turns(prefix, 0, 2)
        )
    assert compressor.inputs == []
    assert state_store.load(conversation_id) is None


@pytest.mark.parametrize(
    "reply",
    [
        Raw("a plain string"),
        Raw(None),
        Raw({"text": "summary"}),
        Raw(UserMessage("not an AI message")),
        AiMessage(None, (ToolCall("c1", "lookup"),)),
        AiMessage(""),
        AiMessage("   \n"),
        RuntimeError("summary model unavailable"),
    ],
    ids=["str", "none", "dict", "user-message", "tool-call", "empty", "blank", "raises"],
)
def test_summary_model_garbage_is_a_compression_error(
    state_store: CompressionStateStore, reply: Any
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = turns(prefix, 0, 2)
    before = compress_once(state_store, conversation_id, history)
    model = ScriptedSummaryModel([reply])
    recording = RecordingStore(state_store)
    with pytest.raises(CompressionError):
        coordinator(recording, Trigger(True), compressors.model(model)).compress(
            conversation_id, [*history, *turns(prefix, 2, 3)]
        )
    assert len(model.calls) == 1
    assert recording.saves == []
    assert state_store.load(conversation_id) == before.state


def test_summary_that_loses_an_identifier_is_a_compression_error(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = [UserMessage("cancel ORD-2024-001", message_id=f"{prefix}u"), *turns(prefix, 1, 2)]
    model = ScriptedSummaryModel(["the user wants a cancellation", "still no id"])
    with pytest.raises(CompressionError, match="ORD-2024-001"):
        coordinator(state_store, Trigger(True), compressors.model(model)).compress(
            conversation_id, history
        )
    assert len(model.calls) == 2
    assert state_store.load(conversation_id) is None


def test_summary_model_compressor_result_is_saved(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = turns(prefix, 0, 3)
    model = ScriptedSummaryModel(["the parcel questions were answered"])
    result = coordinator(state_store, Trigger(True), compressors.model(model)).compress(
        conversation_id, history
    )
    assert [type(m) for m in result.model_messages] == [UserMessage, AiMessage]
    assert "the parcel questions were answered" in result.model_messages[0].text  # type: ignore[union-attr]
    assert model.calls[0][1] == ()  # no tools for the summary model
    loaded = state_store.load(conversation_id)
    assert loaded is not None and loaded.summary == tuple(result.model_messages)


# -- the incremental compressor over a long history --------------------------------------------

LONG_TURNS = 5_000  # 10,000 messages


def _new_messages_section(request: str) -> list[str]:
    """The numbered transcript entries after "New messages:" (or of the whole transcript)."""
    body = request.split("New messages:\n", 1)[-1]
    return re.findall(r"^\[\d+\] .*$", body, flags=re.M)


def _assert_only_new_text(request: str, prefix: str, first_new: int, last: int) -> None:
    for number in range(first_new):
        assert f"question {number:05d}" not in request
        assert f"answer {number:05d}" not in request
    for number in range(first_new, last):
        assert f"question {number:05d} about the parcel" in request
        assert f"answer {number:05d}: it is on its way" in request


def test_coordinator_with_incremental_sends_only_summary_and_new_messages(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    model = ScriptedSummaryModel(["first running summary", "second running summary"])
    incremental = compressors.incremental(model)
    subject = coordinator(state_store, Trigger(True), incremental)
    history = turns(prefix, 0, LONG_TURNS)
    assert len(history) == 10_000
    first = subject.compress(conversation_id, history)
    assert len(_new_messages_section(model.request_text(0))) == 10_000
    assert first.state is not None
    grown = [*history, *turns(prefix, LONG_TURNS, LONG_TURNS + 5)]
    second = subject.compress(conversation_id, grown)
    assert len(model.calls) == 2
    assert len(model.inputs[1]) == 2  # the summary prompt and one request
    request = model.request_text(1)
    assert "first running summary" in request
    assert len(_new_messages_section(request)) == 10
    _assert_only_new_text(request, prefix, LONG_TURNS, LONG_TURNS + 5)
    assert second.state is not None and second.state.version == 2


def test_coordinator_with_a_fresh_incremental_per_call_sends_only_summary_and_new_messages(
    state_store: CompressionStateStore,
) -> None:
    # What a service that builds its compressor per request (or restarts) does; the model then
    # sees the stored summary pair as the first two messages of its input.
    conversation_id, prefix = new_conversation_id(), new_prefix()
    model = ScriptedSummaryModel(["first running summary", "second running summary"])
    subject = coordinator(
        state_store,
        Trigger(True),
        lambda messages: compressors.incremental(model)(messages),
    )
    history = turns(prefix, 0, LONG_TURNS)
    first = subject.compress(conversation_id, history)
    assert len(_new_messages_section(model.request_text(0))) == 10_000
    assert (
        first.state is not None and first.state.covered_until_message_id == history[-1].message_id
    )
    grown = [*history, *turns(prefix, LONG_TURNS, LONG_TURNS + 5)]
    second = subject.compress(conversation_id, grown)
    assert len(model.calls) == 2
    assert len(model.inputs[1]) == 2
    request = model.request_text(1)
    entries = _new_messages_section(request)
    assert len(entries) == 12  # the summary pair and the 10 new messages
    assert entries[0] == "[1] user: Summary of the earlier conversation:"
    assert request.count("first running summary") == 1
    _assert_only_new_text(request, prefix, LONG_TURNS, LONG_TURNS + 5)
    assert len(request) < 2_000
    assert second.state is not None and second.state.version == 2
    assert second.state.covered_until_message_id == grown[-1].message_id
    assert second.state.covered_tokens == 7 * 10_010


def test_two_instances_each_with_a_long_lived_incremental_take_turns(
    state_store: CompressionStateStore,
) -> None:
    """Two service instances, each with its own coordinator and long-lived incremental
    compressor, compress one conversation in turn: each continues the stored summary (the
    other's), sending only the stored summary and the new messages, never its own stale one."""
    conversation_id, prefix = new_conversation_id(), new_prefix()
    model = ScriptedSummaryModel(["summary by a", "summary by b", "summary by a again"])
    first = coordinator(state_store, Trigger(True), compressors.incremental(model))
    second = coordinator(state_store, Trigger(True), compressors.incremental(model))
    history = turns(prefix, 0, 6)
    first.compress(conversation_id, history[:4])
    second.compress(conversation_id, history[:8])
    result = first.compress(conversation_id, history)
    assert len(model.calls) == 3
    request = model.request_text(2)
    assert "summary by b" in request and "summary by a" not in request
    _assert_only_new_text(request, prefix, 4, 6)
    assert result.state is not None and result.state.version == 3
    assert "summary by a again" in result.model_messages[0].text


def test_one_coordinator_with_a_long_lived_incremental_serves_two_conversations(
    state_store: CompressionStateStore,
) -> None:
    """A coordinator (one per service, as its state store) with one incremental compressor
    keeps each conversation's summary apart: each continues its own stored summary."""
    first, second, prefix = new_conversation_id(), new_conversation_id(), new_prefix()
    model = ScriptedSummaryModel(["first of one", "first of two", "second of one"])
    subject = coordinator(state_store, Trigger(True), compressors.incremental(model))
    one, two = turns(prefix + "1-", 0, 4), turns(prefix + "2-", 0, 2)
    subject.compress(first, one[:4])
    subject.compress(second, two)
    result = subject.compress(first, one)
    request = model.request_text(2)
    assert "first of one" in request and "first of two" not in request
    _assert_only_new_text(request, prefix + "1-", 2, 4)
    assert "second of one" in result.model_messages[0].text


def test_windowed_incremental_sends_only_summary_and_new_messages() -> None:
    prefix = new_prefix()
    model = ScriptedSummaryModel(["first running summary", "second running summary"])
    incremental = compressors.incremental(model)
    options: dict[str, Any] = {
        "max_attached_turns": 10**6,
        "max_attached_messages": 10**6,
        "compression_keep_recent_turns": 2,
        "context_compressor": incremental,
    }
    history = turns(prefix, 0, LONG_TURNS)
    assert len(history) == 10_000
    window = build_window(history, **options)
    # Older than the current turn and the 2 protected ones: turns 0..4996 (9,994 messages).
    assert len(_new_messages_section(model.request_text(0))) == 9_994
    assert incremental.covered_until_message_id == f"{prefix}a{LONG_TURNS - 4}"
    assert window.messages[0].text.endswith("first running summary")  # type: ignore[union-attr]
    first_chars = incremental.last_input_chars

    grown = [*history, *turns(prefix, LONG_TURNS, LONG_TURNS + 5)]
    window = build_window(grown, **options)
    assert len(model.calls) == 2
    assert len(model.inputs[1]) == 2
    request = model.request_text(1)
    assert request.startswith("Existing summary:\nfirst running summary\n")
    assert len(_new_messages_section(request)) == 10  # turns 4997..5001 became compressible
    _assert_only_new_text(request, prefix, LONG_TURNS - 3, LONG_TURNS + 2)
    assert incremental.last_input_chars < first_chars / 100
    assert incremental.covered_until_message_id == f"{prefix}a{LONG_TURNS + 1}"
    assert window.messages[0].text.endswith("second running summary")  # type: ignore[union-attr]
    # The same history again: no model call.
    build_window(grown, **options)
    assert len(model.calls) == 2


# -- the history is only read ------------------------------------------------------------------


def test_the_history_and_the_chat_memory_are_never_modified(
    state_store: CompressionStateStore,
) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    memory = InMemoryChatMemory()
    for message in [*tool_turn(prefix, 0), *turns(prefix, 1, 4)]:
        memory.add_message(message)
    stored = memory.get_messages()

    def vandal(messages: list[Message]) -> list[Message]:
        summary = [UserMessage("summary", message_id=f"{prefix}s{len(messages)}")]
        messages.clear()  # a compressor that mutates its argument must not reach the caller
        return summary

    for decision in (False, True, True):
        history = memory.get_messages()
        snapshot = list(history)
        result = coordinator(state_store, Trigger(decision), vandal).compress(
            conversation_id, history
        )
        assert history == snapshot
        assert all(a is b for a, b in zip(history, snapshot, strict=True))
        assert result.model_messages is not history
        result.model_messages.clear()
        assert history == snapshot
    assert memory.get_messages() == stored
    assert memory.message_count() == len(stored)


def test_a_tuple_history_is_accepted(state_store: CompressionStateStore) -> None:
    conversation_id, prefix = new_conversation_id(), new_prefix()
    history = tuple(turns(prefix, 0, 2))
    result = coordinator(state_store, Trigger(False), SummaryCompressor(prefix)).compress(
        conversation_id, history
    )
    assert result.model_messages == list(history)


# -- arguments ---------------------------------------------------------------------------------


def test_bad_constructor_arguments() -> None:
    store = InMemoryCompressionStateStore()
    compressor = SummaryCompressor("x")
    with pytest.raises(InvalidArgumentError, match="trigger"):
        CompressionCoordinator(store, "always", compressor)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="compressor"):
        CompressionCoordinator(store, Trigger(), None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"state_store must have a load\(\)"):
        CompressionCoordinator(object(), Trigger(), compressor)  # type: ignore[arg-type]

    class LoadOnly:
        def load(self, conversation_id: str) -> None:
            return None

    with pytest.raises(InvalidArgumentError, match=r"state_store must have a save\(\)"):
        CompressionCoordinator(LoadOnly(), Trigger(), compressor)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="token_estimator"):
        CompressionCoordinator(store, Trigger(), compressor, 7)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("history", "needle"),
    [
        ("not a list", "sequence of messages"),
        (None, "sequence of messages"),
        ([UserMessage("x", message_id="u"), "oops"], r"compressible_history\[1\]"),
    ],
)
def test_bad_histories_are_typed_errors(history: Any, needle: str) -> None:
    store = RecordingStore(InMemoryCompressionStateStore())
    subject = coordinator(store, Trigger(True), SummaryCompressor("x"))
    with pytest.raises(InvalidMessageTypeError, match=needle):
        subject.compress("c1", history)
    assert store.saves == []


def test_a_bad_estimate_is_an_invalid_argument() -> None:
    subject = coordinator(
        InMemoryCompressionStateStore(),
        Trigger(True),
        SummaryCompressor("x"),
        token_estimator=lambda messages: -1,
    )
    with pytest.raises(InvalidArgumentError, match="token_estimator"):
        subject.compress("c1", turns(new_prefix(), 0, 1))


def test_errors_are_agentctx_errors() -> None:
    for error in (
        CompressionError,
        CompressorOutputError,
        CoveredMessageNotFoundError,
        CompressionStateConflictError,
        InvalidArgumentError,
    ):
        assert issubclass(error, AgentCtxError)
