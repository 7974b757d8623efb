"""`AgentCtxSession` beside the OpenAI Agents SDK's own sessions, and the input filter's cost
(issue 29), one run, side by side.

Each session holds the same items (1,000 and 10,000; tool-heavy turns with reasoning items
carrying encrypted content, parallel function calls, outputs of 200-1,500 characters). Ours:
``get_items()`` with a window (`WindowOptions()` defaults: the last 10 turns, at most 100
messages; about 50 items) on the blocking SQLite and Redis stores and on their asyncio twins
(``warm``: the default decoded-record cache; ``cold``: the cache off). The peer rows:
``SQLiteSession.get_items()`` and ``RedisSession.get_items()`` (the SDK's default, every item:
what a session without a window gives the run), and ``get_items(limit=N)`` with N the number
of items our window returns (the same count of items, not the same items: the SDK's last N).
Then one ``Runner.run`` turn (a scripted model, no network) with a 1,000-item input, with and
without `AgentCtxInputFilter`, and the filter alone on that input: its share of a turn.

The SDK is the ``openai-agents`` extra; its sessions are async, so every row runs on one event
loop kept for the whole module (a blocking store's session reads in a worker thread, as it
does in a service).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agentctx_fast import WindowOptions
from agentctx_fast.stores.redis import AsyncRedisAgentStore, RedisAgentStore
from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore

agents = pytest.importorskip("agents")
integration = pytest.importorskip("agentctx_fast.integrations.openai_agents")
redis_session = pytest.importorskip("agents.extensions.memory.redis_session")

from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.run_config import CallModelData, ModelInputData  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402

SIZES = (1_000, 10_000)
KINDS = ("sqlite", "redis")


def session_items(size: int, seed: int = 7) -> list[dict[str, Any]]:
    """``size`` items of tool-heavy turns, as the SDK stores them."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    turn = 0
    while len(out) < size:
        out.append({"role": "user", "content": f"question {turn} about ORD-{turn:06d}"})
        if turn % 3 != 2:
            out.append(
                {"type": "reasoning", "id": f"rs_{turn}", "summary": [],
                 "encrypted_content": "gAAAA" + "x" * rng.randint(300, 800)}
            )  # fmt: skip
            calls = [f"call_{turn}_{i}" for i in range(rng.randint(1, 2))]
            out.extend(
                {"type": "function_call", "id": f"fc_{c}", "call_id": c, "name": "get_order",
                 "arguments": f'{{"order_id": "ORD-{turn:06d}"}}', "status": "completed"}
                for c in calls
            )  # fmt: skip
            out.extend(
                {"type": "function_call_output", "call_id": c,
                 "output": '{"status": "shipped"}' + " detail" * rng.randint(30, 220)}
                for c in calls
            )  # fmt: skip
        out.append(
            {"id": f"msg_{turn}", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": f"answer {turn}: " + "words " * 30,
                          "annotations": [], "logprobs": []}]}
        )  # fmt: skip
        turn += 1
    return out[:size]


def _load(loop: Any, session: Any, items: list[dict[str, Any]]) -> None:
    for start in range(0, len(items), 1_000):
        loop.run_until_complete(session.add_items(items[start : start + 1_000]))


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


