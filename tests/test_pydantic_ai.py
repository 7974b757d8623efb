"""PydanticAI v2: `AgentCtxHistoryProcessor` sends each model request the window of the run's
messages as PydanticAI messages (the caller's own objects), and the run's history stays whole.

Unit tables of histories check what the window keeps; real runs of ``pydantic_ai.Agent`` over a
scripted ``FunctionModel`` that calls tools check every model input the agent sent. The file
runs on both cores (``AGENTCTX_FAST_BACKEND=rust`` and ``=python``).
"""

from __future__ import annotations

import doctest
import itertools
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    BinaryContent,
    CompactionPart,
    FilePart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentctx_fast.integrations.pydantic_ai as integration
from agentctx_fast import InvalidArgumentError, InvalidMessageTypeError, WindowOptions, build_window
from agentctx_fast.integrations.pydantic_ai import AgentCtxHistoryProcessor, window_model_messages

SYSTEM = "Be brief."


class MessageCount:
    """One token per message: a budget the tests can count from the PydanticAI parts."""

    def count_text(self, text: str) -> int:
        return 1

    def estimate(self, messages: Sequence[Any]) -> int:
        return len(messages)


def req(*parts: Any, run: str | None = None) -> ModelRequest:
    return ModelRequest(parts=list(parts), run_id=run)


def resp(*parts: Any, run: str | None = None) -> ModelResponse:
    return ModelResponse(parts=list(parts), run_id=run)


def call(call_id: str, name: str = "lookup") -> ToolCallPart:
    return ToolCallPart(name, {"q": call_id}, tool_call_id=call_id)


def ret(call_id: str, name: str = "lookup") -> ToolReturnPart:
    return ToolReturnPart(name, f"result {call_id}", tool_call_id=call_id)


