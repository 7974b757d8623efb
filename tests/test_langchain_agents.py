"""The window inside LangChain v1 agents (`AgentCtxMiddleware` for ``create_agent``) and
LangGraph's ``create_react_agent`` (`agentctx_pre_model_hook`), SPEC §23: over a long
multi-turn conversation with small limits, every model call gets a valid window (the system
prompt, then a user message, every call with its result, within the limits, the current turn
whole) and the graph's state keeps every message. Run on both cores."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core import messages as lc
from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from agentctx_fast import InvalidArgumentError, build_window
from agentctx_fast.integrations.langchain import (
    AgentCtxMiddleware,
    agentctx_pre_model_hook,
    from_langchain,
)
from langchain_blocks import SIGNATURE

PROMPT = "You are a support agent."
TURNS = 8
CALLS_PER_TURN = 2  # each turn: question, (call, result) x 2, answer: 6 messages

LIMITS = [
    {"max_attached_turns": 2, "max_attached_messages": 8},
    {"max_attached_turns": 3, "compact_completed_tool_turns": True,
     "compression_keep_recent_turns": 1},
    {"max_attached_turns": 10, "max_attached_tokens": 400},
]  # fmt: skip


@tool
def get_order(order_id: str) -> str:
    """Look an order up."""
    return f"{order_id} shipped"


class ScriptedModel(BaseChatModel):
    """Answers each question after two tool calls, in Anthropic's shapes (thinking, text,
    tool_use blocks); records every input it is called with."""

    seen: list[list[lc.BaseMessage]] = []  # noqa: RUF012 (a pydantic field, set per model)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[lc.BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        last_human = max(i for i, m in enumerate(messages) if isinstance(m, lc.HumanMessage))
        turn = str(messages[last_human].content).removeprefix("question ")
        step = sum(isinstance(m, lc.ToolMessage) for m in messages[last_human:])
        thinking = {"type": "thinking", "thinking": f"turn {turn} step {step}",
                    "signature": SIGNATURE}  # fmt: skip
        if step < CALLS_PER_TURN:
            call_id = f"toolu_{turn}_{step}"
            reply = lc.AIMessage(
                [thinking, {"type": "text", "text": "Looking."},
                 {"type": "tool_use", "id": call_id, "name": "get_order",
                  "input": {"order_id": f"ORD-{turn}"}}],
                tool_calls=[{"name": "get_order", "args": {"order_id": f"ORD-{turn}"},
                             "id": call_id, "type": "tool_call"}],
                response_metadata={"model_provider": "anthropic"},
            )  # fmt: skip
        else:
            reply = lc.AIMessage([thinking, {"type": "text", "text": f"ORD-{turn} shipped."}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _check_input(
    sent: list[lc.BaseMessage], state: list[lc.BaseMessage], limits: dict[str, Any], counted: int
) -> None:
    """``sent`` is a valid window of ``state`` (the final graph state) under ``limits``; a
    token limit holds for ``sent[counted:]`` (the hook's window leaves the prompt out)."""
    assert isinstance(sent[0], lc.SystemMessage) and sent[0].content == PROMPT
    assert isinstance(sent[1], lc.HumanMessage)
    body = sent[1:]
    open_calls: set[str] = set()
    for message in body:  # every call answered before the next step; no orphan result
        if isinstance(message, lc.HumanMessage):
            assert not open_calls
        elif isinstance(message, lc.AIMessage):
            assert not open_calls
            open_calls = {call["id"] for call in message.tool_calls}
        elif isinstance(message, lc.ToolMessage):
            open_calls.remove(message.tool_call_id)
    assert not open_calls
    humans = [i for i, m in enumerate(body) if isinstance(m, lc.HumanMessage)]
    assert len(humans) <= limits["max_attached_turns"] + 1
    if "max_attached_messages" in limits:
        assert humans[-1] <= limits["max_attached_messages"]  # history messages
    if "max_attached_tokens" in limits and len(humans) > 1:  # history attached: it fits
        window = build_window(from_langchain(sent[counted:]), max_attached_turns=100)
        assert window.estimated_tokens <= limits["max_attached_tokens"]
    # Whole turns of the state, in order; the current turn whole.
    position = {m.id: i for i, m in enumerate(state)}
    places = [position[m.id] for m in body]
    assert places == sorted(places)
    current = places[humans[-1]]
    assert places[humans[-1] :] == list(range(current, current + len(body) - humans[-1]))
    assert all(
        sent_m is not None and sent_m.id == state[p].id
        for sent_m, p in zip(body, places, strict=True)
    )


def _check_run(
    model: ScriptedModel, state: list[lc.BaseMessage], limits: dict[str, Any], counted: int
) -> None:
    per_turn = 2 + 2 * CALLS_PER_TURN
    assert len(state) == TURNS * per_turn  # the graph's state keeps every message
    assert [m.content for m in state if isinstance(m, lc.HumanMessage)] == [
        f"question {n}" for n in range(TURNS)
    ]
    assert len({m.id for m in state}) == len(state)
    assert len(model.seen) == TURNS * (CALLS_PER_TURN + 1)
    for sent in model.seen:
        _check_input(sent, state, limits, counted)
    assert len(model.seen[-1]) - 1 < len(state) - 1  # a window, not all before the answer


def _run(agent: Any, asynchronous: bool) -> list[lc.BaseMessage]:
    config = {"configurable": {"thread_id": "conversation-1"}}

    async def turns() -> None:
        for n in range(TURNS):
            await agent.ainvoke({"messages": [lc.HumanMessage(f"question {n}")]}, config)

    if asynchronous:
        asyncio.run(turns())
    else:
        for n in range(TURNS):
            agent.invoke({"messages": [lc.HumanMessage(f"question {n}")]}, config)
    messages: list[lc.BaseMessage] = agent.get_state(config).values["messages"]
    return messages


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("limits", LIMITS, ids=["turns-messages", "compacted", "tokens"])
def test_create_agent_with_the_middleware(limits: dict[str, Any], asynchronous: bool) -> None:
    from langchain.agents import create_agent

    model = ScriptedModel(seen=[])
    agent = create_agent(
        model,
        [get_order],
        system_prompt=PROMPT,
        middleware=[AgentCtxMiddleware(**limits)],
        checkpointer=InMemorySaver(),
    )
    _check_run(model, _run(agent, asynchronous), {"max_attached_turns": 10, **limits}, 0)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("limits", LIMITS, ids=["turns-messages", "compacted", "tokens"])
def test_create_react_agent_with_the_pre_model_hook(
    limits: dict[str, Any], asynchronous: bool
) -> None:
    with warnings.catch_warnings():  # create_react_agent is deprecated for create_agent
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        model = ScriptedModel(seen=[])
        agent = create_react_agent(
            model,
            [get_order],
            prompt=PROMPT,
            pre_model_hook=agentctx_pre_model_hook(**limits),
            checkpointer=InMemorySaver(),
        )
    _check_run(model, _run(agent, asynchronous), {"max_attached_turns": 10, **limits}, 1)


def test_the_token_limit_counts_the_system_prompt() -> None:
    """The middleware builds the window with the request's system message, so a token limit
    holds for what the model reads."""
    from langchain.agents import create_agent

    model = ScriptedModel(seen=[])
    long_prompt = PROMPT + " Always answer politely." * 40
    agent = create_agent(
        model, [get_order], system_prompt=long_prompt,
        middleware=[AgentCtxMiddleware(max_attached_tokens=600)], checkpointer=InMemorySaver(),
    )  # fmt: skip
    _run(agent, False)
    for sent in model.seen:
        window = build_window(from_langchain(sent), max_attached_turns=100)
        current = max(i for i, m in enumerate(sent) if isinstance(m, lc.HumanMessage))
        if current > 1:  # history was attached: the whole input fits the limit
            assert window.estimated_tokens <= 600


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: AgentCtxMiddleware(system="x"), "keeps the agent's system prompt"),
        (lambda: AgentCtxMiddleware(max_turns=2), "unknown window option 'max_turns'"),
        (lambda: AgentCtxMiddleware(max_attached_turns=-1), "max_attached_turns must be"),
        (lambda: agentctx_pre_model_hook(bogus=1), "unknown window option 'bogus'"),
    ],
)
def test_options_are_checked_when_made(make: Callable[[], Any], problem: str) -> None:
    with pytest.raises(InvalidArgumentError, match=problem):
        make()