class Setup:
    """One kind's stores (blocking and asyncio, warm and cold, over the same records) and the
    peer's sessions, loaded once."""

    def __init__(self, kind: str, request: pytest.FixtureRequest, tmp: Any, loop: Any) -> None:
        self.kind = kind
        self.loop = loop
        tag = uuid.uuid4().hex[:8]
        if kind == "sqlite":
            path = tmp.mktemp("sessions") / "ours.db"
            self.store: Any = SqlAgentStore(f"sqlite:///{path}")
            self.store.schema.initialize()
            self.cold: Any = SqlAgentStore(self.store.engine, message_cache_size=0)
            self.async_store: Any = AsyncSqlAgentStore(f"sqlite:///{path}")
            self.async_cold: Any = AsyncSqlAgentStore(self.async_store.engine, message_cache_size=0)
            peer_path = tmp.mktemp("peer") / "peer.db"
            self.peer = lambda sid: agents.SQLiteSession(sid, str(peer_path))
        else:
            url = request.getfixturevalue("redis_server").url
            prefix = f"s{tag}:"
            self.store = RedisAgentStore(url, key_prefix=prefix)
            self.cold = RedisAgentStore(self.store.client, key_prefix=prefix, message_cache_size=0)
            self.async_store = AsyncRedisAgentStore(url, key_prefix=prefix)
            self.async_cold = AsyncRedisAgentStore(
                self.async_store.client, key_prefix=prefix, message_cache_size=0
            )
            self.peer = lambda sid: redis_session.RedisSession.from_url(
                sid, url=url, key_prefix=f"p{tag}"
            )
        self.ids: dict[int, str] = {}
        self.peers: dict[int, Any] = {}
        self.window_items: dict[int, int] = {}  # how many items our window returns
        for size in SIZES:
            session_id = f"sessions-{size}-{tag}"
            items = session_items(size)
            ours = integration.AgentCtxSession(session_id, self.store, window=WindowOptions())
            _load(loop, ours, items)
            self.peers[size] = self.peer(session_id)
            _load(loop, self.peers[size], items)
            self.ids[size] = session_id
            self.window_items[size] = len(loop.run_until_complete(ours.get_items()))

    def ours(self, side: str, size: int) -> Any:
        stores = {
            "ours-warm": self.store,
            "ours-cold": self.cold,
            "ours-async-warm": self.async_store,
            "ours-async-cold": self.async_cold,
        }
        return integration.AgentCtxSession(self.ids[size], stores[side], window=WindowOptions())

    def close(self) -> None:
        self.store.close()
        self.loop.run_until_complete(self.async_store.aclose())


@pytest.fixture(scope="module", params=KINDS)
def setup(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    loop: asyncio.AbstractEventLoop,
) -> Iterator[Setup]:
    loaded = Setup(str(request.param), request, tmp_path_factory, loop)
    yield loaded
    loaded.close()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(
    "side",
    [
        "ours-warm",
        "ours-cold",
        "ours-async-warm",
        "ours-async-cold",
        "peer-get_items",
        "peer-get_items-limit",
    ],
)
def test_get_items(benchmark: Any, setup: Setup, loop: Any, size: int, side: str) -> None:
    benchmark.group = f"sessions: get_items, {setup.kind}, {size} items"
    count = setup.window_items[size]
    benchmark.extra_info["window_items"] = count
    if side.startswith("peer"):
        session = setup.peers[size]
        limit = count if side == "peer-get_items-limit" else None
        items = benchmark(lambda: loop.run_until_complete(session.get_items(limit)))
        assert len(items) == (size if limit is None else count)
        return
    ours = setup.ours(side, size)
    items = benchmark(lambda: loop.run_until_complete(ours.get_items()))
    assert len(items) == count and items[0].get("role") == "user"


class _Scripted(Model):
    """Answers every call with one assistant message."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        text = ResponseOutputText(type="output_text", text="done", annotations=[], logprobs=[])
        message = ResponseOutputMessage(
            id="msg_done", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@pytest.mark.parametrize("side", ["run-without-filter", "run-with-filter", "filter-alone"])
def test_input_filter_share_of_a_turn(benchmark: Any, loop: Any, side: str) -> None:
    """One ``Runner.run`` turn over a 1,000-item input (the history and a new question)."""
    benchmark.group = "sessions: the input filter in a Runner.run turn, 1,000 items"
    history = [*session_items(999), {"role": "user", "content": "and now?"}]
    window_filter = integration.AgentCtxInputFilter()
    if side == "filter-alone":
        data = CallModelData(
            ModelInputData(input=history, instructions="Be brief."), agent=None, context=None
        )  # type: ignore[arg-type]
        out = benchmark(lambda: window_filter(data))
        assert out.input[-1] == history[-1]
        return
    agent = agents.Agent(name="support", instructions="Be brief.", model=_Scripted())
    config = agents.RunConfig(
        tracing_disabled=True,
        call_model_input_filter=window_filter if side == "run-with-filter" else None,
    )
    result = benchmark(
        lambda: loop.run_until_complete(agents.Runner.run(agent, history, run_config=config))
    )
    assert result.final_output == "done"