def legacy_retry(call_id: str) -> Any:
    """A v1 ``RetryPromptPart`` answering a call (deprecated in v2, still in old histories)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RetryPromptPart("bad", tool_name="lookup", tool_call_id=call_id)


def shape(messages: Sequence[ModelMessage]) -> list[list[str]]:
    """Each message as its parts, e.g. ``["S:Be brief.", "U:q1"]``, ``["C:c1"]``, ``["R:c1"]``."""

    def one(part: Any) -> str:
        if isinstance(part, SystemPromptPart):
            return f"S:{part.content}"
        if isinstance(part, UserPromptPart):
            return f"U:{part.content}"
        if isinstance(part, ToolCallPart):
            return f"C:{part.tool_call_id}"
        if isinstance(part, ToolReturnPart | RetryPromptPart):
            return f"R:{part.tool_call_id}"
        if isinstance(part, TextPart):
            return f"T:{part.content}"
        return part.part_kind  # type: ignore[no-any-return]

    return [[one(part) for part in message.parts] for message in messages]


def dumped(messages: Sequence[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(list(messages))


def two_turns_then_a_third() -> list[ModelMessage]:
    return [
        req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
        resp(TextPart("a1")),
        req(UserPromptPart("q2")),
        resp(call("c1")),
        req(ret("c1")),
        resp(TextPart("a2")),
        req(UserPromptPart("q3")),
    ]


# --- what the window keeps ------------------------------------------------------------------

# (id, history, options, expected shape)
CASES: list[tuple[str, Callable[[], list[ModelMessage]], dict[str, Any], list[list[str]]]] = [
    (
        "everything-fits",
        two_turns_then_a_third,
        {},
        [["S:Be brief.", "U:q1"], ["T:a1"], ["U:q2"], ["C:c1"], ["R:c1"], ["T:a2"], ["U:q3"]],
    ),
    (
        "system-prompt-kept-when-its-turn-is-left-out",
        two_turns_then_a_third,
        {"max_attached_turns": 1},
        [["S:Be brief."], ["U:q2"], ["C:c1"], ["R:c1"], ["T:a2"], ["U:q3"]],
    ),
    (
        "only-the-current-turn",
        two_turns_then_a_third,
        {"max_attached_turns": 0},
        [["S:Be brief."], ["U:q3"]],
    ),
    (
        # one token a message: system 1 + turn q2 4 + current 1 = 6; turn q1 would add 2
        "token-budget-drops-whole-turns-oldest-first",
        two_turns_then_a_third,
        {"max_attached_tokens": 7, "token_estimator": MessageCount()},
        [["S:Be brief."], ["U:q2"], ["C:c1"], ["R:c1"], ["T:a2"], ["U:q3"]],
    ),
    (
        "message-cap-never-splits-a-call-from-its-result",
        two_turns_then_a_third,
        {"max_attached_messages": 4},
        [["S:Be brief."], ["U:q3"]],
    ),
    (
        "several-system-prompts-all-kept",
        lambda: [
            req(SystemPromptPart("one"), SystemPromptPart("two"), UserPromptPart("q1")),
            resp(TextPart("a1")),
            req(UserPromptPart("q2")),
        ],
        {"max_attached_turns": 0},
        [["S:one", "S:two"], ["U:q2"]],
    ),
    (
        "a-legacy-retry-answers-its-call-in-a-kept-turn",
        lambda: [
            req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
            resp(call("c1"), call("c2")),
            req(ret("c1"), legacy_retry("c2")),
            resp(call("c3")),
            req(ret("c3")),
            resp(TextPart("a1")),
            req(UserPromptPart("q2")),
        ],
        {"max_attached_turns": 1},
        [
            ["S:Be brief.", "U:q1"],
            ["C:c1", "C:c2"],
            ["R:c1", "R:c2"],
            ["C:c3"],
            ["R:c3"],
            ["T:a1"],
            ["U:q2"],
        ],
    ),
    (
        "a-retried-call-keeps-its-retry-in-a-kept-turn",
        lambda: [
            req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
            resp(call("c1")),
            req(ToolReturnPart("lookup", "bad", tool_call_id="c1", outcome="retried")),
            resp(TextPart("a1")),
            req(UserPromptPart("q2")),
            resp(TextPart("a2")),
            req(UserPromptPart("q3")),
        ],
        {"max_attached_turns": 1},
        [["S:Be brief."], ["U:q2"], ["T:a2"], ["U:q3"]],
    ),
    (
        "a-steering-prompt-of-the-same-run-stays-in-its-turn",
        lambda: [
            req(SystemPromptPart(SYSTEM), UserPromptPart("q1"), run="r1"),
            resp(call("c1"), run="r1"),
            req(ret("c1"), UserPromptPart("steer"), run="r1"),
            resp(TextPart("a1"), run="r1"),
            req(UserPromptPart("q2"), run="r2"),
        ],
        {"max_attached_turns": 1},
        [["S:Be brief.", "U:q1"], ["C:c1"], ["R:c1", "U:steer"], ["T:a1"], ["U:q2"]],
    ),
    (
        # without run ids every prompt starts a turn: the request is kept in part
        "a-request-kept-in-part-holds-the-kept-parts",
        lambda: [
            req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
            resp(call("c1")),
            req(ret("c1"), UserPromptPart("steer")),
            resp(TextPart("a1")),
            req(UserPromptPart("q2")),
        ],
        {"max_attached_turns": 1},
        [["S:Be brief."], ["U:steer"], ["T:a1"], ["U:q2"]],
    ),
    (
        "retry-feedback-stays-in-its-turn",
        lambda: [
            req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
            resp(TextPart("bad")),
            req(RetryFeedbackPart("say it again", retry=RetryInfo("model_retry"))),
            resp(TextPart("a1")),
            req(UserPromptPart("q2")),
        ],
        {"max_attached_turns": 1},
        [["S:Be brief.", "U:q1"], ["T:bad"], ["retry-feedback"], ["T:a1"], ["U:q2"]],
    ),
    (
        "a-history-turn-without-a-result-gets-a-failed-one",
        lambda: [
            req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
            resp(call("c1", "get_order")),
            req(UserPromptPart("q2")),
        ],
        {},
        [["S:Be brief.", "U:q1"], ["C:c1"], ["R:c1"], ["U:q2"]],
    ),
    (
        "an-orphan-result-in-a-history-turn-is-left-out",
        lambda: [
            req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
            resp(TextPart("a1")),
            req(ret("c9"), UserPromptPart("q2")),
            resp(TextPart("a2")),
            req(UserPromptPart("q3")),
        ],
        {},
        [["S:Be brief.", "U:q1"], ["T:a1"], ["U:q2"], ["T:a2"], ["U:q3"]],
    ),
    (
        # a summary before the first prompt is the oldest history: a turn of its own
        "a-leading-compaction-summary-is-the-oldest-turn",
        lambda: [
            req(SystemPromptPart(SYSTEM), CompactionPart("q1 to q4: orders shipped")),
            req(UserPromptPart("q5")),
            resp(TextPart("a5")),
            req(UserPromptPart("q6")),
        ],
        {"max_attached_turns": 1},
        [["S:Be brief."], ["U:q5"], ["T:a5"], ["U:q6"]],
    ),
    (
        "a-leading-compaction-summary-kept-while-it-fits",
        lambda: [
            req(SystemPromptPart(SYSTEM), CompactionPart("q1 to q4: orders shipped")),
            req(UserPromptPart("q5")),
            resp(TextPart("a5")),
            req(UserPromptPart("q6")),
        ],
        {"max_attached_turns": 2},
        [["S:Be brief.", "compaction"], ["U:q5"], ["T:a5"], ["U:q6"]],
    ),
    (
        # a system prompt sent with a prompt comes with it, whichever turns are kept
        "a-system-prompt-before-a-prompt-is-of-its-turn",
        lambda: [
            req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
            resp(call("c1")),
            req(ret("c1"), SystemPromptPart("note"), UserPromptPart("q2")),
            resp(TextPart("a2")),
            req(UserPromptPart("q3")),
        ],
        {"max_attached_turns": 1},
        [["S:Be brief."], ["S:note", "U:q2"], ["T:a2"], ["U:q3"]],
    ),
    (
        "a-system-prompt-of-a-turn-left-out-is-left-out",
        lambda: [
            req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
            resp(TextPart("a1")),
            req(SystemPromptPart("note"), UserPromptPart("q2")),
            resp(TextPart("a2")),
            req(UserPromptPart("q3")),
        ],
        {"max_attached_turns": 0},
        [["S:Be brief."], ["U:q3"]],
    ),
    (
        # the reach starts at the request holding the first prompts: its system prompt is
        # still the leading one (a history that starts with a reply, prompts without run ids)
        "the-system-prompt-of-the-first-prompts-request-after-a-reply",
        lambda: [
            resp(TextPart("a0")),
            req(SystemPromptPart(SYSTEM), UserPromptPart("q1"), UserPromptPart("q2")),
            resp(TextPart("a2")),
            req(UserPromptPart("q3")),
        ],
        {"max_attached_turns": 1},
        [["S:Be brief.", "U:q2"], ["T:a2"], ["U:q3"]],
    ),
    (
        "no-system-prompt",
        lambda: [req(UserPromptPart("q1")), resp(TextPart("a1")), req(UserPromptPart("q2"))],
        {"max_attached_turns": 0},
        [["U:q2"]],
    ),
]


@pytest.mark.parametrize(
    ("history", "options", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_window_of_a_history(
    history: Callable[[], list[ModelMessage]], options: dict[str, Any], expected: list[list[str]]
) -> None:
    messages = history()
    before = dumped(messages)
    parts_before = [list(message.parts) for message in messages]
    window = window_model_messages(messages, **options)
    assert shape(window) == expected
    # Kept messages are the caller's own objects unless only some of their parts are kept.
    for message in window:
        originals = [m for m in messages if m is message]
        if not originals:
            continue
        assert list(message.parts) == list(originals[0].parts)
    # Nothing of the input changed: not the list, not a message, not a parts list.
    assert dumped(messages) == before
    assert [list(message.parts) for message in messages] == parts_before
    # The processor (the same window) answers the same.
    assert shape(AgentCtxHistoryProcessor(**options)(messages)) == expected


def full_window(messages: list[ModelMessage], **options: Any) -> list[ModelMessage]:
    """The window read from the first message on (no reach)."""
    reading = integration._Reading(messages, 0)
    window = build_window(reading.messages, **options)
    return integration._rebuilt(messages, reading, window.messages)


def same(window: list[Any], other: list[Any], messages: list[ModelMessage]) -> bool:
    """Equal windows: the same parts, the caller's own messages where either has one."""

    def own(message: Any) -> bool:
        return any(message is m for m in messages)

    return shape(window) == shape(other) and all(
        a is b if own(a) or own(b) else True for a, b in zip(window, other, strict=True)
    )


