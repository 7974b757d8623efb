"""A function's docstring split into the tool's description and its parameters' descriptions.

Google style (an ``Args:`` section) and reST field lists (``:param name: text``) are read; the
description is the text before the first section or field, so the model is not sent the
``Returns:`` or ``Raises:`` notes twice.

>>> doc = '''Add items to the cart.
...
... Args:
...     sku: The product code.
...     qty (int): How many,
...         at least one.
...
... Returns:
...     The cart's new total.
... '''
>>> split_docstring(doc)
('Add items to the cart.', {'sku': 'The product code.', 'qty': 'How many, at least one.'})
>>> split_docstring(":param sku: The product code.\\n:returns: the total")
('', {'sku': 'The product code.'})
"""

from __future__ import annotations

import inspect
import re

_SECTIONS = frozenset(
    (
        "args",
        "arguments",
        "parameters",
        "params",
        "keyword args",
        "keyword arguments",
        "returns",
        "return",
        "yields",
        "yield",
        "raises",
        "examples",
        "example",
    )
)
_PARAMETER_SECTIONS = frozenset(
    ("args", "arguments", "parameters", "params", "keyword args", "keyword arguments")
)
_SECTION = re.compile(r"([A-Za-z][A-Za-z ]*):\s*")
_GOOGLE_ENTRY = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(.*)")
_REST_FIELD = re.compile(r":(\w+)((?:\s+[^\s:]+)*)\s*:(.*)")


def split_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (text before the first section) and each documented parameter's text."""
    lines = inspect.cleandoc(doc or "").splitlines()
    description: list[str] = []
    parameters: dict[str, str] = {}
    index = 0
    while index < len(lines) and not _starts_section(lines[index]):
        description.append(lines[index])
        index += 1
    while index < len(lines):
        line = lines[index]
        header = _SECTION.fullmatch(line)
        if header is not None and header.group(1).lower() in _SECTIONS:
            body, index = _indented_block(lines, index + 1, _indent(line))
            if header.group(1).lower() in _PARAMETER_SECTIONS:
                parameters.update(_google_entries(body))
            continue
        if line.lstrip().startswith(":"):
            block, index = _indented_block(lines, index + 1, _indent(line))
            field = _REST_FIELD.match(line.strip())
            if field is not None and field.group(1) in ("param", "parameter", "arg", "key"):
                words = field.group(2).split()  # ":param name:" or ":param type name:"
                if words:
                    parameters[words[-1].lstrip("*")] = _joined([field.group(3), *block])
            continue
        index += 1
    return "\n".join(description).strip(), parameters


def _starts_section(line: str) -> bool:
    header = _SECTION.fullmatch(line)
    return (header is not None and header.group(1).lower() in _SECTIONS) or line.startswith(":")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _indented_block(lines: list[str], start: int, indent: int) -> tuple[list[str], int]:
    """The lines from ``start`` indented deeper than ``indent`` (blank lines included), and the
    index after them."""
    end = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    return lines[start:end], end


def _google_entries(body: list[str]) -> dict[str, str]:
    """``name (type): text`` entries, each continued by the lines indented under it."""
    entries: dict[str, list[str]] = {}
    entry_indent = min((_indent(line) for line in body if line.strip()), default=0)
    current: list[str] | None = None
    for line in body:
        if line.strip() and _indent(line) == entry_indent:
            match = _GOOGLE_ENTRY.fullmatch(line.strip())
            current = None if match is None else entries.setdefault(match.group(1), [])
            if match is not None and current is not None:
                current.append(match.group(2))
        elif current is not None:
            current.append(line)
    return {name: _joined(parts) for name, parts in entries.items()}


def _joined(parts: list[str]) -> str:
    return " ".join(part.strip() for part in parts if part.strip())
