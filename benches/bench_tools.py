"""What argument validation costs per tool call (issue 28): `Tool.invoke` of a plain `Tool`
(JSON parsed, passed as it is) next to the same function made with `Tool.from_function`
(parsed, then validated and converted by pydantic), for flat arguments and for a nested model.

Run: ``python3 -m pytest benches/bench_tools.py --benchmark-enable``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from agentctx_fast.runner.tools import Tool


class Address(BaseModel):
    street: str
    postcode: str
    country: Literal["FR", "DE", "US"] = "FR"


def add_item(sku: str, qty: int, gift: bool = False, tags: list[str] | None = None) -> str:
    """Add a product to the cart."""
    return "ok"


def ship(order_id: str, address: Address, express: bool = False) -> str:
    """Ship an order."""
    return "ok"


CASES: dict[str, tuple[Callable[..., Any], str]] = {
    "flat": (add_item, json.dumps({"sku": "A-1", "qty": 3, "tags": ["x", "y"]})),
    "nested": (
        ship,
        json.dumps({"order_id": "ORD-7", "address": {"street": "1 Main St", "postcode": "75001"}}),
    ),
}


@pytest.mark.parametrize("validated", [False, True], ids=["plain", "validated"])
@pytest.mark.parametrize("case", list(CASES))
def test_invoke(benchmark: Any, case: str, validated: bool) -> None:
    fn, arguments = CASES[case]
    tool = Tool.from_function(fn) if validated else Tool(fn.__name__, fn)
    benchmark.group = f"tool call, {case} arguments"
    outcome = benchmark(tool.invoke, arguments)
    assert outcome.text == "ok" and not outcome.is_error
