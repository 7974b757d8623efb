"""Golden cases of SPEC §5 (tests/data/window_cases.jsonl, shared with `cargo test`)."""

from __future__ import annotations

from typing import Any

import pytest

from agentctx_fast import build_window
from conftest import build_message, load_cases, window_kwargs

CASES = load_cases("window_cases.jsonl")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_window(case: dict[str, Any]) -> None:
    messages = [build_message(spec) for spec in case["messages"]]
    before = list(messages)
    window = build_window(messages, **window_kwargs(case["options"]))
    expected = case["expected"]
    assert [m.message_id for m in window.messages] == expected["ids"]
    assert window.cut_by == expected["cut_by"]
    assert window.attached_turns == expected["attached_turns"]
    assert window.dropped_turns == expected["dropped_turns"]
    assert window.compacted_turns == expected["compacted_turns"]
    assert [[r.kind, r.message_id, r.tool_call_id] for r in window.repairs] == expected["repairs"]
    assert messages == before


def test_every_rule_has_a_golden_case() -> None:
    names = " ".join(c["name"] for c in CASES)
    for rule in ("rule1", "rule2", "rule3", "rule4", "rule5", "rule6", "rule7", "rule9", "repair"):
        assert rule in names
