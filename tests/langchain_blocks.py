"""LangChain messages as provider packages make them, written by hand (langchain-anthropic and
langchain-openai are not installed): the shapes `from_langchain` must classify, never refuse.

Each case is ``(name, message, expected)``; ``expected`` is what the message is once read:
``kind`` (the message class), ``text``, the ``items`` (provider item types, in order), the
tool ``calls`` ids and the user message's ``parts`` (part class names).
"""

from __future__ import annotations

from typing import Any

from langchain_core import messages as lc

PNG = "iVBORw0KGgoAAAANSUhEUg=="  # a few base64 bytes standing for an image
SIGNATURE = "EqQBCkYIBxgCKkB" + "x" * 200  # Anthropic's opaque thinking signature

ANTHROPIC_METADATA = {
    "id": "msg_01Xg7Wr5inFWgBxE5jH9rpRo",
    "model": "claude-sonnet-4-5-20250929",
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 171, "output_tokens": 96, "cache_read_input_tokens": 0},
    "model_name": "claude-sonnet-4-5-20250929",
    "model_provider": "anthropic",
}
RESPONSES_METADATA = {
    "id": "resp_68a1",
    "created_at": 1755000000.0,
    "model": "gpt-5-2025-08-07",
    "object": "response",
    "status": "completed",
    "model_provider": "openai",
    "model_name": "gpt-5-2025-08-07",
}
USAGE_DETAILS = {
    "input_tokens": 171,
    "output_tokens": 96,
    "total_tokens": 267,
    "input_token_details": {"cache_read": 0, "cache_creation": 0},
}


def _anthropic_thinking_tool_use() -> lc.AIMessage:
    return lc.AIMessage(
        content=[
            {"type": "thinking", "thinking": "The user wants ORD-7.", "signature": SIGNATURE},
            {"type": "text", "text": "Let me look that up."},
            {
                "type": "tool_use",
                "id": "toolu_01TS5h8LNo7p5imcG7yRiaUM",
                "name": "get_order",
                "input": {"order_id": "ORD-7"},
            },
        ],
        tool_calls=[
            {
                "name": "get_order",
                "args": {"order_id": "ORD-7"},
                "id": "toolu_01TS5h8LNo7p5imcG7yRiaUM",
                "type": "tool_call",
            }
        ],
        response_metadata=ANTHROPIC_METADATA,
        usage_metadata=USAGE_DETAILS,
        id="lc_run--0b7c8f6e-1",
    )


def _anthropic_redacted() -> lc.AIMessage:
    return lc.AIMessage(
        content=[
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
            {"type": "tool_use", "id": "toolu_02", "name": "get_order", "input": {}},
        ],
        tool_calls=[{"name": "get_order", "args": {}, "id": "toolu_02", "type": "tool_call"}],
        response_metadata=ANTHROPIC_METADATA,
        id="lc_run--0b7c8f6e-2",
    )


def _anthropic_web_search() -> lc.AIMessage:
    return lc.AIMessage(
        content=[
            {
                "type": "server_tool_use",
                "id": "srvtoolu_01",
                "name": "web_search",
                "input": {"query": "ORD-7 carrier delays"},
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_01",
                "content": [
                    {
                        "type": "web_search_result",
                        "url": "https://carrier.example/status",
                        "title": "Status",
                        "encrypted_content": "Eo8BCioIAhgBIiQ",
                        "page_age": None,
                    }
                ],
            },
            {
                "type": "text",
                "text": "The carrier reports no delays.",
                "citations": [
                    {
                        "type": "web_search_result_location",
                        "url": "https://carrier.example/status",
                        "title": "Status",
                        "encrypted_index": "Eo8BCioI",
                        "cited_text": "No delays today.",
                    }
                ],
            },
        ],
        response_metadata={**ANTHROPIC_METADATA, "stop_reason": "end_turn"},
        id="lc_run--0b7c8f6e-3",
    )


