"""`AgentCtxChatMessageHistory` on every store, blocking and async (SPEC §23): LangChain
messages with provider content blocks come back as they were added, ``add_messages`` is one
batch write, and ``RunnableWithMessageHistory`` runs on it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langchain_core import messages as lc
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from agentctx_fast import AgentCtxError, InvalidArgumentError, WindowOptions
from agentctx_fast.integrations.langchain import AgentCtxChatMessageHistory
from agentctx_fast.memory import awaitable_memory
from langchain_blocks import CASES, LOSSY, SIGNATURE
from store_fixtures import ASYNC_STORE_KINDS, make_async_store, new_conversation_id, store_url
from test_langchain_blocks import _conversation


def _same(read: list[lc.BaseMessage], added: list[lc.BaseMessage]) -> None:
    """Every message read is the one added (a call only in content also in tool_calls)."""
    lossy = {message.id for name, message, _ in CASES if name in LOSSY}
    assert [m.id for m in read] == [m.id for m in added]
    for back, message in zip(read, added, strict=True):
        if message.id in lossy:
            assert back.content == message.content
        else:
            assert back == message, message.id


def test_every_message_kind_comes_back_from_every_store(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = AgentCtxChatMessageHistory(new_conversation_id(), store)
    batches: list[int] = []
    one_implementation = type(awaitable_memory(store.chat_memory("probe")))
    batch_write = one_implementation.add_messages_if_absent

    async def counted(self: Any, messages: Any) -> list[bool]:
        batches.append(len(messages))
        return await batch_write(self, messages)

    monkeypatch.setattr(one_implementation, "add_messages_if_absent", counted)
    conversation = _conversation()
    history.add_messages(conversation)
    assert batches == [len(conversation)]  # one batch write
    _same(history.messages, conversation)
    history.add_messages(conversation[:3])  # stored ids are not added again
    _same(asyncio.run(history.aget_messages()), conversation)
    later = [lc.HumanMessage("one more", id="later")]
    asyncio.run(history.aadd_messages(later))
    _same(history.messages, conversation + later)
    history.clear()
    assert history.messages == []
    history.add_messages(later)
    asyncio.run(history.aclear())
    assert history.messages == []


def test_a_window_of_the_stored_history(store: Any) -> None:
    conversation = _conversation()
    session = new_conversation_id()
    AgentCtxChatMessageHistory(session, store).add_messages(conversation)
    windowed = AgentCtxChatMessageHistory(
        session, store, window=WindowOptions(max_attached_turns=2, current_turn="none")
    )
    read = windowed.messages
    assert read[0] == conversation[0]  # the system message
    humans = [m for m in read if isinstance(m, lc.HumanMessage)]
    assert [m.id for m in humans] == [m.id for m in conversation if isinstance(m, lc.HumanMessage)][
        -2:
    ]
    start = [m.id for m in conversation].index(humans[0].id)
    _same(read[1:], conversation[start:])


def _chain(replies: list[lc.AIMessage], store: Any) -> Any:
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "You are a support agent."),
            MessagesPlaceholder("history"),
            ("human", "{question}"),
        ]
    )
    model = FakeMessagesListChatModel(responses=replies)
    return RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: AgentCtxChatMessageHistory(session_id, store),
        input_messages_key="question",
        history_messages_key="history",
    )


def _replies() -> list[lc.AIMessage]:
    thinking = {"type": "thinking", "thinking": "Look it up.", "signature": SIGNATURE}
    return [
        lc.AIMessage([thinking, {"type": "text", "text": "ORD-7 shipped."}], id="r1",
                     response_metadata={"model_provider": "anthropic"}),
        lc.AIMessage("It arrives Monday.", id="r2"),
    ]  # fmt: skip


def _check_chain_history(stored: list[lc.BaseMessage], replies: list[lc.AIMessage]) -> None:
    assert [type(m).__name__ for m in stored] == ["HumanMessage", "AIMessage"] * 2
    assert stored[1] == replies[0] and stored[3].content == replies[1].content


def test_runnable_with_message_history_on_every_store(store: Any) -> None:
    replies = _replies()
    chain = _chain(replies, store)
    config = {"configurable": {"session_id": new_conversation_id()}}
    assert chain.invoke({"question": "Where is ORD-7?"}, config).content == replies[0].content
    assert chain.invoke({"question": "When does it arrive?"}, config).text == "It arrives Monday."
    session = config["configurable"]["session_id"]
    _check_chain_history(AgentCtxChatMessageHistory(session, store).messages, replies)


@pytest.fixture(params=ASYNC_STORE_KINDS)
def async_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _on_async_store(
    kind: str, request: pytest.FixtureRequest, body: Callable[[Any], Awaitable[None]]
) -> None:
    base = kind.removeprefix("async-")
    url = store_url(base, request)

    async def main() -> None:
        store = await make_async_store(base, url)
        try:
            await body(store)
        finally:
            await store.aclose()

    asyncio.run(main())


def test_every_message_kind_comes_back_from_every_async_store(
    async_kind: str, request: pytest.FixtureRequest
) -> None:
    conversation = _conversation()

    async def body(store: Any) -> None:
        history = AgentCtxChatMessageHistory(new_conversation_id(), store)
        await history.aadd_messages(conversation)
        await history.aadd_messages(conversation[:2])
        _same(await history.aget_messages(), conversation)
        for blocking in (lambda: history.messages, history.clear,
                         lambda: history.add_messages(conversation)):  # fmt: skip
            with pytest.raises(InvalidArgumentError, match="async store: use aget_messages"):
                blocking()
        replies = _replies()
        chain = _chain(replies, store)
        config = {"configurable": {"session_id": new_conversation_id()}}
        await chain.ainvoke({"question": "Where is ORD-7?"}, config)
        await chain.ainvoke({"question": "When does it arrive?"}, config)
        session = config["configurable"]["session_id"]
        _check_chain_history(
            await AgentCtxChatMessageHistory(session, store).aget_messages(), replies
        )
        await history.aclear()
        assert await history.aget_messages() == []

    _on_async_store(async_kind, request, body)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (("s", object()), "store must be an agent store"),
        (("s", "store"), "store must be an agent store"),
        (("a\x00b", None), "session_id"),
    ],
)
def test_bad_arguments_are_named(arguments: tuple[Any, ...], problem: str) -> None:
    with pytest.raises(InvalidArgumentError, match=problem):
        AgentCtxChatMessageHistory(*arguments)


def test_a_window_must_be_window_options() -> None:
    from agentctx_fast import InMemoryAgentStore

    with pytest.raises(InvalidArgumentError, match="window must be a WindowOptions"):
        AgentCtxChatMessageHistory("s", InMemoryAgentStore(), window={"max_attached_turns": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [None, lc.HumanMessage("one"), [lc.HumanMessage("ok"), "not one"]])
def test_a_bad_batch_is_refused_and_writes_nothing(bad: Any) -> None:
    from agentctx_fast import InMemoryAgentStore

    history = AgentCtxChatMessageHistory("s", InMemoryAgentStore())
    with pytest.raises(AgentCtxError, match=r"^messages"):
        history.add_messages(bad)
    with pytest.raises(AgentCtxError, match=r"^messages"):
        asyncio.run(history.aadd_messages(bad))
    assert history.messages == []
