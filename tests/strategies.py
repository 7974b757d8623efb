"""Hypothesis strategies: histories with tool calls, parallel calls, missing and orphan
results, results stored out of order, duplicate call ids, UI messages, stray messages before
the first user message, explicit turn ids and statuses."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from agentctx_fast import (
    AgentActionMessage,
    AgentFormMessage,
    AiMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    TurnStatus,
    UserMessage,
)

# Short ids, and ids of every length class the native id compare treats apart (4-7 and 8-16
# bytes compared by words, others whole): pairs that share their first and last bytes and
# differ in the middle, non-ASCII ones, and provider-length ones (about 30 bytes).
CALL_IDS = st.sampled_from(
    [
        "call_0",
        "call_1",
        "call_2",
        "c-x",
        "ab1cd",
        "ab2cd",
        "toolu_01A_x",
        "toolu_01B_x",
        "abcdefgh1ijklmnop",
        "abcdefgh2ijklmnop",
        "呼叫_1",
        "呼叫_2",
        "call_Xq7fK2mNpL9sT4vB8wZ1cR3a",
        "call_Xq7fK2mNpL9sT5vB8wZ1cR3a",
    ]
)
# How a structured turn names its calls: by index, in each length class above.
CALL_NAMES = st.sampled_from(
    ["call_{}", "c{}", "tool{}ab", "toolu_0{}_xyz", "call_Xq7fK2mNpL{}sT4vB8wZ1cR3a", "呼{}"]
)
TURN_IDS = st.one_of(st.none(), st.sampled_from(["T0", "T1", "T2", "T3"]))
TEXT = st.one_of(
    st.sampled_from(["", "ok", "订单 ORD-2024-001 已发货", '{"order_id": "ORD-1", "n": 42}']),
    st.text(max_size=40),
)

# Provider items of an AI message (SPEC §23): reasoning with encrypted content, thinking blocks,
# hosted-tool calls; counted by every estimator from their JSON text.
PROVIDER_ITEMS = st.one_of(
    st.just(()),
    st.lists(
        st.one_of(
            st.builds(
                lambda rid, blob: {
                    "type": "reasoning",
                    "id": rid,
                    "summary": [],
                    "encrypted_content": blob,
                },
                st.sampled_from(["rs_1", "rs_2"]),
                st.text(max_size=30),
            ),
            st.builds(
                lambda text: {"type": "thinking", "thinking": text, "signature": "sig=="},
                TEXT,
            ),
            st.just({"type": "web_search_call", "id": "ws_1", "status": "completed"}),
        ),
        max_size=3,
    ).map(tuple),
)


@st.composite
def _message(draw: st.DrawFn, message_id: str) -> Message:
    kind = draw(st.sampled_from(["user", "ai", "ai_calls", "tool", "system", "action", "form"]))
    common: dict[str, Any] = {"message_id": message_id, "turn_id": draw(TURN_IDS)}
    if kind == "user":
        return UserMessage(draw(TEXT), **common)
    if kind == "ai":
        return AiMessage(
            draw(st.one_of(st.none(), TEXT)), provider_items=draw(PROVIDER_ITEMS), **common
        )
    if kind == "ai_calls":
        ids = draw(st.lists(CALL_IDS, min_size=1, max_size=3))
        calls = tuple(
            ToolCall(i, draw(st.sampled_from(["get_order", "search"])), "{}") for i in ids
        )
        return AiMessage(
            draw(st.one_of(st.none(), TEXT)), calls, provider_items=draw(PROVIDER_ITEMS), **common
        )
    if kind == "tool":
        return ToolMessage(draw(CALL_IDS), draw(TEXT), **common)
    if kind == "system":
        return SystemMessage(draw(TEXT), **common)
    if kind == "action":
        return AgentActionMessage(payload={"b": 1}, **common)
    return AgentFormMessage(payload={"f": 1}, status="open", **common)


@st.composite
def _turn(draw: st.DrawFn, prefix: str, number: int) -> list[Message]:
    """A plausible turn: a user message, steps of parallel calls with (mostly) their results."""
    turn_id = draw(st.one_of(st.none(), st.just(f"T{number}")))
    out: list[Message] = [UserMessage(draw(TEXT), message_id=f"{prefix}u{number}", turn_id=turn_id)]
    name = draw(CALL_NAMES)
    for step in range(draw(st.integers(0, 3))):
        n = draw(st.one_of(st.integers(1, 3), st.integers(7, 10)))  # many: past 8 at once
        calls = tuple(ToolCall(name.format(i), "get_order", '{"id": 1}') for i in range(n))
        out.append(
            AiMessage(
                None,
                calls,
                message_id=f"{prefix}a{number}.{step}",
                turn_id=turn_id,
                provider_items=draw(PROVIDER_ITEMS),
            )
        )
        order = draw(st.one_of(st.just(list(range(n))), st.permutations(range(n))))
        for i in order:  # in call order, or not
            if draw(st.integers(0, 9)) > 0:  # sometimes a result goes missing
                out.append(
                    ToolMessage(
                        name.format(i),
                        draw(TEXT),
                        message_id=f"{prefix}t{number}.{step}.{i}",
                        turn_id=turn_id,
                    )
                )
    if draw(st.booleans()) or len(out) == 1:
        out.append(
            AiMessage(draw(TEXT) or "done", message_id=f"{prefix}f{number}", turn_id=turn_id)
        )
    return out


def _stored_out_of_order(draw: st.DrawFn, out: list[Message], moves: int) -> None:
    """Moves up to ``moves`` tool results later, as a store can hold them (SPEC §20): after
    another AI message or a user message (maybe into a later turn, or the current one), or
    apart from the other results of their call's AI message."""
    for _ in range(moves):
        results = [i for i, m in enumerate(out) if isinstance(m, ToolMessage)]
        if not results:
            return
        source = draw(st.sampled_from(results))
        result = out.pop(source)
        later = st.integers(min(source + 1, len(out)), len(out))
        out.insert(draw(st.one_of(later, st.just(len(out)))), result)  # or at the very end


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Structured turns with random messages spliced in, or a fully random list."""
    prefix = draw(st.uuids()).hex[:8] + "-"
    if draw(st.integers(0, 4)) == 0:
        size = draw(st.integers(0, 30))
        return [draw(_message(f"{prefix}{i}")) for i in range(size)]
    out: list[Message] = []
    for i in range(draw(st.integers(0, 2))):  # stray messages before the first user message
        out.append(draw(_message(f"{prefix}pre{i}")))
    for number in range(draw(st.integers(1, 14))):
        out.extend(draw(_turn(prefix, number)))
    _stored_out_of_order(draw, out, draw(st.sampled_from([0, 0, 1, 3])))
    for i in range(draw(st.integers(0, 4))):  # noise anywhere: UI, orphans, duplicates
        position = draw(st.integers(0, len(out)))
        out.insert(position, draw(_message(f"{prefix}x{i}")))
    return out


@st.composite
def out_of_order_histories(draw: st.DrawFn) -> list[Message]:
    """Structured turns (the last one the current turn) with 1 to 6 results moved later."""
    prefix = draw(st.uuids()).hex[:8] + "-"
    out: list[Message] = []
    for number in range(draw(st.integers(1, 6))):
        out.extend(draw(_turn(prefix, number)))
    _stored_out_of_order(draw, out, draw(st.integers(1, 6)))
    return out


def window_options(history: list[Message]) -> st.SearchStrategy[dict[str, Any]]:
    turn_ids = sorted({m.turn_id for m in history if m.turn_id is not None})
    statuses = (
        st.dictionaries(st.sampled_from(turn_ids), st.sampled_from(list(TurnStatus)))
        if turn_ids
        else st.just({})
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "system": st.one_of(st.none(), st.just("You are a support agent.")),
            "max_attached_turns": st.integers(0, 12),
            "max_attached_messages": st.integers(0, 60),
            "compact_completed_tool_turns": st.booleans(),
            "compression_keep_recent_turns": st.integers(0, 4),
            "max_attached_tokens": st.one_of(st.none(), st.integers(0, 600)),
            "turn_statuses": st.one_of(st.none(), statuses),
            "current_turn": st.sampled_from(["last", "none"]),
            "current_turn_tool_results_kept": st.one_of(st.none(), st.integers(0, 4)),
        },
    )


@st.composite
def tool_loop_histories(draw: st.DrawFn) -> list[Message]:
    """`histories` ending in a long tool loop within one turn (SPEC §23): step after step of
    calls with results of up to a few hundred characters, some missing or stored late."""
    prefix = draw(st.uuids()).hex[:8] + "-"
    out = list(draw(histories()))
    turn_id = draw(st.one_of(st.none(), st.just("LOOP")))
    out.append(UserMessage("collect the pages", message_id=f"{prefix}lu", turn_id=turn_id))
    results = st.one_of(TEXT, st.text(min_size=100, max_size=400))
    for step in range(draw(st.integers(1, 12))):
        n = draw(st.integers(1, 2))
        calls = tuple(ToolCall(f"call_{step}_{i}", "fetch", f'{{"p": {step}}}') for i in range(n))
        out.append(AiMessage(None, calls, message_id=f"{prefix}la{step}", turn_id=turn_id))
        for i in range(n):
            if draw(st.integers(0, 9)) > 0:
                name = draw(st.one_of(st.none(), st.just("fetch")))
                out.append(
                    ToolMessage(
                        f"call_{step}_{i}",
                        draw(results),
                        tool_name=name,
                        message_id=f"{prefix}lt{step}.{i}",
                        turn_id=turn_id,
                    )
                )
    if draw(st.booleans()):
        _stored_out_of_order(draw, out, 1)
    if draw(st.booleans()):
        out.append(AiMessage("all read", message_id=f"{prefix}lf", turn_id=turn_id))
    return out


@st.composite
def tool_loop_options(draw: st.DrawFn, history: list[Message]) -> dict[str, Any]:
    """`window_options`, mostly with a budget and results kept in the current turn."""
    options: dict[str, Any] = draw(window_options(history))
    if draw(st.integers(0, 3)) > 0:
        options["current_turn"] = "last"
        options["max_attached_tokens"] = draw(st.integers(0, 600))
        options["current_turn_tool_results_kept"] = draw(st.integers(0, 3))
    return options