def _responses_reasoning_function_call() -> lc.AIMessage:
    return lc.AIMessage(
        content=[
            {
                "type": "reasoning",
                "id": "rs_68a1",
                "summary": [{"type": "summary_text", "text": "Look the order up."}],
                "encrypted_content": "gAAAAABoq" + "z" * 300,
            },
            {"type": "text", "text": "Checking.", "annotations": [], "id": "msg_68a1"},
            {
                "type": "function_call",
                "name": "get_order",
                "arguments": '{"order_id": "ORD-7"}',
                "call_id": "call_Qx1",
                "id": "fc_68a1",
                "status": "completed",
            },
        ],
        tool_calls=[
            {
                "type": "tool_call",
                "name": "get_order",
                "args": {"order_id": "ORD-7"},
                "id": "call_Qx1",
            }
        ],
        response_metadata=RESPONSES_METADATA,
        id="resp_68a1",
    )


def _responses_web_search() -> lc.AIMessage:
    return lc.AIMessage(
        content=[
            {
                "type": "web_search_call",
                "id": "ws_68a2",
                "action": {"type": "search", "query": "ORD-7 carrier"},
                "status": "completed",
            },
            {
                "type": "text",
                "text": "No delays reported.",
                "annotations": [
                    {
                        "type": "citation",
                        "title": "Status",
                        "url": "https://carrier.example/status",
                        "start_index": 0,
                        "end_index": 19,
                    }
                ],
                "id": "msg_68a2",
            },
        ],
        response_metadata=RESPONSES_METADATA,
        id="resp_68a2",
    )


def _responses_refusal() -> lc.AIMessage:
    return lc.AIMessage(
        content=[{"type": "refusal", "refusal": "I can't help with that.", "id": "msg_68a3"}],
        response_metadata=RESPONSES_METADATA,
        id="resp_68a3",
    )


def _v1_reasoning_tool_call() -> lc.AIMessage:
    return lc.AIMessage(
        content_blocks=[
            {"type": "reasoning", "reasoning": "Need the order.", "id": "rs_1"},
            {"type": "text", "text": "One moment."},
            {"type": "tool_call", "id": "call_v1", "name": "get_order", "args": {"order_id": "A"}},
        ],
        response_metadata={"output_version": "v1", "model_provider": "openai"},
        id="ai-v1-1",
    )


def _v1_server_tools() -> lc.AIMessage:
    return lc.AIMessage(
        content_blocks=[
            {
                "type": "server_tool_call",
                "id": "ws_1",
                "name": "web_search",
                "args": {"query": "ORD-7"},
            },
            {
                "type": "server_tool_result",
                "tool_call_id": "ws_1",
                "status": "success",
                "output": [{"url": "https://carrier.example/status"}],
            },
            {"type": "text", "text": "Found it."},
        ],
        response_metadata={"output_version": "v1", "model_provider": "openai"},
        id="ai-v1-2",
    )


def _v1_generated_image() -> lc.AIMessage:
    return lc.AIMessage(
        content_blocks=[
            {"type": "image", "base64": PNG, "mime_type": "image/png", "id": "ig_1"},
            {"type": "text", "text": "Here is the label."},
        ],
        id="ai-v1-3",
    )


def _call_in_content_only() -> lc.AIMessage:
    """A hand-built message whose call is only a content block (no ``tool_calls``)."""
    return lc.AIMessage(
        content=[{"type": "tool_use", "id": "toolu_09", "name": "get_order", "input": {"x": 1}}],
        id="ai-content-call",
    )


def _tool_images() -> lc.ToolMessage:
    return lc.ToolMessage(
        content=[
            {"type": "text", "text": "The chart:"},
            {"type": "image", "base64": PNG, "mime_type": "image/png"},
        ],
        tool_call_id="toolu_01TS5h8LNo7p5imcG7yRiaUM",
        name="get_order",
        id="tool-img",
    )


