"""Seeded corpora of agent-service text for the token estimators' accuracy and parity tests:
English support prose, Chinese support dialogue, JSON tool results (English or Chinese values),
code, in proportions chosen by the caller."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable

from agentctx_fast import AiMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
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


# ---------------------------------------------------------------------------------------------
# Tool-heavy conversations: JSON tool results with timestamps, ids, numbers, Chinese strings
# ---------------------------------------------------------------------------------------------

_ZH_NAMES = ["张伟", "王晓燕", "李娜", "刘洋", "陈静", "杨帆", "赵磊", "黄敏", "欧阳震华", "郑晓彤"]
_ZH_PLACES = [
    "上海浦东转运中心",
    "北京顺义集散中心",
    "广州白云分拨中心",
    "深圳南山区科技园营业部",
    "杭州萧山仓",
    "成都双流航空港",
    "武汉东西湖分拣中心",
]
_ZH_STREETS = ["文三路", "长安街", "南京西路", "天府大道", "解放碑步行街", "珠江新城华夏路"]
_ZH_CITIES = ["浙江省杭州市西湖区", "北京市朝阳区", "广东省深圳市南山区", "四川省成都市武侯区"]
_ZH_PRODUCTS = [
    "无线蓝牙耳机",
    "机械键盘",
    "智能手表",
    "保温杯",
    "运动鞋",
    "充电宝",
    "小米手环8 NFC版 曜石黑",
    "空气净化器滤芯",
    "儿童安全座椅",
]
# Notes as support and logistics systems write them (rarer characters than the dialogue words).
_ZH_NOTES = [
    "快件已到达上海浦东转运中心，下一站北京顺义集散中心",
    "您的快递已由菜鸟驿站代收，请凭取件码及时领取",
    "退款原因：商品与描述不符，颜色偏差较大",
    "客户反馈包装盒有明显挤压痕迹，内部配件缺失一个充电线",
    "系统检测到该账户存在异常登录行为，已临时冻结",
    "优惠券仅限自营商品使用，不与其他活动叠加",
    "订单已拆分为两个包裹发出，请注意查收",
    "骑手正在赶往商家，预计稍后送达",
    "该商品为定制类商品，不支持七天无理由退换货",
    "尊敬的会员，您的积分将于本月底清零，请尽快兑换",
    "物流异常：因台风天气影响，福建、浙江部分地区派送延迟",
    "您的工单已转交技术支持团队，我们会在二十四小时内回复",
    "检测到网络连接超时，请检查防火墙设置后重试",
    "本次维修更换了主板和电池，保修期延长九十天",
    "仓库盘点中，部分商品暂时无法下单",
    "用户在评论中抱怨客服响应慢、态度差",
    "节假日期间物流时效可能延长一至三天",
    "请上传身份证正反面照片以完成实名认证",
]
_EVENTS = ["created", "paid", "picked", "in_transit", "out_for_delivery", "delivered", "refunded"]
_CURRENCIES = ["CNY", "USD", "EUR"]
_TOOLS = ["get_order", "search_orders", "get_shipment", "list_tickets", "get_customer"]
_TIMEZONES = ["Z", "+08:00", "+00:00", "-05:00"]


def _timestamp(rng: random.Random) -> str:
    """An ISO 8601 timestamp: with a zone (and milliseconds half the time), or the local
    ``YYYY-MM-DD HH:MM:SS`` form many APIs return."""
    date = f"20{rng.randint(22, 26)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    time = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    if rng.random() < 0.3:
        return f"{date} {time}"
    millis = f".{rng.randint(0, 999):03d}" if rng.random() < 0.5 else ""
    return f"{date}T{time}{millis}{rng.choice(_TIMEZONES)}"


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(4 * digits):0{digits}x}"


def _zh_text(rng: random.Random) -> str:
    """A Chinese value: a note, an address, a product, a person or support dialogue words."""
    kind = rng.random()
    if kind < 0.35:
        return rng.choice(_ZH_NOTES)
    if kind < 0.5:
        return (
            f"{rng.choice(_ZH_CITIES)}{rng.choice(_ZH_STREETS)}{rng.randint(1, 999)}号"
            f"{rng.choice(['', f'{rng.randint(1, 30)}栋{rng.randint(101, 2808)}室'])}"
        )
    if kind < 0.65:
        return rng.choice(_ZH_PLACES)
    if kind < 0.8:
        return rng.choice(_ZH_PRODUCTS)
    if kind < 0.9:
        return rng.choice(_ZH_NAMES)
    return "".join(rng.choice(_ZH_ALL) for _ in range(rng.randint(2, 10))) + "。"


def _en_text(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 8)))


def _text_value(rng: random.Random) -> str:
    """A free-text value, Chinese a fifth of the time."""
    return _zh_text(rng) if rng.random() < 0.2 else _en_text(rng)


def _order(rng: random.Random) -> dict[str, object]:
    """One order record, nested: items, customer, shipment events."""
    return {
        "id": f"ORD-{rng.randint(2022, 2026)}-{rng.randint(1, 999):03d}",
        "uuid": str(uuid.UUID(int=rng.getrandbits(128))),
        "created_at": _timestamp(rng),
        "updated_at": _timestamp(rng),
        "status": rng.choice(_EVENTS),
        "amount": round(rng.uniform(1, 5000), 2),
        "currency": rng.choice(_CURRENCIES),
        "items": [
            {
                "sku": f"SKU-{rng.randint(10000, 99999)}",
                "name": _text_value(rng),
                "qty": rng.randint(1, 5),
                "unit_price": round(rng.uniform(1, 999), 2),
            }
            for _ in range(rng.randint(1, 3))
        ],
        "customer": {
            "id": rng.randint(1, 10**7),
            "name": rng.choice(_ZH_NAMES) if rng.random() < 0.2 else rng.choice(_RARE),
            "email": f"user{rng.randint(1, 99999)}@example.com",
            "phone": f"+86 1{rng.randint(30, 99)}{rng.randint(0, 10**8 - 1):08d}",
            "address": _zh_text(rng) if rng.random() < 0.2 else f"{rng.randint(1, 999)} Main St",
        },
        "shipment": {
            "carrier": rng.choice(["UPS", "FedEx", "DHL", "SF Express", "顺丰速运"]),
            "tracking_no": f"1Z{rng.getrandbits(48):012X}",
            "events": [
                {
                    "time": _timestamp(rng),
                    "status": rng.choice(_EVENTS),
                    "location": rng.choice(_ZH_PLACES) if rng.random() < 0.2 else "Memphis, TN",
                    "geo": [round(rng.uniform(-90, 90), 4), round(rng.uniform(-180, 180), 4)],
                }
                for _ in range(rng.randint(0, 4))
            ],
        },
        "note": _text_value(rng) if rng.random() < 0.6 else None,
        "checksum": _hex(rng, rng.choice([8, 32, 40])),
    }


def _ticket(rng: random.Random) -> dict[str, object]:
    """One support ticket record: ids, hex, timestamps, a score, a Chinese or English body."""
    return {
        "ticket_id": f"TCK-{rng.randint(100000, 999999)}",
        "request_id": f"req_{_hex(rng, 16)}",
        "trace_id": _hex(rng, 32),
        "opened_at": _timestamp(rng),
        "priority": rng.randint(1, 4),
        "score": round(rng.random(), 4),
        "tags": [rng.choice(_WORDS) for _ in range(rng.randint(0, 3))],
        "subject": _text_value(rng),
        "body": _text_value(rng) + " " + _text_value(rng),
        "assignee": {"id": str(uuid.UUID(int=rng.getrandbits(128))), "team": "tier-2"},
        "metrics": {
            "latency_ms": rng.randint(3, 20000),
            "retries": rng.randint(0, 3),
            "hourly": [rng.randint(0, 500) for _ in range(rng.randint(0, 12))],
        },
    }


_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_TRACE_STATES = ["已揽收", "运输中", "派送中", "已签收", "疑难件"]


def _opaque(rng: random.Random, prefix: str, size: int) -> str:
    """A payment-style opaque id (``pi_3MtwBwLkdIwHu7ix28a3tqPa``)."""
    return prefix + "".join(rng.choice(_ALNUM) for _ in range(size))


def _payment(rng: random.Random) -> dict[str, object]:
    """One payment record: opaque ids, amounts in cents, unix times, a hex fingerprint."""
    return {
        "id": _opaque(rng, "pi_", 24),
        "customer": _opaque(rng, "cus_", 14),
        "amount": rng.randint(100, 10**6),
        "amount_refunded": 0 if rng.random() < 0.7 else rng.randint(100, 10**4),
        "currency": rng.choice(_CURRENCIES).lower(),
        "created": rng.randint(1_600_000_000, 1_800_000_000),
        "status": rng.choice(["succeeded", "requires_action", "canceled"]),
        "card": {"brand": "visa", "last4": f"{rng.randint(0, 9999):04d}", "exp_year": 2028},
        "fingerprint": _hex(rng, 16),
        "description": _text_value(rng),
        "metadata": {"order_id": f"ORD-2024-{rng.randint(1, 999):03d}"},
    }


def _trace(rng: random.Random) -> dict[str, object]:
    """One parcel trace as a Chinese carrier's API returns it: Chinese states and events."""
    return {
        "waybill_no": f"SF{rng.randint(10**12, 10**13 - 1)}",
        "state": rng.choice(_TRACE_STATES),
        "events": [
            {
                "time": _timestamp(rng),
                "context": f"【{rng.choice(['上海市', '北京市', '广州市', '杭州市'])}】"
                + rng.choice(_ZH_NOTES[:3] + _ZH_PLACES),
                "area_code": rng.randint(100000, 999999),
            }
            for _ in range(rng.randint(1, 6))
        ],
    }


