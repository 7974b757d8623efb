"""A small streaming agent service: Starlette, the async runner, the embedded SQLite store.

``POST /conversations/{conversation_id}/turns`` with ``{"message": "..."}`` runs one turn and
streams its events as server-sent events (``event: text``, ``tool_call``, ``tool_result``,
``approval_required``, then ``turn_ended``). ``POST …/turns/{turn_id}/approvals`` with
``{"decisions": {"call_id": true}}`` resumes a suspended turn. Run it with any ASGI server,
e.g. ``uvicorn examples.asgi_service:app`` (the model here is scripted: no network).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentctx_fast import (
    Agent,
    AgentConversationBusyError,
    AgentCtxError,
    AgentTurn,
    AiMessage,
    ApprovalRequired,
    AsyncAgentRunner,
    AsyncScriptedChatModel,
    AsyncSqlAgentStore,
    StreamEvent,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallEvent,
    ToolResultEvent,
)


async def track_order(order_id: str) -> dict[str, str]:
    """Look an order up (an async tool: awaited on the event loop)."""
    return {"order_id": order_id, "status": "shipped", "carrier": "DHL"}


def issue_refund(order_id: str) -> str:
    """Refund an order (a plain tool: runs in a worker thread, after the user approves)."""
    return f"refund issued for {order_id}"


def support_agent() -> Agent:
    model = AsyncScriptedChatModel(
        [
            AiMessage(
                "Let me look that up.", (ToolCall("c1", "track_order", '{"order_id": "ORD-1"}'),)
            ),
            AiMessage("ORD-1 has shipped with DHL."),
        ],
        cycle=True,
    )
    return Agent(
        "support",
        model,
        instructions="You are a support agent.",
        tools=[
            Tool("track_order", track_order),
            Tool("issue_refund", issue_refund, requires_approval=True),
        ],
        compact_completed_tool_turns=True,
    )


def _sse(event: StreamEvent) -> str:
    name, data = _event_fields(event)
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _event_fields(event: StreamEvent) -> tuple[str, dict[str, Any]]:
    if isinstance(event, TextDelta):
        return "text", {"text": event.text}
    if isinstance(event, ToolCallEvent):
        return "tool_call", {"id": event.call.id, "name": event.call.name}
    if isinstance(event, ToolResultEvent):
        return "tool_result", {
            "tool_call_id": event.message.tool_call_id,
            "text": event.message.text,
        }
    if isinstance(event, ApprovalRequired):
        return "approval_required", {
            "tool_call_ids": [p.tool_call_id for p in event.pending_approvals]
        }
    return "turn_ended", _turn_fields(event.turn)


def _turn_fields(turn: AgentTurn) -> dict[str, Any]:
    final = turn.final_message
    return {
        "turn_id": turn.turn_id,
        "status": turn.status.value,
        "text": None if final is None else final.text,
        "error": turn.error,
    }


def create_app(database_url: str = "sqlite:///agentctx-service.db") -> Starlette:
    """The service on ``database_url`` (any URL `AsyncSqlAgentStore` takes)."""
    store = AsyncSqlAgentStore(database_url)
    runner = AsyncAgentRunner(store)
    agent = support_agent()

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await store.schema().initialize()
        yield
        await runner.aclose()
        await store.aclose()

    async def turns(request: Request) -> Response:
        conversation_id = request.path_params["conversation_id"]
        body = await request.json()
        events = runner.stream(agent, conversation_id, str(body["message"]))
        try:
            first = await anext(events)  # a busy conversation is refused before streaming
        except AgentConversationBusyError as busy:
            return JSONResponse({"error": str(busy), "turn_id": busy.turn_id}, status_code=409)
        except AgentCtxError as error:
            return JSONResponse({"error": str(error)}, status_code=400)

        async def body_events() -> AsyncIterator[str]:
            yield _sse(first)
            async for event in events:
                yield _sse(event)

        return StreamingResponse(body_events(), media_type="text/event-stream")

    async def approvals(request: Request) -> Response:
        body = await request.json()
        try:
            turn = await runner.resume(
                agent,
                request.path_params["conversation_id"],
                request.path_params["turn_id"],
                {str(k): bool(v) for k, v in body["decisions"].items()},
            )
        except AgentCtxError as error:
            return JSONResponse({"error": str(error)}, status_code=409)
        return JSONResponse(_turn_fields(turn))

    return Starlette(
        routes=[
            Route("/conversations/{conversation_id}/turns", turns, methods=["POST"]),
            Route(
                "/conversations/{conversation_id}/turns/{turn_id}/approvals",
                approvals,
                methods=["POST"],
            ),
        ],
        lifespan=lifespan,
    )


app = create_app()

__all__ = ["app", "create_app"]
