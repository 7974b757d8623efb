"""Which provider an `AiMessage.provider_items` item belongs to, for the format converters.

An item is opaque; its ``type`` says whose it is. Each converter sends every item except those
of a type known to be the other provider's, so an item type a provider adds later still goes
back to that provider (and round-trips through its converter), while the stored message keeps
every item whatever format a window is sent in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentctx_fast._wire import copy_json
from agentctx_fast.core.messages import AiMessage

ANTHROPIC_BLOCK_TYPES = frozenset(
    (
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
        "search_result",
    )
)
"""Anthropic assistant content blocks other than text and tool_use."""

RESPONSES_ITEM_TYPES = frozenset(
    (
        "reasoning",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "custom_tool_call",
        "custom_tool_call_output",
        "tool_search_call",
        "tool_search_output",
        "compaction",
        "item_reference",
    )
)
"""OpenAI Responses items other than messages, function calls and their outputs."""


def items_for(message: AiMessage, others: frozenset[str]) -> list[dict[str, Any]]:
    """The message's provider items except those of a type in ``others`` (copies: a caller
    that edits the request never changes the stored message)."""
    return [
        copy_json(item)
        for item in message.provider_items
        if not (isinstance(item, Mapping) and item.get("type") in others)
    ]
