"""SPEC §20, "the window's promise holds for any stored order": tool results stored after
another AI or user message, split around other messages, or orphaned in the current turn
give a window that `validate_tool_protocol` passes, on each core alone and the same on both
(errors included). The golden cases `repair_order_*` fix one history of each shape."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctx_fast.core._reference import api as reference
from conftest import build_message, load_cases, native_or_skip, window_kwargs, window_outcome
from engines import build_on
from strategies import histories, out_of_order_histories, window_options
from window_checks import check_window, visible_turns

SETTINGS = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CORES = ["rust", "python"]
CASES = load_cases("window_cases.jsonl")


def _core(name: str) -> Any:
    return native_or_skip() if name == "rust" else reference


@SETTINGS
@given(data=st.data())
def test_any_stored_order_keeps_the_promise_on_each_core_alike(data: st.DataObject) -> None:
    history = data.draw(st.one_of(out_of_order_histories(), histories()))
    options: dict[str, Any] = data.draw(window_options(history))
    snapshot = [(m.message_id, m) for m in history]
    outcomes = []
    for core in CORES:
        outcome = window_outcome(build_on, _core(core), history, **options)
        assert [(m.message_id, m) for m in history] == snapshot, f"{core}: input mutated"
        if outcome[0] == "error":
            assert not visible_turns(history), f"{core}: unexpected {outcome!r}"
        else:
            check_window(history, options, outcome[0])
        outcomes.append(outcome)
    assert outcomes[0] == outcomes[1], "the cores disagree"


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_histories_keep_the_promise(core: str, case: dict[str, Any]) -> None:
    history = [build_message(spec) for spec in case["messages"]]
    options = window_kwargs(case["options"])
    window = build_on(_core(core), history, **options)
    check_window(history, options, window.messages)
