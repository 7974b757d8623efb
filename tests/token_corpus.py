"""Seeded corpora of agent-service text for the token estimators' accuracy and parity tests:
English support prose, Chinese support dialogue, JSON tool results (English or Chinese values),
code, in proportions chosen by the caller."""

from __future__ import annotations

import json
import random
import uuid

from test_tokens_parity import _GLUE, _RARE, _WORDS, _ZH, _ZH_PUNCT, _chinese, _english

_ZH_MORE = [
    "系统",
    "正在",
    "处理",
    "您的",
    "请求",
    "请稍候",
    "账户",
    "余额",
    "不足",
    "优惠券",
    "已过期",
    "会员",
    "积分",
    "兑换",
    "发票",
    "开具",
    "售后",
    "维修",
    "保修期",
    "配送",
    "时间",
    "上午",
    "下午",
    "明天",
    "仓库",
    "缺货",
    "补货",
    "通知",
    "手机号",
    "验证码",
]
_ZH_ALL = _ZH + _ZH_MORE

_CODE_NAMES = ["order", "customer", "items", "total", "status", "result", "client", "retry"]


def chinese_prose(rng: random.Random) -> str:
    """Chinese text with a little ASCII (order ids, amounts, product names)."""
    parts = []
    for _ in range(rng.randint(3, 20)):
        words = [rng.choice(_ZH_ALL) for _ in range(rng.randint(4, 18))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), f" ORD-2024-{rng.randint(1, 999):03d} ")
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words)), f"{rng.randint(1, 9999)}元")
        if rng.random() < 0.1:
            words.insert(rng.randrange(len(words)), rng.choice([" iPhone 15 ", " AirPods ", "VIP"]))
        parts.append(
            "".join(w + (rng.choice(_ZH_PUNCT) if rng.random() < 0.15 else "") for w in words)
        )
        parts.append(rng.choice(["。", "！", "？", "。\n"]))
    return "".join(parts)


def json_result(rng: random.Random, chinese: bool) -> str:
    """A tool result: a JSON list of records, values in English or Chinese."""
    target = rng.randint(150, 3000)
    records: list[dict[str, object]] = []
    while len(json.dumps(records, ensure_ascii=False)) < target:
        note = (
            "".join(rng.choice(_ZH_ALL) for _ in range(rng.randint(0, 8)))
            if chinese
            else " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 6)))
        )
        records.append(
            {
                "order_id": f"ORD-2024-{rng.randint(1, 999):03d}",
                "customer_id": str(uuid.UUID(int=rng.getrandbits(128))),
                "status": rng.choice(["shipped", "pending", "delivered", "cancelled"]),
                "total": round(rng.uniform(5, 900), 2),
                "items": rng.randint(1, 12),
                "carrier": rng.choice(["UPS", "FedEx", "DHL", "SF Express", "顺丰"]),
                "shipped_at": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T10:00:00Z",
                "note": note,
            }
        )
    indent = rng.choice([None, 2])
    return json.dumps(
        {"results": records, "count": len(records)}, indent=indent, ensure_ascii=False
    )


def code(rng: random.Random) -> str:
    """A Python snippet, as a coding agent's tool results carry."""
    lines = []
    for _ in range(rng.randint(2, 8)):
        name = rng.choice(_CODE_NAMES)
        other = rng.choice(_CODE_NAMES)
        lines += [
            f"def get_{name}_{other}(self, {name}_id: str, "
            f"timeout: float = {rng.randint(1, 60)}.0):",
            f'    """Fetch the {name} and its {other}."""',
            f'    response = self.client.get(f"/api/v1/{name}s/{{{name}_id}}", timeout=timeout)',
            "    if response.status_code != 200:",
            f"        raise {name.title()}Error(response.text)",
            f'    return [{other}["id"] for {other} in response.json()["{other}s"]]',
            "",
        ]
    return "\n".join(lines)


def corpus(seed: int, size: int, chinese_share: float) -> list[str]:
    """``size`` texts; about ``chinese_share`` of them carry Chinese (prose, dialogue or
    JSON with Chinese values); the rest English prose, English JSON and code."""
    rng = random.Random(seed)
    texts = []
    for _ in range(size):
        if rng.random() < chinese_share:
            kind = rng.random()
            if kind < 0.4:
                texts.append(chinese_prose(rng))
            elif kind < 0.7:
                texts.append(_chinese(rng))
            else:
                texts.append(json_result(rng, chinese=True))
        else:
            kind = rng.random()
            if kind < 0.4:
                texts.append(_english(rng))
            elif kind < 0.8:
                texts.append(json_result(rng, chinese=False))
            else:
                texts.append(code(rng))
    return texts


def has_chinese(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)


__all__ = ["_GLUE", "_RARE", "code", "corpus", "has_chinese", "json_result"]