def test_the_hook_reads_state_objects_and_refuses_a_state_without_messages() -> None:
    hook = agentctx_pre_model_hook(max_attached_turns=0)

    class State:
        def __init__(self) -> None:
            self.messages = [
                lc.HumanMessage("q1", id="u1"),
                lc.AIMessage("a", id="a1"),
                lc.HumanMessage("q2", id="u2"),
            ]

    assert [m.id for m in hook(State())["llm_input_messages"]] == ["u2"]
    with pytest.raises(InvalidArgumentError, match="no 'messages'"):
        hook({})


def test_langchain_core_alone_runs_all_but_the_middleware() -> None:
    """Without the ``langchain`` package the module imports, the hook, the history and the
    converters work, and only making the middleware names the extra."""
    from test_missing_extras import _run

    code = (
        "from langchain_core.messages import HumanMessage\n"
        "from agentctx_fast import InMemoryAgentStore\n"
        "from agentctx_fast.integrations.langchain import (\n"
        "    AgentCtxChatMessageHistory, AgentCtxMiddleware, agentctx_pre_model_hook)\n"
        "hook = agentctx_pre_model_hook(max_attached_turns=0)\n"
        "print(len(hook({'messages': [HumanMessage('q')]})['llm_input_messages']))\n"
        "history = AgentCtxChatMessageHistory('s', InMemoryAgentStore())\n"
        "history.add_messages([HumanMessage('q', id='u1')])\n"
        "print([m.id for m in history.messages])\n"
        "try:\n    AgentCtxMiddleware()\n"
        "except Exception as error:\n    print(type(error).__name__, error)\n"
    )
    result = _run("langchain", "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "1",
        "['u1']",
        "MissingDependencyError langchain is not installed; install the extra: "
        "pip install 'agentctx-fast[langchain]'",
    ]