def test_reading_only_the_turns_the_window_can_reach_gives_the_same_window() -> None:
    histories = [case[1]() for case in CASES]
    histories.append(run_conversation(AgentCtxHistoryProcessor(), 7, [])[0])
    for messages in histories:
        for turns, current_turn, cap in itertools.product(range(9), ("last", "none"), (1, 100)):
            options = {
                "max_attached_turns": turns,
                "current_turn": current_turn,
                "max_attached_messages": cap,
            }
            assert same(
                window_model_messages(messages, **options),
                full_window(messages, **options),
                messages,
            ), (shape(messages), options)


def test_whole_messages_are_the_callers_own_objects_and_a_part_kept_request_a_copy() -> None:
    messages = two_turns_then_a_third()
    window = window_model_messages(messages, max_attached_turns=1)
    assert window[1:] == messages[2:] and all(
        a is b for a, b in zip(window[1:], messages[2:], strict=True)
    )
    first = window[0]
    assert first is not messages[0] and isinstance(first, ModelRequest)
    assert first.parts[0] is messages[0].parts[0]  # the caller's SystemPromptPart itself
    assert first.timestamp == messages[0].timestamp  # a copy of the request, fields kept
    assert len(messages[0].parts) == 2


def test_the_failed_result_closing_a_call_names_its_tool() -> None:
    messages = [
        req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
        resp(call("c1", "get_order")),
        req(UserPromptPart("q2")),
    ]
    window = window_model_messages(messages)
    [added] = [m for m in window if all(m is not original for original in messages)]
    [part] = added.parts
    assert isinstance(part, ToolReturnPart)
    assert (part.tool_name, part.tool_call_id, part.outcome) == ("get_order", "c1", "failed")


