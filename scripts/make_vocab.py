"""Writes rust/vocab/{cl100k_base,o200k_base}.bin, the vocabularies built into the extension.

Input: a ``.tiktoken`` (or ``.tiktoken.gz``) file per encoding, lines of ``base64(token) rank``.
Output: the tokens in rank order (ranks must be 0, 1, 2, ...), each as one length byte then
its bytes. Run once by hand when a vocabulary changes:

    python scripts/make_vocab.py cl100k_base PATH/cl100k_base.tiktoken
    python scripts/make_vocab.py o200k_base PATH/o200k_base.tiktoken.gz

The tests compare every count with tiktoken's, so a wrong file cannot go unnoticed.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import sys
from pathlib import Path


def main(name: str, source: str) -> None:
    raw = Path(source).read_bytes()
    if source.endswith(".gz"):
        raw = gzip.decompress(raw)
    out = bytearray()
    for expected, line in enumerate(raw.splitlines()):
        token, rank = line.split()
        if int(rank) != expected:
            raise SystemExit(f"ranks are not contiguous at line {expected}")
        data = base64.b64decode(token)
        if not 0 < len(data) < 256:
            raise SystemExit(f"token of {len(data)} bytes at rank {expected}")
        out.append(len(data))
        out += data
    target = Path(__file__).resolve().parent.parent / "rust" / "vocab" / f"{name}.bin"
    target.write_bytes(out)
    print(target.name, expected + 1, "tokens", len(out), "bytes", hashlib.sha256(out).hexdigest())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