def _metrics(rng: random.Random) -> dict[str, object]:
    """A metrics time series: timestamps and numbers."""
    return {
        "metric": rng.choice(["orders_per_minute", "p95_latency_ms", "refund_rate"]),
        "points": [
            {
                "ts": _timestamp(rng),
                "value": round(rng.uniform(0, 500), rng.choice([1, 2, 4])),
                "count": rng.randint(0, 900),
            }
            for _ in range(rng.randint(3, 20))
        ],
    }


TOOL_RECORDS: dict[str, Callable[[random.Random], dict[str, object]]] = {
    "order": _order,
    "ticket": _ticket,
    "payment": _payment,
    "trace": _trace,
    "metrics": _metrics,
}
"""Each kind of record a tool result holds, by name."""


def tool_json(rng: random.Random) -> str:
    """A tool result: a JSON page of orders, tickets, payments, parcel traces (Chinese) or
    metric points, with request metadata."""
    make = rng.choice(list(TOOL_RECORDS.values()))
    body = {
        "ok": True,
        "request_id": str(uuid.UUID(int=rng.getrandbits(128))),
        "served_at": _timestamp(rng),
        "data": [make(rng) for _ in range(rng.randint(1, 8))],
        "page": {"cursor": _hex(rng, 24), "total": rng.randint(1, 5000), "per_page": 20},
    }
    indent = rng.choice([None, None, 2])
    return json.dumps(body, indent=indent, ensure_ascii=False)