def test_thinking_and_native_tool_parts_travel_with_their_reply_and_count() -> None:
    reply = resp(
        ThinkingPart("step " * 400),
        NativeToolCallPart("web_search", {"query": "x"}, tool_call_id="n1"),
        NativeToolReturnPart("web_search", {"hits": ["a", "b"]}, tool_call_id="n1"),
        TextPart("a1"),
    )
    messages = [
        req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
        reply,
        req(UserPromptPart("q2")),
    ]
    kept = window_model_messages(messages, max_attached_tokens=600)
    assert kept[1] is reply  # kept whole, every part with its reply
    # The thinking text is counted: a budget the turn's plain text fits, it does not.
    dropped = window_model_messages(messages, max_attached_tokens=60)
    assert shape(dropped) == [["S:Be brief."], ["U:q2"]]
    small = [messages[0], resp(TextPart("a1")), messages[2]]
    assert len(window_model_messages(small, max_attached_tokens=60)) == 3


def test_media_counts_as_a_marker_not_its_size() -> None:
    image = BinaryContent(b"\x89PNG" + bytes(300_000), media_type="image/png")
    messages = [
        req(SystemPromptPart(SYSTEM), UserPromptPart(["what is this?", image])),
        resp(FilePart(image), TextPart("a picture")),
        req(UserPromptPart("q2")),
    ]
    assert window_model_messages(messages, max_attached_tokens=60) == messages