def _tool_anthropic_image() -> lc.ToolMessage:
    return lc.ToolMessage(
        content=[
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
        ],
        tool_call_id="call_Qx1",
        artifact={"rows": 3},
        id="tool-native-img",
    )


def _human_media() -> lc.HumanMessage:
    return lc.HumanMessage(
        content=[
            {"type": "text", "text": "Is this box damaged?"},
            {"type": "image", "url": "https://img.example/box.jpg"},
            {"type": "file", "file_id": "file-abc123", "extras": {"filename": "r.pdf"}},
            {"type": "video", "url": "https://video.example/unboxing.mp4"},
        ],
        id="human-media",
    )


def _human_anthropic_image() -> lc.HumanMessage:
    return lc.HumanMessage(
        content=[
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "text", "text": "What is this?", "cache_control": {"type": "ephemeral"}},
        ],
        id="human-native",
    )


def _system_cached() -> lc.SystemMessage:
    return lc.SystemMessage(
        content=[
            {"type": "text", "text": "You are a support agent. "},
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        ],
        id="system-cached",
    )


CASES: list[tuple[str, Any, dict[str, Any]]] = [
    ("anthropic-thinking-tool-use", _anthropic_thinking_tool_use(),
     {"kind": "AiMessage", "text": "Let me look that up.", "items": ["thinking"],
      "calls": ["toolu_01TS5h8LNo7p5imcG7yRiaUM"]}),
    ("anthropic-redacted-thinking", _anthropic_redacted(),
     {"kind": "AiMessage", "text": None, "items": ["redacted_thinking"], "calls": ["toolu_02"]}),
    ("anthropic-web-search", _anthropic_web_search(),
     {"kind": "AiMessage", "text": "The carrier reports no delays.",
      "items": ["server_tool_use", "web_search_tool_result"], "calls": []}),
    ("responses-reasoning-function-call", _responses_reasoning_function_call(),
     {"kind": "AiMessage", "text": "Checking.", "items": ["reasoning"], "calls": ["call_Qx1"]}),
    ("responses-web-search", _responses_web_search(),
     {"kind": "AiMessage", "text": "No delays reported.", "items": ["web_search_call"],
      "calls": []}),
    ("responses-refusal", _responses_refusal(),
     {"kind": "AiMessage", "text": None, "items": [], "calls": [],
      "refusal": "I can't help with that."}),
    ("v1-reasoning-tool-call", _v1_reasoning_tool_call(),
     {"kind": "AiMessage", "text": "One moment.", "items": ["reasoning"], "calls": ["call_v1"]}),
    ("v1-server-tools", _v1_server_tools(),
     {"kind": "AiMessage", "text": "Found it.",
      "items": ["server_tool_call", "server_tool_result"], "calls": []}),
    ("v1-generated-image", _v1_generated_image(),
     {"kind": "AiMessage", "text": "Here is the label.", "items": ["image"], "calls": []}),
    ("call-in-content-only", _call_in_content_only(),
     {"kind": "AiMessage", "text": None, "items": [], "calls": ["toolu_09"]}),
    ("tool-result-images", _tool_images(),
     {"kind": "ToolMessage", "text": "The chart:"}),
    ("tool-result-anthropic-image", _tool_anthropic_image(),
     {"kind": "ToolMessage", "text": ""}),
    ("human-media-and-video", _human_media(),
     {"kind": "UserMessage", "parts": ["TextPart", "ImagePart", "FilePart"]}),
    ("human-anthropic-image", _human_anthropic_image(),
     {"kind": "UserMessage", "parts": ["TextPart"]}),
    ("system-cache-control", _system_cached(),
     {"kind": "SystemMessage", "text": "You are a support agent. Be brief."}),
]  # fmt: skip

LOSSY = {"call-in-content-only"}  # its call comes back in ``tool_calls`` too
