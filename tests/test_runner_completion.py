"""The runner completed (SPEC §11 "Completing the runner"): the coordinator in the loop, the
``on_compression_error`` policy, recorded turn statuses in every window, per-conversation
incremental summaries, logging and model metrics; on every store, blocking and async."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    AsyncAgentRunner,
    AsyncScriptedChatModel,
    CompressionTriggerInput,
    InMemoryAgentStore,
    InMemoryChatMemory,
    InMemoryCompressionStateStore,
    InMemoryMetrics,
    InvalidArgumentError,
    Message,
    ScriptedChatModel,
    Tool,
    ToolCall,
    ToolMessage,
    TurnStatus,
    UserMessage,
    build_window,
    compressors,
)
from agentctx_fast._reads import REACH_MARGIN
from agentctx_fast.compression.compressors import IncrementalCompressor
from agentctx_fast.observability import metrics as m
from agentctx_fast.stores.turn_store import AgentTurnSnapshot
from async_bridge import runner_for
from runner_helpers import ids
from store_fixtures import (
    STORE_KINDS,
    every_store_kind,  # noqa: F401  (store_kind: every store)
    make_async_store,
    make_store,
    new_conversation_id,
    store_url,
)
from summary_models import ScriptedSummaryModel, echo_identifiers


class CountingCompressor:
    """``text_excerpt`` that records every input it was given."""

    def __init__(self) -> None:
        self.inputs: list[list[str]] = []
        self._inner = compressors.text_excerpt(2_000)

    def __call__(self, messages: list[Message]) -> list[Message]:
        self.inputs.append(ids(messages))
        return self._inner(messages)


def _answers(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
    question = next(m.text for m in reversed(messages) if isinstance(m, UserMessage))
    return AiMessage(f"answer to {question}")


def _two_pending_turns(trigger: CompressionTriggerInput) -> bool:
    return trigger.pending_turns >= 2


def _coordinated_agent(compressor: Any, model: Any = None) -> Agent:
    return Agent(
        "support",
        model or ScriptedChatModel([_answers], cycle=True),
        instructions="Be kind.",
        context_compressor=compressor,
        compression_trigger=_two_pending_turns,
        compression_keep_recent_turns=1,
    )


def test_the_coordinator_compresses_only_when_its_trigger_fires(
    store_kind: str, request: pytest.FixtureRequest
) -> None:
    conversation = new_conversation_id()
    compressor = CountingCompressor()
    model = ScriptedChatModel([_answers], cycle=True)
    first = make_store(store_kind, request)
    try:
        runner = runner_for(first)
        for turn in range(1, 7):
            done = runner.run(_coordinated_agent(compressor, model), conversation, f"q{turn}")
            assert done.status is TurnStatus.COMPLETED
        # turn 4 finds turns 1-2 older than the protected ones (2 pending): compress; turn 5
        # has 1 pending turn: no call; turn 6 has turns 3-4 pending: compress again.
        assert len(compressor.inputs) == 2
        suffixes = [mid.split(":", 1)[1] for mid in compressor.inputs[0]]
        assert suffixes == ["user", "ai:1", "user", "ai:1"]  # turns 1 and 2
        assert len(compressor.inputs[1]) == 5  # the excerpt summary, then turns 3 and 4
        assert (
            compressor.inputs[1][1:]
            == ids(store_messages := first.chat_memory(conversation).get_messages())[4:8]
        )
        assert len(store_messages) == 12
        assert all(not mid.startswith("summary") for mid in compressor.inputs[0])
        state = first.compression_state_store().load(conversation)
        assert state is not None and state.version == 2 and state.compression_version == 2
        last_window = model.calls[-1].messages
        texts = [msg.text or "" for msg in last_window]
        assert "q1" in texts[1] and "q4" in texts[1]  # the summary carries the older facts
        assert [t for t in texts if t in ("q1", "q2", "q3", "q4")] == []
        assert texts[-3:] == ["q5", "answer to q5", "q6"]
    finally:
        first.close()
    # another process (a fresh store, runner and compressor) continues the saved state
    if not store_kind.endswith("memory"):
        second = make_store(store_kind, request)
        try:
            fresh = CountingCompressor()
            model2 = ScriptedChatModel([_answers], cycle=True)
            turn = runner_for(second).run(_coordinated_agent(fresh, model2), conversation, "q7")
            assert turn.status is TurnStatus.COMPLETED and fresh.inputs == []  # 1 pending turn
            window = [msg.text for msg in model2.calls[0].messages]
            assert window[-5:] == ["q5", "answer to q5", "q6", "answer to q6", "q7"]
            state = second.compression_state_store().load(conversation)
            assert state is not None and state.version == 2
        finally:
            second.close()


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_the_coordinator_on_async_stores(kind: str, request: pytest.FixtureRequest) -> None:
    """Natively on an event loop (the other tests bridge the async runner to a thread)."""
    store_kind = kind
    conversation = new_conversation_id()
    compressor = CountingCompressor()
    url = store_url(store_kind, request)
    model = AsyncScriptedChatModel([AiMessage("ok")], cycle=True)

    async def main() -> Any:
        store = await make_async_store(store_kind, url)
        try:
            runner = AsyncAgentRunner(store)
            for turn in range(1, 5):
                await runner.run(_coordinated_agent(compressor, model), conversation, f"q{turn}")
            await runner.aclose()
            return await store.compression_state_store().load(conversation)
        finally:
            await store.aclose()

    state = asyncio.run(main())
    assert len(compressor.inputs) == 1 and state is not None and state.version == 1
    assert [msg.text for msg in model.calls[-1].messages][-3:] == ["q3", "ok", "q4"]


@pytest.mark.parametrize("policy", ["uncompressed", "fail"])
def test_a_failing_compressor_and_the_policy(
    store_kind: str,
    request: pytest.FixtureRequest,
    policy: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    conversation = new_conversation_id()

    def broken(messages: list[Message]) -> list[Message]:
        raise RuntimeError("summary model is down")

    metrics = InMemoryMetrics()
    store = make_store(store_kind, request)
    try:
        runner = runner_for(store, metrics=metrics)
        plain = Agent("a", ScriptedChatModel([_answers], cycle=True))
        for turn in range(2):
            runner.run(plain, conversation, f"old {turn}")
        model = ScriptedChatModel([_answers], cycle=True)
        agent = Agent(
            "a", model, context_compressor=broken, compression_keep_recent_turns=0,
            on_compression_error=policy,
        )  # fmt: skip
        before = store.chat_memory(conversation).get_messages()
        with caplog.at_level(logging.WARNING, logger="agentctx_fast"):
            turn = runner.run(agent, conversation, "new")
        stored = store.chat_memory(conversation).get_messages()
    finally:
        store.close()
    assert metrics.get(m.COMPRESSOR_FAILURES, agent="a").count == 1
    if policy == "uncompressed":
        assert turn.status is TurnStatus.COMPLETED
        assert [msg.text for msg in model.calls[0].messages][:2] == ["old 0", "answer to old 0"]
        warnings = [r for r in caplog.records if r.name.startswith("agentctx_fast")]
        assert len(warnings) == 1 and "summary model is down" in warnings[0].getMessage()
    else:
        assert turn.status is TurnStatus.FAILED and "summary model is down" in str(turn.error)
        assert model.calls == []
        [failed] = caplog.records  # the failed turn, once (SPEC §22)
        assert "turn failed" in failed.getMessage() and failed.turn_id == turn.turn_id
        assert stored[: len(before)] == before and ids(stored[len(before) :]) == [
            f"{turn.turn_id}:user"
        ]


def _tool_turn_model(on_final: Any = None) -> ScriptedChatModel:
    def final(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        if on_final is not None:
            on_final()
        return AiMessage("final answer")

    return ScriptedChatModel([AiMessage(tool_calls=(ToolCall("c1", "look", "{}"),)), final])


def test_a_cancelled_turn_with_a_final_answer_is_never_compacted(
    store_kind: str, request: pytest.FixtureRequest
) -> None:
    conversation = new_conversation_id()
    store = make_store(store_kind, request)
    try:
        runner = runner_for(store)
        tools = [Tool("look", lambda: "looked")]

        def cancel_now() -> None:
            runner.cancel(conversation, "t1")

        cancelled = runner.run(
            Agent("a", _tool_turn_model(cancel_now), tools=tools), conversation, "one", turn_id="t1"
        )
        completed = runner.run(
            Agent("a", _tool_turn_model(), tools=tools), conversation, "two", turn_id="t2"
        )
        model = ScriptedChatModel([AiMessage("three")])
        agent = Agent(
            "a", model, tools=tools, compact_completed_tool_turns=True,
            compression_keep_recent_turns=0,
        )  # fmt: skip
        runner.run(agent, conversation, "three", turn_id="t3")
    finally:
        store.close()
    assert cancelled.status is TurnStatus.CANCELLED
    assert cancelled.messages[-1].text == "final answer"  # the reply stays on record
    assert completed.status is TurnStatus.COMPLETED
    window = ids(model.calls[0].messages)
    # t1 keeps its whole protocol (cancelled); t2 (completed) is compacted
    assert window == [
        "t1:user",
        "t1:ai:1",
        "t1:tool:1:c1",
        "t1:ai:2",
        "t2:user",
        "t2:ai:2",
        "t3:user",
    ]


def test_an_incremental_compressor_keeps_one_summary_per_conversation(
    store_kind: str, request: pytest.FixtureRequest
) -> None:
    summary_model = ScriptedSummaryModel(echo_identifiers)
    incremental = IncrementalCompressor(summary_model)
    agent = Agent(
        "a", ScriptedChatModel([_answers], cycle=True), context_compressor=incremental,
        compression_keep_recent_turns=0,
    )  # fmt: skip
    first, second = new_conversation_id(), new_conversation_id()
    store = make_store(store_kind, request)
    try:
        runner = runner_for(store)
        turns = [
            runner.run(agent, conversation, f"{conversation} question {n} ORD-{n}")
            for conversation in (first, second)
            for n in range(3)
        ]
    finally:
        store.close()
    assert [t.status for t in turns] == [TurnStatus.COMPLETED] * 6
    requests = [summary_model.request_text(i) for i in range(len(summary_model.calls))]
    assert requests and all((first in r) != (second in r) for r in requests)
    assert incremental.summary == ()  # the agent's own compressor was never used directly


def test_an_incremental_summary_under_a_trigger_is_continued_by_another_process(
    store_kind: str, request: pytest.FixtureRequest
) -> None:
    if store_kind.endswith("memory"):
        pytest.skip("another process needs a shared store")
    conversation = new_conversation_id()

    def agent_of(summary_model: ScriptedSummaryModel) -> Agent:
        return _coordinated_agent(IncrementalCompressor(summary_model))

    models = [ScriptedSummaryModel(echo_identifiers), ScriptedSummaryModel(echo_identifiers)]
    for process, questions in enumerate(((1, 2, 3, 4), (5, 6))):
        store = make_store(store_kind, request)  # a new store: another process's view
        try:
            runner = runner_for(store)
            for n in questions:
                turn = runner.run(agent_of(models[process]), conversation, f"q{n} ORD-{n}")
                assert turn.status is TurnStatus.COMPLETED, turn.error
            state = store.compression_state_store().load(conversation)
        finally:
            store.close()
    assert len(models[0].calls) == 1 and len(models[1].calls) == 1
    # the second process's summary call extends the first one's summary with turns 3-4 only
    assert "ORD-1" in models[1].request_text() and "q3 ORD-3" in models[1].request_text()
    assert "q1 ORD-1" not in models[1].request_text()
    assert state is not None and state.version == 2


def test_model_latency_is_recorded_and_options_are_checked(
    store_kind: str, request: pytest.FixtureRequest
) -> None:
    metrics = InMemoryMetrics()
    store = make_store(store_kind, request)
    try:
        runner_for(store, metrics=metrics).run(
            Agent("a", ScriptedChatModel([AiMessage("hi")])), new_conversation_id(), "hello"
        )
    finally:
        store.close()
    assert metrics.get(m.MODEL_LATENCY_SECONDS, agent="a").count == 1
    with pytest.raises(InvalidArgumentError, match="needs a context_compressor"):
        Agent("a", ScriptedChatModel([]), compression_trigger=_two_pending_turns)
    with pytest.raises(InvalidArgumentError, match="on_compression_error"):
        Agent("a", ScriptedChatModel([]), on_compression_error="ignore")


class CountingMemory(InMemoryChatMemory):
    """Counts the records every page read returns."""

    def __init__(self) -> None:
        super().__init__()
        self.read = 0
        self.pages = 0

    def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        page = super().get_messages(count, offset=offset)
        self.read += len(page)
        self.pages += 1
        return page


def test_the_history_read_fetches_little_more_than_the_window() -> None:
    """After a conversation's first turn, each turn's history read asks for what the last one
    needed plus the turn the runner stored since and a small margin, not the agent's whole
    message limit (and gives the same window)."""
    memory = CountingMemory()
    for turn in range(200):  # 600 stored messages: question, tool call and result, answer
        tid = f"h{turn}"
        call = ToolCall(f"c{turn}", "look", "{}")
        memory.add_messages_if_absent([
            UserMessage(f"question {turn}", message_id=f"{tid}:user", turn_id=tid),
            AiMessage(tool_calls=(call,), message_id=f"{tid}:ai:1", turn_id=tid),
            ToolMessage(call.id, "looked", message_id=f"{tid}:tool", turn_id=tid),
            AiMessage(f"answer {turn}", message_id=f"{tid}:ai:2", turn_id=tid),
        ])  # fmt: skip
    model = ScriptedChatModel([AiMessage("ok")], cycle=True)
    agent = Agent("a", model, max_attached_turns=5, compact_completed_tool_turns=True)
    runner = AgentRunner(chat_memory_provider=lambda _: memory)
    reads = []
    for number in range(4):
        memory.read = memory.pages = 0
        runner.run(agent, "c1", f"new {number}")
        reads.append((memory.read, memory.pages))
    assert reads[0] == (116, 1)  # no size known yet: the agent's 100 messages + 16
    # then one page: the last read's reach (5 turns: 4 messages each, but the runner's own
    # turns hold 2), plus the 2-message turn this runner stored since, plus the margin
    reaches = [4 * (5 - own) + 2 * own for own in range(3)]
    assert reads[1:] == [(reach + 2 + REACH_MARGIN, 1) for reach in reaches], reads
    assert REACH_MARGIN <= 4
    before_reply = memory.get_messages()[:-1]  # what the last model call's window came from
    expected = build_window(before_reply, max_attached_turns=5, compact_completed_tool_turns=True)
    assert ids(model.calls[-1].messages) == ids(expected.messages)


def test_a_history_read_short_of_the_reach_reads_on() -> None:
    """Two runners take turns on one conversation, so each one's remembered reach misses the
    other's turn: the first page falls short, the read goes on, and every window is the one
    the whole history gives."""
    memory = CountingMemory()
    calls = [ToolCall(f"c{i}", "look", "{}") for i in range(6)]
    replies: list[Any] = [AiMessage(tool_calls=tuple(calls)), AiMessage("done")]
    model = ScriptedChatModel(replies, cycle=True)
    agent = Agent("a", model, tools=[Tool("look", lambda: "x")], max_attached_turns=3)
    runners = [AgentRunner(chat_memory_provider=lambda _: memory) for _ in range(2)]
    pages = []
    for number in range(8):
        memory.pages = 0
        before = len(model.calls)
        history = memory.get_messages()
        runners[number % 2].run(agent, "c1", f"q{number}")
        pages.append(memory.pages)
        sent = model.calls[before]
        expected = build_window([*history, sent.messages[-1]], max_attached_turns=3)
        assert ids(sent.messages) == ids(expected.messages)
    assert max(pages[2:]) > 1  # a short first page happened, and was read past
    assert pages[2:].count(1) < len(pages[2:])


def test_an_incremental_summary_survives_a_window_that_moves_past_it() -> None:
    """A heavy turn makes the window attach fewer older turns, so the running summary's last
    message leaves them: the runner starts a new summary instead of failing every turn."""
    summary_model = ScriptedSummaryModel(echo_identifiers)
    calls = [ToolCall(f"c{i}", "look", "{}") for i in range(8)]

    def reply(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        question = next(m.text for m in reversed(messages) if isinstance(m, UserMessage))
        last = messages[-1]
        if question == "q6 heavy" and isinstance(last, UserMessage):
            return AiMessage(tool_calls=tuple(calls))
        return AiMessage(f"answer to {question}")

    agent = Agent(
        "a", ScriptedChatModel([reply], cycle=True),
        tools=[Tool("look", lambda: "looked")],
        context_compressor=IncrementalCompressor(summary_model, require_identifiers=False),
        max_attached_messages=14, compression_keep_recent_turns=2,
    )  # fmt: skip
    runner = AgentRunner(InMemoryAgentStore())
    questions = [f"q{n}" if n != 6 else "q6 heavy" for n in range(1, 41)]
    statuses = [runner.run(agent, "c1", question).status for question in questions]
    assert statuses == [TurnStatus.COMPLETED] * 40
    assert len(summary_model.calls) > 1


def test_the_coordinator_reads_the_saved_state_once_per_model_call() -> None:
    class CountingStates(InMemoryCompressionStateStore):
        loads = 0

        def load(self, conversation_id: str) -> Any:
            CountingStates.loads += 1
            return super().load(conversation_id)

    class Store(InMemoryAgentStore):
        def __init__(self) -> None:
            super().__init__()
            self.states = CountingStates()

        def compression_state_store(self) -> Any:
            return self.states

    model = ScriptedChatModel([_answers], cycle=True)
    runner = AgentRunner(Store())
    for turn in range(1, 6):
        runner.run(_coordinated_agent(CountingCompressor(), model), "c1", f"q{turn}")
    # turns 1-2 have nothing older than the protected turns; turns 3-5 read the state once each
    assert CountingStates.loads == 3 and len(model.calls) == 5


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_a_turn_stopped_before_its_user_message_was_stored_can_be_cancelled(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """Its process recorded the turn and died before storing the user message: ``cancel``
    closes it (nothing to answer) and frees the conversation."""
    conversation = new_conversation_id()
    store = make_store(kind, request)
    try:
        turns = store.turn_store()
        assert turns.acquire_conversation(conversation, "t1", "dead", 1.0, 1_000.0) is None
        snapshot = AgentTurnSnapshot(
            conversation, "t1", "a", TurnStatus.RUNNING, message_ids=("t1:user",),
            created_at=1_000.0, updated_at=1_000.0,
        )  # fmt: skip
        assert turns.save_turn(snapshot, 0)
        runner = AgentRunner(store)
        cancelled = runner.cancel(conversation, "t1")
        recorded = runner.turn(conversation, "t1")
        after = runner.run(Agent("a", ScriptedChatModel([AiMessage("hi")])), conversation, "next")
        stored = ids(store.chat_memory(conversation).get_messages())
    finally:
        store.close()
    assert cancelled.status is TurnStatus.CANCELLED
    assert recorded.status is TurnStatus.CANCELLED
    assert after.status is TurnStatus.COMPLETED
    assert stored == [f"{after.turn_id}:user", f"{after.turn_id}:ai:1"]
