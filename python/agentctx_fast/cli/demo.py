"""``agentctx demo``: a customer-support conversation run by the agent runner on a real store.

Five turns in Chinese and English with tools, a paged knowledge-base result, one refund that
needs the user's approval (the turn suspends and is resumed by a fresh runner on a fresh store
handle, as another process would), compaction of older tool turns, and the compression
coordinator: once two turns are older than the protected recent ones, its trigger fires and a
summary (saved with compare-and-set in the store) replaces them in every later window. The
model is a `ScriptedChatModel` (canned replies, no network); every window the runner builds for
it is printed as a table.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentctx_fast.compression import compressors
from agentctx_fast.compression.coordinator import CompressionTriggerInput
from agentctx_fast.core.messages import AiMessage, Message, ToolCall, ToolMessage
from agentctx_fast.core.protocol import validate_tool_protocol
from agentctx_fast.core.tokens import DEFAULT_ESTIMATOR
from agentctx_fast.models.scripted import ScriptedChatModel
from agentctx_fast.observability.metrics import InMemoryMetrics
from agentctx_fast.runner import AgentRunner
from agentctx_fast.runner.agent import Agent, AgentTurn
from agentctx_fast.runner.tools import Tool, ToolResultPage

INSTRUCTIONS = (
    "You are the support agent of an online shop. Answer in the user's language, quote order "
    "ids exactly, and never issue a refund without the user's approval."
)

_ORDERS = {
    "ORD-2024-001": {"status": "shipped", "carrier": "SF Express", "eta": "2026-12-05"},
    "ORD-2024-002": {"status": "delivered", "carrier": "DHL", "delivered": "2026-12-01"},
}
_ARTICLES = [
    {"id": "KB-17", "title": "Change the delivery address before shipping"},
    {"id": "KB-18", "title": "Redirect a parcel that has shipped (carrier form)"},
    {"id": "KB-31", "title": "修改收货地址（已发货订单请联系快递）"},
]


def get_order(order_id: str) -> dict[str, Any]:
    """Look an order up by its id, e.g. ORD-2024-001."""
    order = _ORDERS.get(order_id)
    if order is None:
        raise KeyError(f"no order {order_id}")
    return {"order_id": order_id, **order}


def search_help(query: str, cursor: str | None = None) -> ToolResultPage:
    """Search the help centre; pass ``next_cursor`` back as ``cursor`` for the next page."""
    start = int(cursor or 0)
    page = _ARTICLES[start : start + 2]
    more = start + 2 < len(_ARTICLES)
    return ToolResultPage(page, has_more=more, next_cursor=str(start + 2) if more else None)


def issue_refund(order_id: str, amount: float) -> str:
    """Refund ``amount`` on an order (needs the user's approval)."""
    return f"refund of {amount:.2f} on {order_id} issued, reference RF-{order_id[-3:]}-7781"


def _call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(f"call_{uuid.uuid4().hex[:8]}", name, json.dumps(arguments))


def _calls(*calls: ToolCall) -> AiMessage:
    return AiMessage(tool_calls=calls)


_SCRIPT: list[AiMessage] = [
    _calls(_call("get_order", order_id="ORD-2024-001")),
    AiMessage("您的订单 ORD-2024-001 已由顺丰发货，预计 2026-12-05 送达。"),
    _calls(_call("get_order", order_id="ORD-2024-002")),
    AiMessage("ORD-2024-002 was delivered by DHL on 2026-12-01."),
    _calls(_call("search_help", query="change delivery address")),
    _calls(_call("search_help", query="change delivery address", cursor="2")),
    AiMessage(
        "Before shipping you can edit the address yourself (KB-17); ORD-2024-001 has shipped, "
        "so use the carrier's redirect form (KB-18). 已发货订单请联系快递修改（KB-31）。"
    ),
    _calls(_call("issue_refund", order_id="ORD-2024-002", amount=39.9)),
    AiMessage("Done: 39.90 refunded on ORD-2024-002, reference RF-002-7781."),
    AiMessage(
        "今天处理的事项：ORD-2024-001 已发货（预计 12-05 送达，地址修改走快递改派 KB-18）；"
        "ORD-2024-002 已送达并因破损退款 39.90（RF-002-7781）。"
    ),
]

_TURNS = [
    "你好，我的订单 ORD-2024-001 到哪里了？",
    "Can you check ORD-2024-002 as well? It was a gift.",
    "How do I change the delivery address of ORD-2024-001?",
    "ORD-2024-002 arrived damaged. Please refund the 39.90.",
    "谢谢！最后帮我总结一下今天处理的事情。",
]


@dataclass
class _PrintingModel:
    """Prints each window it is sent, then answers from the script."""

    script: ScriptedChatModel
    out: Callable[[str], None]
    calls: int = 0

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        self.calls += 1
        self.out(f"\nmodel call {self.calls}: window of {len(messages)} messages")
        for line in window_table(messages):
            self.out(line)
        return self.script.chat(messages, tools)


def window_table(messages: Sequence[Message]) -> list[str]:
    """The window as rows of role, id, tokens, compacted and a text excerpt.

    A row is marked compacted when its turn's tool calls were left out of the window.
    """
    calls_by_turn: dict[str | None, bool] = {}
    for message in messages:
        if isinstance(message, AiMessage) and message.tool_calls:
            calls_by_turn[message.turn_id] = True
    rows = [f"  {'role':<9} {'id':<50} {'tokens':>6}  {'compacted':<9}  text"]
    for message in messages:
        role = type(message).__name__.removesuffix("Message").lower() or "message"
        compacted = _compacted(message, messages, calls_by_turn)
        summary = message.turn_id is None and role != "system"  # the coordinator's summary
        text = getattr(message, "text", None) or ""
        if isinstance(message, AiMessage) and message.tool_calls:
            text = " ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        if isinstance(message, ToolMessage):
            text = ("ERROR " if message.is_error else "") + text
        text = " ".join(str(text).split())
        text = text if len(text) <= 56 else text[:55] + "…"
        tokens = DEFAULT_ESTIMATOR.count_message(message)
        mark = "summary" if summary else "yes" if compacted else ""
        rows.append(f"  {role:<9} {message.message_id[:50]:<50} {tokens:>6}  {mark:<9}  {text}")
    return rows


def _compacted(
    message: Message, messages: Sequence[Message], calls_by_turn: dict[str | None, bool]
) -> bool:
    # The runner names a turn's AI messages "<turn>:ai:<step>"; a final answer at step > 1
    # whose turn shows no tool call in the window had its tool protocol compacted away.
    if message.turn_id is None or message.turn_id in calls_by_turn:
        return False
    finals = [
        m.message_id for m in messages if m.turn_id == message.turn_id and ":ai:" in m.message_id
    ]
    return any(not final.endswith(":ai:1") for final in finals)


def run_demo(store: Any, out: Callable[[str], None] = print) -> list[AgentTurn]:
    """Run the demo conversation on ``store``; returns its turns (the resumed one last-state)."""
    metrics = InMemoryMetrics()
    script = ScriptedChatModel(_SCRIPT)
    model = _PrintingModel(script, out)
    tools = [
        Tool("get_order", get_order),
        Tool("search_help", search_help),
        Tool("issue_refund", issue_refund, requires_approval=True),
    ]
    agent = Agent(
        "support-agent",
        model,
        instructions=INSTRUCTIONS,
        tools=tools,
        max_attached_turns=5,
        max_attached_messages=40,
        compact_completed_tool_turns=True,
        compression_keep_recent_turns=1,
        context_compressor=compressors.text_excerpt(400),
        compression_trigger=_two_older_turns,
    )
    conversation_id = f"support-{uuid.uuid4().hex[:8]}"
    out(f"conversation {conversation_id} on {type(store).__name__}")
    runner = AgentRunner(store, metrics=metrics)
    turns: list[AgentTurn] = []
    compressed = 0
    for number, text in enumerate(_TURNS, 1):
        out(f"\n=== turn {number}: {text}")
        turn = runner.run(agent, conversation_id, text)
        if turn.status.value == "suspended":
            approval = turn.pending_approvals[0]
            out(
                f"\n--- turn suspended: {approval.tool_name}({approval.arguments}) waits for "
                f"approval (form {approval.form_message_id})"
            )
            out("--- the user approves; a fresh runner on a fresh store handle resumes the turn")
            resumer = AgentRunner(store, metrics=metrics)
            decision = {approval.tool_call_id: True}
            turn = resumer.resume(agent, conversation_id, turn.turn_id, decision)
            resumer.close()
        answer = turn.final_message.text if turn.final_message else turn.error
        out(f"--- turn {number} {turn.status.value}: {answer}")
        compressions = _count(metrics, "agentctx_compressor_calls")
        if compressions > compressed:
            state = store.compression_state_store().load(conversation_id)
            out(
                f"--- the compression trigger fired: the older turns are one summary now "
                f"(compression state version {state.version if state else 0}, covering up to "
                f"{state.covered_until_message_id if state else None})"
            )
            compressed = compressions
        turns.append(turn)
    runner.close()
    _print_summary(store, conversation_id, turns, metrics, model.calls, out)
    return turns


def _two_older_turns(trigger: CompressionTriggerInput) -> bool:
    """Summarise once two turns older than the protected recent ones are not covered yet."""
    return trigger.pending_turns >= 2


def _count(metrics: InMemoryMetrics, metric: str) -> int:
    try:
        return metrics.get(metric).count
    except KeyError:
        return 0


def _print_summary(
    store: Any,
    conversation_id: str,
    turns: list[AgentTurn],
    metrics: InMemoryMetrics,
    model_calls: int,
    out: Callable[[str], None],
) -> None:
    stored = store.chat_memory(conversation_id).get_messages()
    kinds: dict[str, int] = {}
    for message in stored:
        kinds[type(message).__name__] = kinds.get(type(message).__name__, 0) + 1
    windows = metrics.get("agentctx_window_messages")
    tokens = metrics.get("agentctx_window_tokens")
    out("\n=== summary")
    out(f"turns: {', '.join(t.status.value for t in turns)}; model calls: {model_calls}")
    by_kind = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
    out(f"stored messages: {len(stored)} ({by_kind})")
    out(
        f"windows: {windows.count}, up to {int(windows.maximum)} messages and "
        f"{int(tokens.maximum)} estimated tokens; compacted turns in the last window: "
        f"{int(metrics.get('agentctx_window_compacted_turns').maximum)}"
    )
    out(
        f"tool calls: {metrics.get('agentctx_tool_calls').count}, result characters: "
        f"{int(metrics.get('agentctx_tool_result_chars').total)}, page requests: "
        f"{metrics.get('agentctx_tool_page_requests').count}; snapshots up to "
        f"{int(metrics.get('agentctx_snapshot_bytes').maximum)} bytes"
    )
    violations = validate_tool_protocol(stored)
    out(f"tool protocol of the stored history: {'valid' if not violations else violations}")