def test_the_current_turns_older_results_become_placeholders_in_copies() -> None:
    messages = [
        req(SystemPromptPart(SYSTEM), UserPromptPart("q1")),
        resp(call("c1"), call("c2"), call("c3")),
        req(
            ToolReturnPart("lookup", "x" * 4000, tool_call_id="c1"),
            ToolReturnPart("lookup", "y" * 4000, tool_call_id="c2"),
            ToolReturnPart("lookup", "z" * 40, tool_call_id="c3"),
        ),
    ]
    before = dumped(messages)
    window = window_model_messages(
        messages, max_attached_tokens=300, current_turn_tool_results_kept=1
    )
    results = window[2]
    assert results is not messages[2]
    assert [p.tool_call_id for p in results.parts] == ["c1", "c2", "c3"]
    assert "left out" in str(results.parts[0].content)
    assert "left out" in str(results.parts[1].content)
    assert results.parts[2] is messages[2].parts[2]
    assert dumped(messages) == before


def test_a_history_without_a_user_prompt_passes_through() -> None:
    messages: list[ModelMessage] = [req(SystemPromptPart(SYSTEM)), resp(TextPart("hello"))]
    window = window_model_messages(messages, max_attached_turns=0)
    assert window == messages and window is not messages
    assert all(a is b for a, b in zip(window, messages, strict=True))
    assert window_model_messages([]) == []


def test_what_is_not_a_pydantic_ai_message_names_its_index() -> None:
    messages: list[Any] = [req(UserPromptPart("q1")), {"role": "user"}]
    with pytest.raises(InvalidMessageTypeError, match=r"^messages\[1\] is not a PydanticAI"):
        window_model_messages(messages)
    bad_id = [req(UserPromptPart("q1")), resp(call("c\x001"))]
    with pytest.raises(InvalidArgumentError, match=r"^messages\[1\]: .*NUL"):
        window_model_messages(bad_id)


def with_parts(message: Any, parts: Any) -> Any:
    """``message`` with ``parts`` set after construction (what a constructor would refuse)."""
    message.parts = parts
    return message


@pytest.mark.parametrize(
    ("messages", "where"),
    [
        (None, "messages"),
        ([with_parts(req(), None)], "messages[0]"),
        ([req(UserPromptPart("q1")), ModelResponse(parts=[None])], "messages[1]"),  # type: ignore[list-item]
        ([req(UserPromptPart("q1")), resp(TextPart(None))], "messages[1]"),  # type: ignore[arg-type]
        ([req(SystemPromptPart(None), UserPromptPart("q1"))], "messages[0]"),  # type: ignore[arg-type]
        ([req(UserPromptPart("q1")), resp(ToolCallPart("t", object(), "c1"))], "messages[1]"),  # type: ignore[arg-type]
    ],
    ids=["none", "parts-none", "part-none", "text-none", "system-none", "args-not-json"],
)
def test_a_malformed_message_is_an_invalid_argument_naming_it(messages: Any, where: str) -> None:
    """A malformed message (built with wrong types) is refused with an `AgentCtxError` naming
    it, not a TypeError or AttributeError from deep inside the reading."""
    with pytest.raises(InvalidArgumentError, match=rf"^{re.escape(where)}"):
        window_model_messages(messages)
    late = [req(SystemPromptPart(None)), req(UserPromptPart("q1")), resp(TextPart("a1"))]  # type: ignore[arg-type]
    late += [req(UserPromptPart("q2"))]
    with pytest.raises(InvalidArgumentError, match=r"^messages\[0\]"):  # before the reach
        window_model_messages(late, max_attached_turns=0)


