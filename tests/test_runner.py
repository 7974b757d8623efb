"""The agent runner (SPEC §11, §13): turns, tools, windows, approvals, failures, cancel, metrics.

Most tests run on every store through the parametrised ``store`` fixture; each one ends with
`check_memory`, which compares the stored timeline with the messages the turns report.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentConversationBusyError,
    AgentCtxError,
    AgentFormMessage,
    AgentRunner,
    AgentTurn,
    AiMessage,
    CompressionError,
    DuplicateMessageError,
    InMemoryAgentStore,
    InMemoryChatMemory,
    InMemoryMetrics,
    InvalidArgumentError,
    InvalidMessageTypeError,
    LeaseLostError,
    Message,
    ScriptedChatModel,
    SerializationError,
    SystemMessage,
    Tool,
    ToolMessage,
    ToolResultPage,
    TurnNotFoundError,
    TurnStateError,
    TurnStatus,
    UserMessage,
    build_window,
    validate_tool_protocol,
)
from agentctx_fast.core.tokens import HeuristicTokenEstimator
from agentctx_fast.memory import ChatMemory
from agentctx_fast.stores.turn_store import dump_snapshot
from runner_helpers import (
    Recorder,
    call,
    calls,
    capturing,
    check_append_only,
    check_memory,
    ids,
    results_by_call,
)
from store_fixtures import new_conversation_id

INSTRUCTIONS = "You are the support agent of an online shop. Never invent order ids."
REFUSED = "refused by the user"  # SPEC §11: the text of a refused call's result


def _runner(store: Any, **options: Any) -> AgentRunner:
    return AgentRunner(store, **options)


@pytest.fixture
def conversation() -> str:
    return new_conversation_id()


def _forms(messages: Sequence[Message]) -> list[AgentFormMessage]:
    return [m for m in messages if isinstance(m, AgentFormMessage)]


# -- a plain turn -----------------------------------------------------------------------------


def test_plain_turn(store: Any, conversation: str) -> None:
    model = ScriptedChatModel([AiMessage("Your order ships tomorrow.")])
    agent = Agent("support", model, instructions=INSTRUCTIONS)
    runner = _runner(store)
    turn = runner.run(agent, conversation, "Where is order ORD-1?", metadata={"tenant": "t1"})

    assert isinstance(turn, AgentTurn)
    assert turn.conversation_id == conversation
    assert turn.status is TurnStatus.COMPLETED
    assert turn.error is None
    assert turn.pending_approvals == ()
    assert turn.step_count == 1 == len(model.calls)
    user, ai = turn.messages
    assert isinstance(user, UserMessage) and user.text == "Where is order ORD-1?"
    assert isinstance(ai, AiMessage)
    assert turn.final_message == ai
    assert ai.text == "Your order ships tomorrow."
    assert user.turn_id == ai.turn_id == turn.turn_id
    assert user.message_id != ai.message_id

    memory = store.chat_memory(conversation)
    stored = check_memory(memory, [turn])
    assert not any(isinstance(m, SystemMessage) for m in stored)
    assert all(getattr(m, "text", None) != INSTRUCTIONS for m in stored)

    window = model.calls[0].messages
    assert isinstance(window[0], SystemMessage)
    assert window[0].text == INSTRUCTIONS
    assert list(window[1:]) == [user]
    assert model.calls[0].tools == ()

    view = runner.turn(conversation, turn.turn_id)
    assert (view.status, view.step_count, view.error) == (TurnStatus.COMPLETED, 1, None)


def test_second_turn_sees_the_first_and_keeps_its_turn_id(store: Any, conversation: str) -> None:
    model = ScriptedChatModel([AiMessage("first answer"), AiMessage("second answer")])
    agent = Agent("support", model, instructions=INSTRUCTIONS)
    runner = _runner(store)
    first = runner.run(agent, conversation, "one")
    second = runner.run(
        agent, conversation, UserMessage("two", metadata={"k": "v"}), turn_id="my-turn"
    )
    assert second.turn_id == "my-turn"
    assert second.messages[0].metadata == {"k": "v"}
    assert first.turn_id != second.turn_id
    window = model.calls[1].messages
    assert ids(window[1:]) == ids([*first.messages, second.messages[0]])
    check_memory(store.chat_memory(conversation), [first, second])


def test_a_reused_turn_id_returns_that_turn_and_frees_the_conversation(
    store: Any, conversation: str
) -> None:
    agent = Agent("a", ScriptedChatModel([AiMessage("x"), AiMessage("y")]))
    runner = _runner(store)
    first = runner.run(agent, conversation, "one", turn_id="t-1")
    again = runner.run(agent, conversation, "again", turn_id="t-1")  # SPEC §22: a retry
    assert (again.turn_id, again.status) == ("t-1", TurnStatus.COMPLETED)
    check_memory(store.chat_memory(conversation), [first])
    third = runner.run(agent, conversation, "three")
    assert third.status is TurnStatus.COMPLETED


def test_unserialisable_metadata_writes_nothing(store: Any, conversation: str) -> None:
    model = ScriptedChatModel([AiMessage("x")])
    runner = _runner(store)
    with pytest.raises(SerializationError):
        runner.run(Agent("a", model), conversation, "hi", metadata={"conn": object()})
    assert model.calls == []
    assert store.chat_memory(conversation).get_messages() == []
    assert runner.run(Agent("a", model), conversation, "hi").status is TurnStatus.COMPLETED


def test_user_message_with_a_stored_id(store: Any, conversation: str) -> None:
    agent = Agent("a", ScriptedChatModel([AiMessage("one"), AiMessage("two")]))
    runner = _runner(store)
    first = runner.run(agent, conversation, UserMessage("hi", message_id="u-fixed"))
    memory = store.chat_memory(conversation)
    with pytest.raises(DuplicateMessageError, match="u-fixed"):
        runner.run(agent, conversation, UserMessage("again", message_id="u-fixed"))
    check_memory(memory, [first])  # nothing was written
    third = runner.run(agent, conversation, UserMessage("again", message_id="u-new"))
    assert third.status is TurnStatus.COMPLETED  # the refused run freed the conversation
    check_memory(memory, [first, third])


def test_a_turn_id_reused_with_an_in_process_turn_store_writes_nothing(conversation: str) -> None:
    memory = InMemoryChatMemory()
    first_runner = AgentRunner(chat_memory_provider=lambda _: memory)
    agent = Agent("a", ScriptedChatModel([AiMessage("one"), AiMessage("two")]))
    first = first_runner.run(agent, conversation, "hi", turn_id="t-1")
    restarted = AgentRunner(chat_memory_provider=lambda _: memory)  # its turn store is empty
    with pytest.raises(DuplicateMessageError, match="turn id was used before"):
        restarted.run(agent, conversation, "hi again", turn_id="t-1")
    check_memory(memory, [first])
    assert restarted.run(agent, conversation, "hi again").status is TurnStatus.COMPLETED


# -- tools ------------------------------------------------------------------------------------


def test_tool_turn_with_parallel_calls_and_every_result_kind(store: Any, conversation: str) -> None:
    def get_order(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return {"id": order_id, "status": "shipped", "items": [1, 2], "note": "已发货"}

    def echo(text: str) -> str:
        return text.upper()

    page = ToolResultPage([{"sku": "A"}, {"sku": "B"}], has_more=True, next_cursor="p2")

    def list_items(order_id: str, cursor: str | None = None) -> ToolResultPage:
        return page

    tools = [Tool("get_order", get_order), Tool("echo", echo), Tool("list_items", list_items)]
    model = ScriptedChatModel(
        [
            calls(
                call("c1", "get_order", {"order_id": "ORD-7"}),
                call("c2", "echo", {"text": "hi"}),
                call("c3", "list_items", {"order_id": "ORD-7"}),
                text="Let me look.",
            ),
            AiMessage("ORD-7 has shipped."),
        ]
    )
    agent = Agent("support", model, instructions=INSTRUCTIONS, tools=tools)
    turn = _runner(store).run(agent, conversation, "status of ORD-7?")

    assert turn.status is TurnStatus.COMPLETED
    assert turn.step_count == 2 == len(model.calls)
    user, ai, *results, final = turn.messages
    assert isinstance(ai, AiMessage) and ai.text == "Let me look." and len(ai.tool_calls) == 3
    assert [type(m) for m in results] == [ToolMessage] * 3
    assert [m.tool_call_id for m in results] == ["c1", "c2", "c3"]  # in call order
    by_call = results_by_call(results)
    assert [by_call[c].tool_name for c in ("c1", "c2", "c3")] == [
        "get_order",
        "echo",
        "list_items",
    ]
    assert not any(m.is_error for m in results)
    assert json.loads(by_call["c1"].text) == get_order("ORD-7")
    assert by_call["c2"].text == echo("hi")
    assert by_call["c3"].text == page.to_text()
    assert turn.final_message == final and final.text == "ORD-7 has shipped."

    second_window = model.calls[1].messages
    assert ids(second_window) == ids([second_window[0], user, ai, *results])
    assert model.calls[0].tools == tuple(tools)
    check_memory(store.chat_memory(conversation), [turn])


def test_tool_parameters_are_derived_from_the_signature() -> None:
    def refund(order_id: str, amount: float, reason: str | None = None, notify: bool = True) -> str:
        """Refund an order."""
        return "ok"

    tool = Tool("refund", refund)
    assert tool.description == "Refund an order."
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "amount": {"type": "number"},
            "reason": {"type": "string"},
            "notify": {"type": "boolean"},
        },
        "required": ["order_id", "amount"],
    }
    given = {"type": "object", "properties": {"x": {"type": "integer"}}}
    explicit = Tool("other", lambda x: str(x), description="d", parameters=given)
    assert explicit.parameters == given
    model = ScriptedChatModel([AiMessage("fine")])
    AgentRunner(InMemoryAgentStore()).run(
        Agent("a", model, tools=[tool, explicit]), new_conversation_id(), "hi"
    )
    offered = model.calls[0].tools
    assert [t.name for t in offered] == ["refund", "other"]
    assert [t.parameters for t in offered] == [tool.parameters, given]


def test_tool_keyword_arguments_are_passed(store: Any, conversation: str) -> None:
    recorder = Recorder({"ok": True})
    tool = Tool("lookup", recorder, parameters={"type": "object"})
    arguments = {"order_id": "ORD-2024-001", "limit": 3, "tags": ["a"], "deep": {"x": None}}
    model = ScriptedChatModel([calls(call("c1", "lookup", arguments)), AiMessage("done")])
    turn = _runner(store).run(Agent("a", model, tools=[tool]), conversation, "go")
    assert recorder.calls == [arguments]
    assert json.loads(results_by_call(turn.messages)["c1"].text) == recorder.result
    check_memory(store.chat_memory(conversation), [turn])


# -- every model call gets a freshly built window -----------------------------------------------

WINDOW_OPTIONS = {
    "compact-small": {
        "max_attached_turns": 6,
        "max_attached_messages": 14,
        "compact_completed_tool_turns": True,
        "compression_keep_recent_turns": 2,
    },
    "default": {},
    "only-current": {"max_attached_turns": 0},
    "tokens": {
        "max_attached_turns": 30,
        "max_attached_messages": 60,
        "compact_completed_tool_turns": True,
        "compression_keep_recent_turns": 1,
        "max_attached_tokens": 400,
    },
}


def _turn_plan(index: int) -> list[AiMessage]:
    """The replies of turn ``index``: plain answers and tool turns of one or two steps with one
    or two calls each; call ids are reused per turn (``call_0``...) as many models do."""
    kind = index % 4
    if kind == 0:
        return [AiMessage(f"answer {index} " + "words " * (index % 7))]
    if kind == 1:
        return [
            calls(call("call_0", "lookup", {"n": index})),
            AiMessage(f"found {index}"),
        ]
    if kind == 2:
        return [
            calls(call("call_0", "lookup", {"n": index}), call("call_1", "lookup", {"n": -index})),
            calls(call("call_0", "lookup", {"n": index + 1}), text="one more"),
            AiMessage(f"done {index}"),
        ]
    return [calls(call("call_0", "lookup", {"n": index})), AiMessage(f"ok {index}")]


@pytest.mark.parametrize("options", list(WINDOW_OPTIONS.values()), ids=list(WINDOW_OPTIONS))
def test_every_model_call_gets_a_window_over_the_whole_history(
    store: Any, conversation: str, options: dict[str, Any]
) -> None:
    memory = store.chat_memory(conversation)
    runner = _runner(store)
    lookup = Tool("lookup", lambda n: f"row {n} " + "x" * (abs(n) % 40))
    seen: list[list[Message]] = []
    sent: list[tuple[Message, ...]] = []
    turns: list[AgentTurn] = []
    index = 0
    while memory.message_count() < 330:
        model = ScriptedChatModel([capturing(memory, seen, r) for r in _turn_plan(index)])
        agent = Agent("support", model, instructions=INSTRUCTIONS, tools=[lookup], **options)
        before = memory.get_messages()
        turn = runner.run(agent, conversation, f"question {index}")
        assert turn.status is TurnStatus.COMPLETED, turn.error
        check_append_only(before, memory.get_messages())
        sent.extend(c.messages for c in model.calls)
        turns.append(turn)
        index += 1

    assert len(seen) == len(sent) > 150
    compacted = 0
    for history, window in zip(seen, sent, strict=True):
        expected = build_window(history, system=INSTRUCTIONS, **options)
        assert ids(window) == ids(expected.messages)
        assert list(window) == expected.messages
        compacted += expected.compacted_turns
    if options.get("compact_completed_tool_turns"):
        assert compacted > 0  # the comparison covered compacted windows
    stored = check_memory(memory, turns)
    assert len(stored) >= 330


def _plain_turn(runner: AgentRunner, conversation: str, index: int, **options: Any) -> AgentTurn:
    model = ScriptedChatModel([AiMessage(f"answer {index}")])
    return runner.run(Agent("a", model, **options), conversation, f"question {index}")


def test_paged_history_read_reaches_a_compactable_turn_at_the_keep_boundary(
    store: Any, conversation: str
) -> None:
    options = {
        "max_attached_turns": 50,
        "max_attached_messages": 8,
        "compact_completed_tool_turns": True,
        "compression_keep_recent_turns": 1,
    }
    runner = _runner(store)
    for index in range(40):  # 80 messages: more than the first page the runner reads
        _plain_turn(runner, conversation, index)
    steps = [calls(call(f"s{k}", "lookup", {"n": k})) for k in range(8)]
    tool_model = ScriptedChatModel([*steps, AiMessage("tool turn done")])
    lookup = Tool("lookup", lambda n: f"row {n}")
    tool_turn = runner.run(Agent("a", tool_model, tools=[lookup]), conversation, "many lookups")
    assert tool_turn.status is TurnStatus.COMPLETED
    _plain_turn(runner, conversation, 99)

    memory = store.chat_memory(conversation)
    seen: list[list[Message]] = []
    model = ScriptedChatModel([capturing(memory, seen, AiMessage("last"))])
    runner.run(Agent("a", model, instructions=INSTRUCTIONS, **options), conversation, "now")
    expected = build_window(seen[0], system=INSTRUCTIONS, **options)
    assert expected.compacted_turns == 1
    assert ids(model.calls[0].messages) == ids(expected.messages)


def test_resumed_turn_windows_match_the_whole_history(store: Any, conversation: str) -> None:
    options = WINDOW_OPTIONS["compact-small"]
    runner = _runner(store)
    memory = store.chat_memory(conversation)
    lookup = Tool("lookup", lambda n: f"row {n}")
    turns = []
    for index in range(45):
        model = ScriptedChatModel(_turn_plan(index))
        turns.append(runner.run(Agent("a", model, tools=[lookup], **options), conversation, "q"))
    seen: list[list[Message]] = []
    refund = Tool("refund", Recorder("refunded"), parameters={"type": "object"},
                  requires_approval=True)  # fmt: skip
    model = ScriptedChatModel(
        [
            capturing(memory, seen, calls(call("c1", "refund", {"order_id": "O-1"}))),
            capturing(memory, seen, calls(call("c2", "lookup", {"n": 1}))),
            capturing(memory, seen, AiMessage("refunded and checked")),
        ]
    )
    agent = Agent("a", model, instructions=INSTRUCTIONS, tools=[lookup, refund], **options)
    suspended = runner.run(agent, conversation, "refund O-1")
    assert suspended.status is TurnStatus.SUSPENDED
    resumed = runner.resume(agent, conversation, suspended.turn_id, {"c1": True})
    assert resumed.status is TurnStatus.COMPLETED
    assert len(seen) == len(model.calls) == 3
    for history, sent in zip(seen, model.calls, strict=True):
        expected = build_window(history, system=INSTRUCTIONS, **options)
        assert ids(sent.messages) == ids(expected.messages)
    check_memory(memory, [*turns, resumed])


# -- approvals --------------------------------------------------------------------------------


def _approval_agent(
    recorder: Recorder, replies: list[Any], **options: Any
) -> tuple[Agent, ScriptedChatModel]:
    refund = Tool(
        "refund",
        recorder,
        description="Refund an order",
        parameters={"type": "object", "properties": {"order_id": {"type": "string"}}},
        requires_approval=True,
    )
    lookup = Tool("lookup", lambda order_id: f"order {order_id}: paid")
    model = ScriptedChatModel(replies)
    agent = Agent("support", model, instructions=INSTRUCTIONS, tools=[refund, lookup], **options)
    return agent, model


def _last_tool_text(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
    last = messages[-1]
    assert isinstance(last, ToolMessage)
    return AiMessage(f"after: {last.text}")


def test_approval_suspends_the_turn_and_blocks_the_conversation(
    store: Any, conversation: str
) -> None:
    recorder = Recorder("refunded")
    arguments = json.dumps({"order_id": "ORD-9"})
    agent, model = _approval_agent(
        recorder, [calls(call("c1", "refund", arguments)), AiMessage("never")]
    )
    runner = _runner(store)
    turn = runner.run(agent, conversation, "refund ORD-9 please")

    assert turn.status is TurnStatus.SUSPENDED
    assert turn.final_message is None and turn.error is None
    assert recorder.calls == []
    (pending,) = turn.pending_approvals
    assert (pending.tool_call_id, pending.tool_name, pending.arguments) == (
        "c1",
        "refund",
        arguments,
    )
    memory = store.chat_memory(conversation)
    form = memory.get_message(pending.form_message_id)
    assert isinstance(form, AgentFormMessage)
    assert form.status == "pending" and form.version == 0
    assert form.turn_id == turn.turn_id
    assert form.payload is not None and form.payload["tool_call_id"] == "c1"
    assert _forms(turn.messages) == [form]
    assert len(model.calls) == 1
    assert runner.turn(conversation, turn.turn_id).status is TurnStatus.SUSPENDED
    # The suspended turn's open call is not a protocol error in the history it will continue.
    check_memory(memory, [turn], protocol=False)

    other = ScriptedChatModel([AiMessage("x")])
    with pytest.raises(AgentConversationBusyError) as busy:
        runner.run(Agent("other", other), conversation, "something else")
    assert busy.value.turn_id == turn.turn_id
    with pytest.raises(AgentConversationBusyError):
        _runner(store).run(Agent("other", other), conversation, "from another runner")
    assert other.calls == []
    check_memory(memory, [turn], protocol=False)  # the refused runs wrote nothing


def test_resume_approved_runs_the_tool_and_completes(store: Any, conversation: str) -> None:
    recorder = Recorder({"refunded": "ORD-9", "amount": 12.5})
    agent, model = _approval_agent(
        recorder, [calls(call("c1", "refund", {"order_id": "ORD-9"})), _last_tool_text]
    )
    runner = _runner(store)
    memory = store.chat_memory(conversation)
    suspended = runner.run(agent, conversation, "refund ORD-9")
    before = memory.get_messages()
    turn = runner.resume(agent, conversation, suspended.turn_id, {"c1": True})

    assert turn.status is TurnStatus.COMPLETED
    assert turn.turn_id == suspended.turn_id
    assert recorder.calls == [{"order_id": "ORD-9"}]
    assert len(model.calls) == 2
    assert model.calls[1].messages[-1] == results_by_call(turn.messages)["c1"]
    result = results_by_call(turn.messages)["c1"]
    assert not result.is_error
    assert json.loads(result.text) == recorder.result
    assert turn.final_message is not None
    assert turn.final_message.text == f"after: {result.text}"
    (form,) = _forms(turn.messages)
    assert (form.status, form.version) == ("approved", 1)
    assert memory.get_message(form.message_id) == form
    assert turn.pending_approvals == ()
    assert runner.turn(conversation, turn.turn_id).status is TurnStatus.COMPLETED
    stored = check_memory(memory, [turn])
    check_append_only(before, stored)
    nxt = runner.run(Agent("a", ScriptedChatModel([AiMessage("free")])), conversation, "next")
    assert nxt.status is TurnStatus.COMPLETED


def test_resume_refused_answers_with_an_error_and_goes_on(store: Any, conversation: str) -> None:
    recorder = Recorder("refunded")
    agent, model = _approval_agent(
        recorder, [calls(call("c1", "refund", {"order_id": "ORD-9"})), _last_tool_text]
    )
    runner = _runner(store)
    suspended = runner.run(agent, conversation, "refund ORD-9")
    turn = runner.resume(agent, conversation, suspended.turn_id, {"c1": False})

    assert turn.status is TurnStatus.COMPLETED
    assert recorder.calls == []
    result = results_by_call(turn.messages)["c1"]
    assert (result.text, result.is_error, result.tool_name) == (REFUSED, True, "refund")
    assert len(model.calls) == 2  # the loop went on after the refusal
    assert model.calls[1].messages[-1] == result
    assert turn.final_message is not None and turn.final_message.text == f"after: {REFUSED}"
    (form,) = _forms(turn.messages)
    assert (form.status, form.version) == ("refused", 1)
    check_memory(store.chat_memory(conversation), [turn])


def test_partial_decisions_keep_the_turn_suspended(store: Any, conversation: str) -> None:
    recorder = Recorder("refunded")
    agent, model = _approval_agent(
        recorder,
        [
            calls(
                call("c1", "refund", {"order_id": "A"}),
                call("c2", "lookup", {"order_id": "B"}),
                call("c3", "refund", {"order_id": "C"}),
            ),
            AiMessage("all decided"),
        ],
    )
    runner = _runner(store)
    memory = store.chat_memory(conversation)
    turn = runner.run(agent, conversation, "refund A and C")
    assert turn.status is TurnStatus.SUSPENDED
    assert [p.tool_call_id for p in turn.pending_approvals] == ["c1", "c3"]
    assert set(results_by_call(turn.messages)) == {"c2"}  # the call needing no approval ran

    partly = runner.resume(agent, conversation, turn.turn_id, {"c3": True})
    assert partly.status is TurnStatus.SUSPENDED
    assert [p.tool_call_id for p in partly.pending_approvals] == ["c1"]
    assert recorder.calls == [{"order_id": "C"}]
    assert len(model.calls) == 1  # no model call while a decision is missing
    forms = {f.payload["tool_call_id"]: f for f in _forms(partly.messages) if f.payload}
    assert (forms["c3"].status, forms["c3"].version) == ("approved", 1)
    assert (forms["c1"].status, forms["c1"].version) == ("pending", 0)
    assert runner.turn(conversation, turn.turn_id).status is TurnStatus.SUSPENDED
    with pytest.raises(AgentConversationBusyError) as busy:
        runner.run(agent, conversation, "meanwhile")
    assert busy.value.turn_id == turn.turn_id

    done = runner.resume(agent, conversation, turn.turn_id, {"c1": False})
    assert done.status is TurnStatus.COMPLETED
    results = results_by_call(done.messages)
    assert set(results) == {"c1", "c2", "c3"}
    assert results["c1"].text == REFUSED and results["c1"].is_error
    assert recorder.calls == [{"order_id": "C"}]
    forms = {f.payload["tool_call_id"]: f for f in _forms(done.messages) if f.payload}
    assert (forms["c1"].status, forms["c1"].version) == ("refused", 1)
    assert (forms["c3"].status, forms["c3"].version) == ("approved", 1)
    check_memory(memory, [done])


def test_resume_errors_write_nothing(store: Any, conversation: str) -> None:
    recorder = Recorder("refunded")
    agent, model = _approval_agent(
        recorder, [calls(call("c1", "refund", {"order_id": "X"})), AiMessage("done")]
    )
    runner = _runner(store)
    memory = store.chat_memory(conversation)
    suspended = runner.run(agent, conversation, "refund X")
    before = memory.get_messages()
    version = runner.turn_store.load_turn(conversation, suspended.turn_id)
    assert version is not None

    with pytest.raises(TurnNotFoundError):
        runner.resume(agent, conversation, "no-such-turn", {"c1": True})
    with pytest.raises(TurnNotFoundError):
        runner.resume(agent, new_conversation_id(), suspended.turn_id, {"c1": True})
    with pytest.raises(InvalidArgumentError) as error:
        runner.resume(agent, conversation, suspended.turn_id, {"c1": True, "c9": True})
    assert isinstance(error.value, AgentCtxError)
    with pytest.raises(InvalidArgumentError):
        runner.resume(agent, conversation, suspended.turn_id, {"c1": "yes"})
    with pytest.raises(InvalidArgumentError):
        runner.resume(agent, conversation, suspended.turn_id, ["c1"])  # type: ignore[arg-type]

    assert memory.get_messages() == before
    assert runner.turn_store.load_turn(conversation, suspended.turn_id) == version
    assert recorder.calls == [] and len(model.calls) == 1
    with pytest.raises(AgentConversationBusyError):
        runner.run(agent, conversation, "still suspended")

    done = runner.resume(agent, conversation, suspended.turn_id, {"c1": True})
    assert done.status is TurnStatus.COMPLETED
    with pytest.raises(TurnStateError):
        runner.resume(agent, conversation, suspended.turn_id, {"c1": True})
    assert recorder.calls == [{"order_id": "X"}]  # the second resume ran nothing
    check_memory(memory, [done])


# -- failures ---------------------------------------------------------------------------------


def _next_turn_works(runner: AgentRunner, conversation: str) -> AgentTurn:
    turn = runner.run(Agent("a", ScriptedChatModel([AiMessage("again")])), conversation, "retry")
    assert turn.status is TurnStatus.COMPLETED
    return turn


def test_a_raising_tool_gives_an_error_result(store: Any, conversation: str) -> None:
    boom = ValueError("warehouse offline")
    tools = [Tool("stock", Recorder(boom), parameters={"type": "object"})]
    model = ScriptedChatModel([calls(call("c1", "stock", {"sku": "A"})), AiMessage("sorry")])
    turn = _runner(store).run(Agent("a", model, tools=tools), conversation, "stock?")
    assert turn.status is TurnStatus.COMPLETED
    result = results_by_call(turn.messages)["c1"]
    assert result.is_error and "ValueError" in result.text and str(boom) in result.text
    assert model.calls[1].messages[-1] == result
    check_memory(store.chat_memory(conversation), [turn])


@pytest.mark.parametrize(
    "arguments",
    ['{"sku": ', "not json", "[1, 2]", '"text"', "42", "null"],
    ids=["truncated", "garbage", "array", "string", "number", "null"],
)
def test_bad_arguments_give_an_error_result(store: Any, conversation: str, arguments: str) -> None:
    recorder = Recorder("in stock")
    tools = [Tool("stock", recorder, parameters={"type": "object"})]
    model = ScriptedChatModel([calls(call("c1", "stock", arguments)), AiMessage("sorry")])
    turn = _runner(store).run(Agent("a", model, tools=tools), conversation, "stock?")
    assert turn.status is TurnStatus.COMPLETED
    assert recorder.calls == []
    result = results_by_call(turn.messages)["c1"]
    assert result.is_error and "stock" in result.text
    check_memory(store.chat_memory(conversation), [turn])


def test_unknown_tool_gives_an_error_result(store: Any, conversation: str) -> None:
    recorder = Recorder("x")
    tools = [Tool("known", recorder)]
    model = ScriptedChatModel(
        [calls(call("c1", "unknown_tool"), call("c2", "known")), AiMessage("ok")]
    )
    turn = _runner(store).run(Agent("a", model, tools=tools), conversation, "go")
    assert turn.status is TurnStatus.COMPLETED
    results = results_by_call(turn.messages)
    assert results["c1"].is_error and "unknown_tool" in results["c1"].text
    assert not results["c2"].is_error and recorder.calls == [{}]
    check_memory(store.chat_memory(conversation), [turn])


@pytest.mark.parametrize("after_tools", [False, True], ids=["first-step", "after-tools"])
def test_a_raising_model_fails_the_turn_and_frees_the_conversation(
    store: Any, conversation: str, after_tools: bool
) -> None:
    failure = ConnectionError("model endpoint down")
    replies: list[Any] = [calls(call("c1", "t")), failure] if after_tools else [failure]
    model = ScriptedChatModel(replies)
    runner = _runner(store)
    turn = runner.run(Agent("a", model, tools=[Tool("t", Recorder())]), conversation, "hi")
    assert turn.status is TurnStatus.FAILED
    assert turn.error is not None and str(failure) in turn.error
    assert turn.final_message is None
    view = runner.turn(conversation, turn.turn_id)
    assert view.status is TurnStatus.FAILED and view.error == turn.error
    memory = store.chat_memory(conversation)
    check_memory(memory, [turn])
    nxt = _next_turn_works(runner, conversation)
    check_memory(memory, [turn, nxt])


@pytest.mark.parametrize(
    "reply",
    [UserMessage("I am not an AI message"), "plain text", None],
    ids=["user-message", "str", "none"],
)
def test_a_model_returning_no_ai_message_fails_the_turn(
    store: Any, conversation: str, reply: Any
) -> None:
    model = ScriptedChatModel([lambda messages, tools: reply])
    runner = _runner(store)
    turn = runner.run(Agent("a", model), conversation, "hi")
    assert turn.status is TurnStatus.FAILED
    assert turn.error is not None and type(reply).__name__ in turn.error
    memory = store.chat_memory(conversation)
    check_memory(memory, [turn])
    assert len(turn.messages) == 1  # the user message only: the reply was not stored
    check_memory(memory, [turn, _next_turn_works(runner, conversation)])


def test_max_steps_fails_the_turn_with_every_call_answered(store: Any, conversation: str) -> None:
    recorder = Recorder("more")
    looping = calls(call("call_0", "t"), call("call_1", "t"))
    model = ScriptedChatModel([looping], cycle=True)
    runner = _runner(store)
    turn = runner.run(
        Agent("a", model, tools=[Tool("t", recorder)], max_steps=3), conversation, "x"
    )
    assert turn.status is TurnStatus.FAILED
    assert turn.error is not None and "max_steps" in turn.error
    assert len(model.calls) == 3 == turn.step_count
    ais = [m for m in turn.messages if isinstance(m, AiMessage)]
    assert len(ais) == 3
    assert len([m for m in turn.messages if isinstance(m, ToolMessage)]) == 6
    assert runner.turn(conversation, turn.turn_id).status is TurnStatus.FAILED
    memory = store.chat_memory(conversation)
    check_memory(memory, [turn])
    check_memory(memory, [turn, _next_turn_works(runner, conversation)])


def test_a_raising_compressor_fails_the_turn_and_keeps_the_history(
    store: Any, conversation: str
) -> None:
    runner = _runner(store)
    memory = store.chat_memory(conversation)
    earlier = [_plain_turn(runner, conversation, i) for i in range(5)]
    before = memory.get_messages()

    def compressor(messages: list[Message]) -> list[Message]:
        raise RuntimeError("summary service down")

    options = {"context_compressor": compressor, "compression_keep_recent_turns": 1}
    with pytest.raises(CompressionError) as direct:
        build_window([*before, UserMessage("x")], **options)
    model = ScriptedChatModel([AiMessage("never")])
    turn = runner.run(Agent("a", model, **options), conversation, "hi")
    assert turn.status is TurnStatus.FAILED
    assert turn.error is not None and str(direct.value) in turn.error
    assert model.calls == []
    stored = check_memory(memory, [*earlier, turn])
    assert stored[: len(before)] == before and len(stored) == len(before) + 1
    check_memory(memory, [*earlier, turn, _next_turn_works(runner, conversation)])


def test_a_compressor_failing_after_a_tool_step_fails_the_turn(
    store: Any, conversation: str
) -> None:
    runner = _runner(store)
    earlier = [_plain_turn(runner, conversation, i) for i in range(4)]
    state = {"calls": 0}

    def compressor(messages: list[Message]) -> list[Message]:
        state["calls"] += 1
        if state["calls"] > 1:
            raise RuntimeError("quota exceeded")
        return messages

    model = ScriptedChatModel([calls(call("c1", "t")), AiMessage("never")])
    agent = Agent(
        "a", model, tools=[Tool("t", Recorder())], context_compressor=compressor,
        compression_keep_recent_turns=1,
    )  # fmt: skip
    turn = runner.run(agent, conversation, "hi")
    assert turn.status is TurnStatus.FAILED and "quota exceeded" in (turn.error or "")
    assert len(model.calls) == 1
    check_memory(store.chat_memory(conversation), [*earlier, turn])


# -- cancel -----------------------------------------------------------------------------------


def test_cancel_a_suspended_turn(store: Any, conversation: str) -> None:
    recorder = Recorder("refunded")
    agent, model = _approval_agent(
        recorder,
        [calls(call("c1", "refund", {"order_id": "A"}), call("c2", "lookup", {"order_id": "A"}))],
    )
    runner = _runner(store)
    memory = store.chat_memory(conversation)
    suspended = runner.run(agent, conversation, "refund A")
    before = memory.get_messages()
    cancelled = _runner(store).cancel(conversation, suspended.turn_id)  # any runner may cancel

    assert cancelled.status is TurnStatus.CANCELLED
    assert cancelled.turn_id == suspended.turn_id
    assert recorder.calls == []
    assert len(model.calls) == 1  # cancelling makes no model call
    results = results_by_call(cancelled.messages)
    assert set(results) == {"c1", "c2"}
    assert results["c1"].is_error and not results["c2"].is_error
    (form,) = _forms(cancelled.messages)
    assert (form.status, form.version) == ("cancelled", 1)
    assert memory.get_message(form.message_id) == form
    assert runner.turn(conversation, suspended.turn_id).status is TurnStatus.CANCELLED
    stored = check_memory(memory, [cancelled])
    check_append_only(before, stored)

    with pytest.raises(TurnStateError):
        runner.resume(agent, conversation, suspended.turn_id, {"c1": True})
    with pytest.raises(TurnStateError):
        runner.cancel(conversation, suspended.turn_id)
    assert recorder.calls == []
    check_memory(memory, [cancelled, _next_turn_works(runner, conversation)])


def test_cancel_of_finished_or_unknown_turns(store: Any, conversation: str) -> None:
    runner = _runner(store)
    done = _plain_turn(runner, conversation, 0)
    failed = runner.run(Agent("a", ScriptedChatModel([RuntimeError("x")])), conversation, "f")
    assert failed.status is TurnStatus.FAILED
    memory = store.chat_memory(conversation)
    before = memory.get_messages()
    for turn in (done, failed):
        with pytest.raises(TurnStateError):
            runner.cancel(conversation, turn.turn_id)
    with pytest.raises(TurnNotFoundError):
        runner.cancel(conversation, "no-such-turn")
    with pytest.raises(TurnNotFoundError):
        runner.turn(conversation, "no-such-turn")
    assert memory.get_messages() == before
    assert runner.turn(conversation, done.turn_id).status is TurnStatus.COMPLETED


class _BlockingModel:
    """A model whose first call blocks until released; later calls answer at once."""

    def __init__(self, first: AiMessage, then: AiMessage | None = None) -> None:
        self.first = first
        self.then = then
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.release.wait(20), "the test never released the model"
            return self.first
        assert self.then is not None, "unexpected model call"
        return self.then


def _run_in_thread(
    runner: AgentRunner, agent: Agent, conversation: str, turn_id: str
) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(runner.run(agent, conversation, "long task", turn_id=turn_id))
        except BaseException as error:  # reported to the test
            out.append(error)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, out


def _cancel_while_model_blocks(
    store: Any, conversation: str, reply: AiMessage, tool: Recorder
) -> tuple[AgentRunner, AgentTurn, AgentTurn]:
    model = _BlockingModel(reply, AiMessage("should not be asked"))
    runner = _runner(store)
    agent = Agent("a", model, tools=[Tool("t", tool, parameters={"type": "object"})])
    thread, out = _run_in_thread(runner, agent, conversation, "running-turn")
    assert model.entered.wait(20)
    view = runner.cancel(conversation, "running-turn")
    model.release.set()
    thread.join(20)
    assert not thread.is_alive()
    (turn,) = out
    assert isinstance(turn, AgentTurn), turn
    return runner, view, turn


def test_cancel_a_running_turn_from_another_thread(store: Any, conversation: str) -> None:
    tool = Recorder("done")
    runner, view, turn = _cancel_while_model_blocks(
        store, conversation, calls(call("c1", "t"), call("c2", "t")), tool
    )
    assert view.status is TurnStatus.RUNNING  # flagged: it ends at its next step
    assert turn.status is TurnStatus.CANCELLED
    assert turn.final_message is None
    assert runner.turn(conversation, "running-turn").status is TurnStatus.CANCELLED
    assert set(results_by_call(turn.messages)) == {"c1", "c2"}
    memory = store.chat_memory(conversation)
    check_memory(memory, [turn])
    check_memory(memory, [turn, _next_turn_works(runner, conversation)])


def test_cancel_acknowledged_during_a_final_answer_still_cancels(
    store: Any, conversation: str
) -> None:
    runner, view, turn = _cancel_while_model_blocks(
        store, conversation, AiMessage("final answer"), Recorder()
    )
    assert view.status is TurnStatus.RUNNING
    assert turn.status is TurnStatus.CANCELLED
    assert runner.turn(conversation, "running-turn").status is TurnStatus.CANCELLED


def test_no_tool_runs_after_cancel_was_acknowledged(store: Any, conversation: str) -> None:
    tool = Recorder("side effect")
    _, _, turn = _cancel_while_model_blocks(store, conversation, calls(call("c1", "t")), tool)
    assert turn.status is TurnStatus.CANCELLED
    assert tool.calls == []


# -- run_history ------------------------------------------------------------------------------


class _SpyProvider:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, conversation_id: str) -> ChatMemory:
        self.asked.append(conversation_id)
        return InMemoryChatMemory()


def test_run_history_copies_and_writes_nothing(store: Any, conversation: str) -> None:
    runner = _runner(store)
    earlier = [_plain_turn(runner, conversation, i) for i in range(3)]
    memory = store.chat_memory(conversation)
    history = memory.get_messages()
    snapshot = list(history)

    spy = _SpyProvider()
    explicit = AgentRunner(store, chat_memory_provider=spy)
    model = ScriptedChatModel([calls(call("c1", "t", {"q": 1})), AiMessage("explicit done")])
    agent = Agent("a", model, instructions=INSTRUCTIONS, tools=[Tool("t", lambda q: f"r{q}")])
    turn = explicit.run_history(agent, history, "new question")

    assert turn.status is TurnStatus.COMPLETED
    assert turn.conversation_id is None
    assert history == snapshot and len(history) == len(snapshot)
    assert spy.asked == []
    new_ids = ids(turn.messages)
    assert not set(new_ids) & set(ids(history))
    user, ai, result, final = turn.messages
    assert isinstance(user, UserMessage) and user.text == "new question"
    assert isinstance(result, ToolMessage) and result.text == "r1"
    assert turn.final_message == final and final.text == "explicit done"
    assert all(m.turn_id == turn.turn_id for m in turn.messages)
    expected = build_window([*history, user], system=INSTRUCTIONS)
    assert ids(model.calls[0].messages) == ids(expected.messages)
    assert ids(model.calls[1].messages) == ids(
        build_window([*history, user, ai, result], system=INSTRUCTIONS).messages
    )
    check_memory(memory, earlier)  # nothing written back
    with pytest.raises(TurnNotFoundError):
        explicit.turn(conversation, turn.turn_id)
    assert _next_turn_works(runner, conversation).status is TurnStatus.COMPLETED


def test_run_history_without_a_store() -> None:
    history = [UserMessage("old", message_id="u0"), AiMessage("old answer", message_id="a0")]
    tuple_history = tuple(history)
    model = ScriptedChatModel([AiMessage("fresh")])
    turn = AgentRunner().run_history(Agent("a", model), tuple_history, UserMessage("new"))
    assert turn.status is TurnStatus.COMPLETED
    assert ids(model.calls[0].messages) == ["u0", "a0", turn.messages[0].message_id]
    assert len(turn.messages) == 2 and turn.final_message == turn.messages[1]
    with pytest.raises(InvalidMessageTypeError):
        AgentRunner().run_history(Agent("a", model), [*history, "not a message"], "x")


# -- metrics ----------------------------------------------------------------------------------


def test_metrics(store: Any, conversation: str) -> None:
    metrics = InMemoryMetrics()
    runner = _runner(store, metrics=metrics)
    earlier = [_plain_turn(runner, conversation, i) for i in range(4)]

    truncated = ToolResultPage([1, 2, 3], has_more=False, truncated=True, truncation_reason="cap")
    pages = [ToolResultPage([{"row": 1}], has_more=True, next_cursor="p2"), truncated]

    def rows(query: str, cursor: str | None = None) -> ToolResultPage:
        return pages[1] if cursor else pages[0]

    tools = [Tool("rows", rows), Tool("broken", Recorder(KeyError("gone")))]
    compressor_calls: list[int] = []

    def compressor(messages: list[Message]) -> list[Message]:
        compressor_calls.append(len(messages))
        return messages

    model = ScriptedChatModel(
        [
            calls(call("c1", "rows", {"query": "q"}), call("c2", "broken")),
            calls(call("c3", "rows", {"query": "q", "cursor": "p2"})),
            AiMessage("three rows"),
        ]
    )
    agent = Agent(
        "metered", model, instructions=INSTRUCTIONS, tools=tools, context_compressor=compressor,
        compression_keep_recent_turns=1,
    )  # fmt: skip
    turn = runner.run(agent, conversation, "rows?")
    assert turn.status is TurnStatus.COMPLETED
    check_memory(store.chat_memory(conversation), [*earlier, turn])

    windows = [c.messages for c in model.calls]
    summary = metrics.get("agentctx_window_messages", agent="metered")
    assert summary.count == 3
    assert summary.total == sum(len(w) for w in windows)
    assert summary.maximum == max(len(w) for w in windows)
    tokens = metrics.get("agentctx_window_tokens", agent="metered")
    estimator = HeuristicTokenEstimator()
    assert tokens.count == 3 and tokens.total == sum(estimator.estimate(list(w)) for w in windows)

    results = results_by_call(turn.messages)
    row_chars = metrics.get("agentctx_tool_result_chars", tool="rows")
    assert row_chars.count == 2
    assert row_chars.total == len(results["c1"].text) + len(results["c3"].text)
    broken_chars = metrics.get("agentctx_tool_result_chars", tool="broken")
    assert broken_chars.total == len(results["c2"].text)
    assert metrics.get("agentctx_tool_calls", tool="rows").count == 2
    assert metrics.get("agentctx_tool_errors", tool="broken").count == 1
    assert metrics.get("agentctx_tool_errors", tool="rows").count == 0
    assert metrics.get("agentctx_tool_truncations", tool="rows").count == 1
    assert metrics.get("agentctx_tool_page_requests", tool="rows").count == 1
    assert metrics.get("agentctx_tool_page_requests", tool="broken").count == 0
    assert (
        metrics.get("agentctx_compressor_calls", agent="metered").count
        == len(compressor_calls)
        == 3
    )
    assert metrics.get("agentctx_compressor_failures", agent="metered").count == 0
    steps = metrics.get("agentctx_turn_steps", agent="metered", status="completed")
    assert (steps.count, steps.total) == (1, len(model.calls))
    snapshot = runner.turn_store.load_turn(conversation, turn.turn_id)
    assert snapshot is not None
    sizes = metrics.get("agentctx_snapshot_bytes", agent="metered")
    # one snapshot save per step, and one per tool step recording its calls as started before
    # they run (SPEC §20: neither tool is idempotent)
    assert sizes.count == len(model.calls) + 2
    assert sizes.maximum >= len(dump_snapshot(snapshot)) > 0


def test_metrics_of_failures(store: Any, conversation: str) -> None:
    metrics = InMemoryMetrics()
    runner = _runner(store, metrics=metrics)
    earlier = [_plain_turn(runner, conversation, i) for i in range(4)]

    def compressor(messages: list[Message]) -> list[Message]:
        raise RuntimeError("down")

    agent = Agent("m", ScriptedChatModel([]), context_compressor=compressor,
                  compression_keep_recent_turns=1)  # fmt: skip
    turn = runner.run(agent, conversation, "x")
    assert turn.status is TurnStatus.FAILED
    assert metrics.get("agentctx_compressor_calls", agent="m").count == 1
    assert metrics.get("agentctx_compressor_failures", agent="m").count == 1
    assert metrics.get("agentctx_window_messages", agent="m").count == 0
    steps = metrics.get("agentctx_turn_steps", agent="m", status="failed")
    assert (steps.count, steps.total) == (1, 0)
    only = metrics.get("agentctx_snapshot_bytes", agent="m")
    snapshot = runner.turn_store.load_turn(conversation, turn.turn_id)
    assert snapshot is not None
    assert (only.count, only.total) == (1, len(dump_snapshot(snapshot)))
    check_memory(store.chat_memory(conversation), [*earlier, turn])


# -- invalid arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call_kind", "error"),
    [
        ("agent", InvalidArgumentError),
        ("empty-conversation", InvalidArgumentError),
        ("int-conversation", InvalidArgumentError),
        ("ai-message", InvalidMessageTypeError),
        ("none-message", InvalidMessageTypeError),
        ("turn-id", InvalidArgumentError),
    ],
)
def test_invalid_run_arguments(
    store: Any, conversation: str, call_kind: str, error: type[AgentCtxError]
) -> None:
    model = ScriptedChatModel([AiMessage("x")])
    agent = Agent("a", model)
    runner = _runner(store)
    arguments: dict[str, Any] = {"agent": agent, "conversation_id": conversation, "message": "hi"}
    if call_kind == "agent":
        arguments["agent"] = "not an agent"
    elif call_kind == "empty-conversation":
        arguments["conversation_id"] = ""
    elif call_kind == "int-conversation":
        arguments["conversation_id"] = 7
    elif call_kind == "ai-message":
        arguments["message"] = AiMessage("I am the model")
    elif call_kind == "none-message":
        arguments["message"] = None
    else:
        arguments["turn_id"] = ""
    with pytest.raises(error) as raised:
        runner.run(**arguments)
    assert isinstance(raised.value, AgentCtxError)
    assert model.calls == []
    assert store.chat_memory(conversation).get_messages() == []
    assert runner.run(agent, conversation, "hi").status is TurnStatus.COMPLETED  # still free


def test_runner_without_memory() -> None:
    runner = AgentRunner()
    model = ScriptedChatModel([AiMessage("x")])
    with pytest.raises(InvalidArgumentError) as raised:
        runner.run(Agent("a", model), new_conversation_id(), "hi")
    assert isinstance(raised.value, AgentCtxError)
    assert model.calls == []
    with pytest.raises(InvalidArgumentError):
        AgentRunner(store="not a store")
    with pytest.raises(InvalidArgumentError):
        AgentRunner(InMemoryAgentStore(), lease_seconds=0)


def test_invalid_agents_and_tools() -> None:
    model = ScriptedChatModel([])
    for bad in (
        {"name": ""},
        {"chat_model": object()},
        {"instructions": 3},
        {"tools": ["not a tool"]},
        {"tools": [Tool("t", str), Tool("t", str)]},
        {"max_steps": 0},
        {"max_attached_turns": -1},
        {"context_compressor": "no"},
    ):
        arguments: dict[str, Any] = {"name": "a", "chat_model": model, **bad}
        with pytest.raises(InvalidArgumentError):
            Agent(**arguments)
    for tool_kwargs in ({"name": "bad name"}, {"fn": 3}, {"requires_approval": "yes"}):
        tool_arguments: dict[str, Any] = {"name": "t", "fn": str, **tool_kwargs}
        with pytest.raises(InvalidArgumentError):
            Tool(**tool_arguments)


# -- a lease taken over from a live runner ---------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_runner_that_lost_its_lease_writes_nothing_more() -> None:
    clock = _Clock()
    store = InMemoryAgentStore()
    conversation = new_conversation_id()
    slow = AgentRunner(store, lease_seconds=1.0, clock=clock)
    slow.close()  # no renewing thread: the lease expires when the clock moves on
    entered, release = threading.Event(), threading.Event()

    def long_tool() -> str:
        entered.set()
        release.wait(20)
        return "late result"

    model = ScriptedChatModel([calls(call("c1", "long_tool")), AiMessage("slow done")])
    agent = Agent("a", model, tools=[Tool("long_tool", long_tool)])
    thread, out = _run_in_thread(slow, agent, conversation, "slow-turn")
    try:
        assert entered.wait(20)
        clock.now += 10
        fast = AgentRunner(store, lease_seconds=1.0, clock=clock)
        taken = fast.run(Agent("b", ScriptedChatModel([AiMessage("fast")])), conversation, "hi")
        assert taken.status is TurnStatus.COMPLETED
        assert fast.turn(conversation, "slow-turn").status is TurnStatus.FAILED
        memory = store.chat_memory(conversation)
        after_takeover = memory.get_messages()
        assert validate_tool_protocol(after_takeover) == []
    finally:
        release.set()
        thread.join(20)
    assert len(out) == 1  # the slow runner returned or raised, it did not hang
    assert memory.get_messages() == after_takeover


@pytest.mark.parametrize("reply", ["final", "tool call"])
def test_a_reply_that_arrives_after_a_takeover_is_not_written(reply: str) -> None:
    clock = _Clock()
    store = InMemoryAgentStore()
    conversation = new_conversation_id()
    slow = AgentRunner(store, lease_seconds=1.0, clock=clock)
    slow.close()  # no renewing thread: the lease expires when the clock moves on
    tool = Recorder("side effect")
    late = AiMessage("late answer") if reply == "final" else calls(call("c1", "t"))
    model = _BlockingModel(late, AiMessage("should not be asked"))
    agent = Agent("a", model, tools=[Tool("t", tool, parameters={"type": "object"})])
    thread, out = _run_in_thread(slow, agent, conversation, "slow-turn")
    try:
        assert model.entered.wait(20)
        clock.now += 10
        fast = AgentRunner(store, lease_seconds=1.0, clock=clock)
        taken = fast.run(Agent("b", ScriptedChatModel([AiMessage("fast")])), conversation, "hi")
        assert taken.status is TurnStatus.COMPLETED
        memory = store.chat_memory(conversation)
        after_takeover = memory.get_messages()
    finally:
        model.release.set()
        thread.join(20)
    (turn,) = out  # the late runner's call ends with LeaseLostError (SPEC §20)
    assert isinstance(turn, LeaseLostError) and "lease lost" in str(turn)
    assert tool.calls == []
    assert memory.get_messages() == after_takeover
    assert "late answer" not in [m.text for m in after_takeover if isinstance(m, AiMessage)]


@pytest.mark.parametrize("turn_id", [None, "", "t\x00", "t\ud800", 7])
def test_turn_ids_follow_the_identifier_rules(store: Any, conversation: str, turn_id: Any) -> None:
    runner = _runner(store)
    agent = Agent("a", ScriptedChatModel([AiMessage("never")]))
    for operation in (
        lambda: runner.turn(conversation, turn_id),
        lambda: runner.cancel(conversation, turn_id),
        lambda: runner.resume(agent, conversation, turn_id, {}),
    ):
        with pytest.raises(InvalidArgumentError, match="turn_id"):
            operation()
    if turn_id is not None:
        with pytest.raises(InvalidArgumentError, match="turn_id"):
            runner.run(agent, conversation, "hi", turn_id=turn_id)
    assert store.chat_memory(conversation).get_messages() == []


class _BlockingTool:
    """A tool function whose first call blocks until released, then returns ``result``."""

    def __init__(self, result: str) -> None:
        self.result = result
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(20), "the test never released the tool"
        return self.result


def test_a_tool_that_ran_keeps_its_result_when_a_cancel_came_meanwhile(
    store: Any, conversation: str
) -> None:
    slow = _BlockingTool("refund RF-1 issued")
    after = Recorder("should not run")
    model = ScriptedChatModel([calls(call("c1", "refund"), call("c2", "after"))])
    agent = Agent("a", model, tools=[Tool("refund", slow), Tool("after", after)])
    runner = _runner(store)
    thread, out = _run_in_thread(runner, agent, conversation, "running-turn")
    assert slow.entered.wait(20)
    assert runner.cancel(conversation, "running-turn").status is TurnStatus.RUNNING
    slow.release.set()
    thread.join(20)
    (turn,) = out
    assert isinstance(turn, AgentTurn) and turn.status is TurnStatus.CANCELLED
    results = results_by_call(turn.messages)
    assert (results["c1"].text, results["c1"].is_error) == ("refund RF-1 issued", False)
    assert results["c2"].is_error and results["c2"].text.startswith("not run")
    assert after.calls == []
    check_memory(store.chat_memory(conversation), [turn])


def test_a_cancel_mid_step_closes_the_approval_forms_of_that_step(
    store: Any, conversation: str
) -> None:
    slow = _BlockingTool("rows")
    refund = Tool("refund", Recorder("refunded"), parameters={"type": "object"},
                  requires_approval=True)  # fmt: skip
    model = ScriptedChatModel([calls(call("c1", "refund"), call("c2", "lookup"))])
    agent = Agent("a", model, tools=[refund, Tool("lookup", slow)])
    runner = _runner(store)
    thread, out = _run_in_thread(runner, agent, conversation, "running-turn")
    assert slow.entered.wait(20)
    runner.cancel(conversation, "running-turn")
    slow.release.set()
    thread.join(20)
    (turn,) = out
    assert isinstance(turn, AgentTurn) and turn.status is TurnStatus.CANCELLED
    (form,) = _forms(turn.messages)
    assert form.status == "cancelled"
    stored = store.chat_memory(conversation).get_message(form.message_id)
    assert stored is not None and stored.status == "cancelled" and stored.version == 1
    assert set(results_by_call(turn.messages)) == {"c1", "c2"}
    check_memory(store.chat_memory(conversation), [turn])


def test_a_cancel_from_another_runner_stops_the_turn_before_its_tools(
    store: Any, conversation: str
) -> None:
    tool = Recorder("side effect")
    model = _BlockingModel(calls(call("c1", "t")), AiMessage("should not be asked"))
    agent = Agent("a", model, tools=[Tool("t", tool, parameters={"type": "object"})])
    running, other = _runner(store), _runner(store)  # two service instances
    thread, out = _run_in_thread(running, agent, conversation, "running-turn")
    assert model.entered.wait(20)
    assert other.cancel(conversation, "running-turn").status is TurnStatus.RUNNING
    model.release.set()
    thread.join(20)
    (turn,) = out
    assert isinstance(turn, AgentTurn) and turn.status is TurnStatus.CANCELLED
    assert tool.calls == [] and model.calls == 1
    assert other.turn(conversation, "running-turn").status is TurnStatus.CANCELLED
    check_memory(store.chat_memory(conversation), [turn])


def test_a_compressor_that_fails_after_a_takeover_reports_the_lost_lease() -> None:
    clock = _Clock()
    store = InMemoryAgentStore()
    conversation = new_conversation_id()
    setup = AgentRunner(store, clock=clock)
    for index in range(4):  # history turns old enough to reach the compressor
        _plain_turn(setup, conversation, index)
    entered, release = threading.Event(), threading.Event()

    def compressor(messages: list[Message]) -> list[Message]:
        entered.set()
        assert release.wait(20)
        raise CompressionError("summary model down")

    slow = AgentRunner(store, lease_seconds=1.0, clock=clock)
    slow.close()  # no renewing thread: the lease expires when the clock moves on
    agent = Agent("a", ScriptedChatModel([AiMessage("never")]), context_compressor=compressor,
                  compression_keep_recent_turns=0)  # fmt: skip
    thread, out = _run_in_thread(slow, agent, conversation, "slow-turn")
    try:
        assert entered.wait(20)
        clock.now += 10
        fast = AgentRunner(store, lease_seconds=1.0, clock=clock)
        taken = fast.run(Agent("b", ScriptedChatModel([AiMessage("fast")])), conversation, "hi")
        assert taken.status is TurnStatus.COMPLETED
        after_takeover = store.chat_memory(conversation).get_messages()
    finally:
        release.set()
        thread.join(20)
    (turn,) = out
    assert isinstance(turn, LeaseLostError) and "lease lost" in str(turn), turn
    assert store.chat_memory(conversation).get_messages() == after_takeover


# ---------------------------------------------------------------------------------------------
# Token budgets are budgets for the model (SPEC §20)
# ---------------------------------------------------------------------------------------------


class NamedScriptedChatModel(ScriptedChatModel):
    """A scripted model that names its model, as the client adapters do."""

    def __init__(self, model_name: str, replies: Sequence[AiMessage]) -> None:
        super().__init__(replies)
        self.model_name = model_name


def _json_turn_model(model_name: str) -> NamedScriptedChatModel:
    """A turn whose tool result is JSON with timestamps, ids, numbers and Chinese values."""
    return NamedScriptedChatModel(
        model_name, [calls(call("c1", "lookup", {"order_id": "ORD-2024-001"})), AiMessage("ok")]
    )


def _lookup(order_id: str) -> str:
    events = [
        {"time": f"2024-03-{day:02d} 08:23:41", "context": "快件已到达上海浦东转运中心", "n": day}
        for day in range(1, 9)
    ]
    return json.dumps({"id": order_id, "amount": 1299.5, "events": events}, ensure_ascii=False)


def _exact(encoding: str) -> Any:
    from agentctx_fast import BackendUnavailableError, BpeTokenEstimator

    try:
        return BpeTokenEstimator(encoding)
    except BackendUnavailableError as error:
        pytest.skip(str(error))


@pytest.mark.parametrize(
    ("model_name", "encoding"), [("gpt-4o", "o200k_base"), ("gpt-4-0613", "cl100k_base")]
)
def test_a_named_model_gets_exact_window_counts(model_name: str, encoding: str) -> None:
    exact = _exact(encoding)
    metrics = InMemoryMetrics()
    model = _json_turn_model(model_name)
    agent = Agent("named", model, instructions=INSTRUCTIONS, tools=[Tool("lookup", _lookup)])
    turn = AgentRunner(InMemoryAgentStore(), metrics=metrics).run(agent, "c-named", "订单状态?")
    assert turn.status is TurnStatus.COMPLETED
    windows = [list(c.messages) for c in model.calls]
    tokens = metrics.get("agentctx_window_tokens", agent="named")
    assert tokens.count == 2
    assert tokens.total == sum(exact.estimate(w) for w in windows)
    assert tokens.total != sum(HeuristicTokenEstimator().estimate(w) for w in windows)
    # Computed once per agent and model, and shared by agents of the same model.
    again = Agent("again", _json_turn_model(model_name))
    assert again.window_options.token_estimator is agent.window_options.token_estimator
    # A model of an unknown vocabulary, a model without a name: the core's heuristic; an
    # estimator the agent was given is kept.
    assert Agent("local", _json_turn_model("my-llama")).window_options.token_estimator is None
    assert Agent("plain", ScriptedChatModel([])).window_options.token_estimator is None
    given = HeuristicTokenEstimator("o200k_base")
    chosen = Agent("given", _json_turn_model(model_name), token_estimator=given)
    assert chosen.window_options.token_estimator is given


def test_a_named_model_budget_is_counted_exactly() -> None:
    """max_attached_tokens cuts the window where the exact count says, not the heuristic."""
    exact = _exact("o200k_base")
    store = InMemoryAgentStore()
    runner = AgentRunner(store)
    tools = [Tool("lookup", _lookup)]
    for i in range(6):
        model = _json_turn_model("gpt-4o")
        runner.run(Agent("named", model, tools=tools), "c-budget", f"订单 {i}?")
    timeline = [*store.chat_memory("c-budget").get_messages(), UserMessage("再查一次")]

    def window(budget: int, estimator: Any) -> list[str]:
        built = build_window(timeline, max_attached_tokens=budget, token_estimator=estimator)
        return ids(built.messages)[:-1]  # the new user message gets its id from the runner

    heuristic = HeuristicTokenEstimator()
    budget = next(b for b in range(200, 20_000, 7) if window(b, exact) != window(b, heuristic))
    model = NamedScriptedChatModel("gpt-4o", [AiMessage("ok")])
    runner.run(Agent("named", model, max_attached_tokens=budget), "c-budget", "再查一次")
    sent = ids(model.calls[0].messages)[:-1]
    assert sent == window(budget, exact) != window(budget, heuristic)
