"""The benchmark corpus: tool-heavy support conversations, built once as message objects.

Half the turns call 1-3 tools, tool results are 200-4,000 characters, a fifth of the text is
Chinese. Seeded, so every run measures the same histories.
"""

from __future__ import annotations

import json
import random
from functools import cache

from agentctx_fast import AiMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage

EN = (
    "Could you check the delivery status of my order and tell me when it will arrive",
    "The parcel was marked as delivered but I never received it at my front door",
    "Please update the shipping address to the new apartment before it leaves the warehouse",
    "I would like a refund for the damaged keyboard, the box was crushed on arrival",
)
ZH = (
    "请帮我查一下订单的物流状态，什么时候能送到",
    "包裹显示已签收，但是我没有收到，麻烦核实一下",
    "我想把收货地址改成新的公寓地址，谢谢",
    "键盘到货时外包装破损，我想申请退款",
)


def _text(rng: random.Random) -> str:
    pool = ZH if rng.random() < 0.2 else EN
    return " ".join(rng.choice(pool) for _ in range(rng.randint(1, 3)))


def _tool_result(rng: random.Random, size: int) -> str:
    items = []
    while len(json.dumps(items, ensure_ascii=False)) < size:
        items.append(
            {
                "order_id": f"ORD-2024-{rng.randint(1, 99999):05d}",
                "status": rng.choice(["shipped", "awaiting_stock", "delivered"]),
                "note": _text(rng)[:80],
                "amount": f"{rng.randint(1, 999)}.{rng.randint(0, 99):02d}",
            }
        )
    return json.dumps(items, ensure_ascii=False)[:size]


@cache
def conversation(size: int, seed: int = 7) -> tuple[Message, ...]:
    """A history of ``size`` messages (a system message first)."""
    rng = random.Random(seed)
    out: list[Message] = [SystemMessage("You are the support agent of a web shop.")]
    turn = 0
    while len(out) < size:
        out.append(UserMessage(_text(rng)))
        if turn % 2 == 0:
            calls = tuple(
                ToolCall(f"call_{i}", "get_order", json.dumps({"order_id": f"ORD-{turn}-{i}"}))
                for i in range(rng.randint(1, 3))
            )
            out.append(AiMessage(None, calls))
            out.extend(
                ToolMessage(c.id, _tool_result(rng, rng.randint(200, 4000)), tool_name=c.name)
                for c in calls
            )
        out.append(AiMessage(_text(rng)))
        turn += 1
    return tuple(out[:size])