def tool_arguments(rng: random.Random, name: str) -> str:
    """JSON arguments of a call to ``name``."""
    arguments: dict[str, object] = {
        "order_id": f"ORD-{rng.randint(2022, 2026)}-{rng.randint(1, 999):03d}",
        "since": _timestamp(rng),
        "limit": rng.choice([10, 20, 50]),
    }
    if name == "search_orders" or rng.random() < 0.3:
        arguments["query"] = _text_value(rng)
    return json.dumps(arguments, ensure_ascii=False)


def tool_conversation(seed: int, turns: int = 40) -> list[Message]:
    """A support agent's tool-heavy history: every turn calls 1-3 tools whose results are JSON
    (timestamps, uuids, order ids, hex, numbers, nested records, about a fifth of the free text
    Chinese); a fifth of the user and agent texts are Chinese."""
    rng = random.Random(seed)
    history: list[Message] = [SystemMessage("You are the support agent of a web shop.")]
    for turn in range(turns):
        history.append(UserMessage(chinese_prose(rng) if rng.random() < 0.2 else _english(rng)))
        calls = tuple(
            ToolCall(f"call_{turn}_{i}", name, tool_arguments(rng, name))
            for i, name in enumerate(rng.choice(_TOOLS) for _ in range(rng.randint(1, 3)))
        )
        history.append(AiMessage(None, calls))
        history += [ToolMessage(c.id, tool_json(rng), tool_name=c.name) for c in calls]
        history.append(AiMessage(chinese_prose(rng) if rng.random() < 0.2 else _english(rng)))
    return history


def message_texts(messages: list[Message]) -> list[str]:
    """Every text the estimators count in ``messages``: contents, tool-call names, arguments."""
    texts: list[str] = []
    for message in messages:
        for attr in ("content", "text"):
            value = getattr(message, attr, None)
            if isinstance(value, str):
                texts.append(value)
        for call in getattr(message, "tool_calls", ()):
            texts += [call.name, call.arguments]
    return texts


def has_chinese(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)


__all__ = [
    "TOOL_RECORDS",
    "_GLUE",
    "_RARE",
    "code",
    "corpus",
    "has_chinese",
    "json_result",
    "message_texts",
    "tool_conversation",
    "tool_json",
]
