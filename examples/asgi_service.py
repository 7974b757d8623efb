"""A small streaming agent service: Starlette, the async runner, the embedded SQLite store.

``POST /conversations/{conversation_id}/turns`` with ``{"message": "..."}`` runs one turn and
streams its events as server-sent events (``event: text``, ``tool_call``, ``tool_result``,
``approval_required``, then ``turn_ended``). ``POST …/turns/{turn_id}/approvals`` with
``{"decisions": {"call_id": true}}`` resumes a suspended turn and answers with the finished
turn as JSON. A body that is not JSON or lacks its field is a 400; a busy conversation or a
turn that cannot be resumed is a 409. Run it with any ASGI server, e.g.
``uvicorn examples.asgi_service:app``.

The model is scripted (no network): a message asking for a refund ("Please refund ORD-7")
makes it call ``issue_refund``, which waits for the user's approval; any other message makes
it look the order up with ``track_order``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
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
    InvalidArgumentError,
    Message,
    StreamEvent,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallEvent,
    ToolMessage,
    ToolResultEvent,
    TurnNotFoundError,
    UserMessage,
)


async def track_order(order_id: str) -> dict[str, str]:
    """Look an order up (an async tool: awaited on the event loop)."""
    return {"order_id": order_id, "status": "shipped", "carrier": "DHL"}


def issue_refund(order_id: str) -> str:
    """Refund an order (a plain tool: runs in a worker thread, after the user approves)."""
    return f"refund issued for {order_id}"


def scripted_reply(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
    """What the scripted model answers the window ``messages``: after a tool result, the
    answer; to a refund request, a call of the refund tool (which waits for approval); to
    anything else, an order lookup."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        if last.tool_name == "issue_refund":
            return AiMessage("The refund was not issued." if last.is_error else "Refunded.")
        return AiMessage("ORD-1 has shipped with DHL.")
    question = last.text if isinstance(last, UserMessage) else ""
    found = re.search(r"ORD-\d+", question or "")
    arguments = json.dumps({"order_id": found.group() if found else "ORD-1"})
    if "refund" in (question or "").lower():
        return AiMessage(
            "I can refund that once you approve.",
            (ToolCall("refund-1", "issue_refund", arguments),),
        )
    return AiMessage("Let me look that up.", (ToolCall("c1", "track_order", arguments),))


def support_agent() -> Agent:
    return Agent(
        "support",
        AsyncScriptedChatModel([scripted_reply], cycle=True),
        instructions="You are a support agent.",
        tools=[
            Tool("track_order", track_order),
            Tool("issue_refund", issue_refund, requires_approval=True),
        ],
        compact_completed_tool_turns=True,
    )


class BadRequest(Exception):
    """A request body the service cannot use: answered with 400, never a 500."""


async def _field(request: Request, name: str) -> object:
    """The field ``name`` of the request's JSON object body."""
    try:
        body = await request.json()
    except ValueError as error:  # not JSON, or not UTF-8
        raise BadRequest(f"the body is not JSON: {error}") from None
    if not isinstance(body, dict) or name not in body:
        raise BadRequest(f'the body must be a JSON object with a "{name}" field')
    return body[name]


async def _message(request: Request) -> str:
    message = await _field(request, "message")
    if not isinstance(message, str):
        raise BadRequest('"message" must be a string')
    return message


async def _decisions(request: Request) -> dict[str, bool]:
    decisions = await _field(request, "decisions")
    if not isinstance(decisions, dict) or not all(
        isinstance(value, bool) for value in decisions.values()
    ):
        raise BadRequest('"decisions" must be an object of tool call ids to true or false')
    return {str(call_id): value for call_id, value in decisions.items()}


def _error(error: Exception, status_code: int) -> JSONResponse:
    return JSONResponse({"error": str(error)}, status_code=status_code)


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
        await store.schema.initialize()
        yield
        await runner.aclose()
        await store.aclose()

    async def turns(request: Request) -> Response:
        conversation_id = request.path_params["conversation_id"]
        try:
            message = await _message(request)
        except BadRequest as error:
            return _error(error, 400)
        events = runner.stream(agent, conversation_id, message)
        try:
            first = await anext(events)  # a busy conversation is refused before streaming
        except AgentConversationBusyError as busy:
            return JSONResponse({"error": str(busy), "turn_id": busy.turn_id}, status_code=409)
        except AgentCtxError as error:
            return _error(error, 400)

        async def body_events() -> AsyncIterator[str]:
            yield _sse(first)
            async for event in events:
                yield _sse(event)

        return StreamingResponse(body_events(), media_type="text/event-stream")

    async def approvals(request: Request) -> Response:
        try:
            decisions = await _decisions(request)
        except BadRequest as error:
            return _error(error, 400)
        try:
            turn = await runner.resume(
                agent,
                request.path_params["conversation_id"],
                request.path_params["turn_id"],
                decisions,
            )
        except InvalidArgumentError as error:  # an id over the limits, an unknown call id
            return _error(error, 400)
        except TurnNotFoundError as error:
            return _error(error, 404)
        except AgentCtxError as error:  # not suspended (any more): resumed, cancelled, ...
            return _error(error, 409)
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