def test_options_are_checked_when_the_processor_is_made() -> None:
    with pytest.raises(InvalidArgumentError, match="max_attached_turns"):
        AgentCtxHistoryProcessor(max_attached_turns=-1)
    with pytest.raises(InvalidArgumentError, match="unknown window option 'max_turns'"):
        AgentCtxHistoryProcessor(max_turns=2)
    with pytest.raises(InvalidArgumentError, match="not both"):
        AgentCtxHistoryProcessor(WindowOptions(), max_attached_turns=2)
    with pytest.raises(InvalidArgumentError, match="must be a WindowOptions"):
        AgentCtxHistoryProcessor({"max_attached_turns": 2})  # type: ignore[arg-type]
    options = WindowOptions(max_attached_turns=0)
    assert AgentCtxHistoryProcessor(options).options is options
    # capabilities compare by their options
    assert AgentCtxHistoryProcessor(options) == AgentCtxHistoryProcessor(max_attached_turns=0)
    assert AgentCtxHistoryProcessor(options) != AgentCtxHistoryProcessor(max_attached_turns=1)


def test_importable_without_the_other_frameworks() -> None:
    others = "langchain_core,langchain,langgraph,agents,openai,anthropic"
    code = (
        "from pydantic_ai.messages import ModelRequest, UserPromptPart\n"
        "from agentctx_fast.integrations.pydantic_ai import window_model_messages\n"
        "print(len(window_model_messages([ModelRequest(parts=[UserPromptPart('hi')])])))\n"
    )
    done = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "without_packages.py"), others, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr


def test_docstring_examples() -> None:
    assert doctest.testmod(integration, optionflags=doctest.ELLIPSIS).failed == 0


# --- real runs ------------------------------------------------------------------------------


def check_window(sent: Sequence[ModelMessage]) -> list[str]:
    """The window rules on one model input; returns its user prompts, oldest first."""
    first = sent[0]
    assert isinstance(first, ModelRequest) and isinstance(first.parts[0], SystemPromptPart)
    assert first.parts[0].content == SYSTEM
    rest = [part for message in sent for part in message.parts][1:]
    assert isinstance(rest[0], UserPromptPart), rest[0]  # then a user prompt
    open_calls: set[str] = set()
    for message in sent:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                assert part.tool_call_id not in open_calls
                open_calls.add(part.tool_call_id)
            elif isinstance(part, ToolReturnPart):
                assert part.tool_call_id in open_calls, f"orphan return {part.tool_call_id}"
                open_calls.remove(part.tool_call_id)
        if isinstance(message, ModelRequest):
            assert not open_calls, f"calls without a return: {open_calls}"
    return [str(part.content) for part in rest if isinstance(part, UserPromptPart)]


def scripted_model(inputs: list[list[ModelMessage]]) -> FunctionModel:
    """Answers each prompt ``qN`` with two ``lookup`` calls at once (the second retried for
    an even N), then N % 3 more one by one, then text; records every model input."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        inputs.append(list(messages))
        prompt = [p for p in messages[-1].parts if isinstance(p, UserPromptPart)]
        asked = [p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart)][-1]
        n = int(str(asked)[1:])
        if prompt:
            return ModelResponse(parts=[call_part(f"{asked}-a"), call_part(f"{asked}-b")])
        made = sum(
            isinstance(p, ToolCallPart)
            for m in messages
            for p in m.parts
            if str(getattr(p, "args", {}).get("q", "")).startswith(f"{asked}-")
        )
        if made < n % 3 + 2:
            return ModelResponse(parts=[call_part(f"{asked}-{made}")])
        return ModelResponse(parts=[TextPart(f"answer {asked}")])

    return FunctionModel(reply)


def call_part(q: str) -> ToolCallPart:
    return ToolCallPart("lookup", {"q": q})


def lookup(q: str) -> str:
    """Looks ``q`` up; a ``-b`` lookup of an even prompt is retried once."""
    if q.endswith("-b") and int(q.split("-")[0][1:]) % 2 == 0 and q not in RETRIED:
        RETRIED.add(q)
        raise ModelRetry(f"{q}: try again")
    return f"found {q}: " + "detail " * 20


RETRIED: set[str] = set()


def run_conversation(
    processor: Any, runs: int, inputs: list[list[ModelMessage]], *, keeps_history: bool = True
) -> tuple[list[ModelMessage], list[list[ModelMessage]]]:
    """``runs`` runs, each carrying the last's ``all_messages()``; returns the final history
    and each run's own new messages."""
    RETRIED.clear()
    agent = Agent(
        scripted_model(inputs),
        system_prompt=SYSTEM,
        tools=[lookup],
        capabilities=[processor],
    )
    history: list[ModelMessage] = []
    per_run: list[list[ModelMessage]] = []
    for n in range(runs):
        result = agent.run_sync(f"q{n}", message_history=history)
        assert result.output == f"answer q{n}"
        if keeps_history:  # the history untouched, the run's messages added
            assert result.all_messages()[: len(history)] == history
        per_run.append(result.new_messages())
        history = result.all_messages()
    return history, per_run


def parts_of(messages: Sequence[ModelMessage]) -> list[Any]:
    """The parts of ``messages`` in order, system prompts aside."""
    return [p for m in messages for p in m.parts if not isinstance(p, SystemPromptPart)]


def tokens_of(messages: Sequence[ModelMessage]) -> int:
    """`MessageCount`'s count: a reply is one message, a request one a part."""
    return sum(1 if isinstance(m, ModelResponse) else len(m.parts) for m in messages)


def check_turns(sent: list[ModelMessage], per_run: list[list[ModelMessage]]) -> list[int]:
    """``sent`` is the system prompt, whole runs, then the current run so far; returns the
    runs it holds."""
    runs = [int(prompt[1:]) for prompt in check_window(sent)]
    current = runs[-1]
    assert runs == list(range(runs[0], current + 1))  # the most recent turns
    expected = [p for n in runs[:-1] for p in parts_of(per_run[n])]
    sent_parts = parts_of(sent)
    assert sent_parts[: len(expected)] == expected  # each history turn whole
    so_far = sent_parts[len(expected) :]
    assert so_far and so_far == parts_of(per_run[current])[: len(so_far)]  # the current turn
    return runs


def test_every_model_input_of_a_long_conversation_is_a_valid_window() -> None:
    inputs: list[list[ModelMessage]] = []
    history, per_run = run_conversation(AgentCtxHistoryProcessor(max_attached_turns=3), 12, inputs)
    assert len(inputs) == 36  # 2 to 4 model calls a run: parallel, sequential, retried tools
    for sent in inputs:
        runs = check_turns(sent, per_run)
        assert runs[0] == max(runs[-1] - 3, 0)  # 3 history turns whenever there are 3
    # The agent's own history keeps everything, the system prompt first.
    assert shape(history[:1])[0] == ["S:Be brief.", "U:q0"]
    assert [p.content for m in history for p in m.parts if isinstance(p, UserPromptPart)] == [
        f"q{n}" for n in range(12)
    ]
    assert history == [m for run in per_run for m in run]
    check_window(history)


def test_model_inputs_stay_within_a_token_budget() -> None:
    budget = 20
    inputs: list[list[ModelMessage]] = []
    _, per_run = run_conversation(
        AgentCtxHistoryProcessor(max_attached_tokens=budget, token_estimator=MessageCount()),
        8,
        inputs,
    )
    left_out = 0
    for sent in inputs:
        runs = check_turns(sent, per_run)
        tokens = tokens_of(sent)
        if len(runs) > 1:  # history is attached only within the budget
            assert tokens <= budget, (tokens, shape(sent))
        if runs[0] > 0:  # and the turn before the oldest attached one did not fit
            previous = tokens_of(per_run[runs[0] - 1])
            assert tokens + previous > budget
            left_out += 1
    assert left_out > 10


def test_as_a_history_processor_it_trims_the_history_and_keeps_the_system_prompt() -> None:
    inputs: list[list[ModelMessage]] = []
    history, _ = run_conversation(
        ProcessHistory(AgentCtxHistoryProcessor(max_attached_turns=1)),
        6,
        inputs,
        keeps_history=False,
    )
    for sent in inputs:
        assert len(set(check_window(sent))) <= 2
    # ProcessHistory makes the window the run's history: trimmed, its system prompt kept.
    check_window(history)
    prompts = [p.content for m in history for p in m.parts if isinstance(p, UserPromptPart)]
    assert prompts == ["q4", "q5"]
