"""What the wire formats (Chat Completions, Responses, Anthropic in `agentctx_fast.formats`,
LangChain in `agentctx_fast.integrations`) share.

Each format module says how its own entries look; the facts they have in common live here
once: how an error names a message or a part, how a field, an id and a call's arguments are
read and refused, how inline content is written as (and read from) a base64 ``data:`` URL,
which image bytes say their own type, and how an item passed through is copied.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentctx_fast.core.messages import FilePart, ImagePart, Message, Part, UserMessage
from agentctx_fast.errors import AgentCtxError, InvalidArgumentError

_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_DATA_URL = re.compile(r"data:([^;,]*)((?:;[^;,]*)*?);base64,(.*)", re.S)
URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
"""A URI's scheme: a part's ``uri`` without one is a provider's file id."""


def locate(message: object, index: int) -> str:
    """How an error names ``messages[index]`` (made only when one is raised)."""
    at = f"messages[{index}]"
    if isinstance(message, Message):
        at = f"message {message.message_id!r} ({at})"
    return at


def write_parts(
    parts: Sequence[Part],
    message: UserMessage,
    index: int,
    write: Callable[[Part, str], dict[str, Any]],
) -> list[dict[str, Any]]:
    """A user message's parts as a format writes them: each as ``write`` gives it (an error
    names the part: ``message 'u1' (messages[3]) content[0]``)."""
    at = locate(message, index)
    return [write(part, f"{at} content[{i}]") for i, part in enumerate(parts)]


def read_field(
    entry: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    at: str,
    error: type[InvalidArgumentError],
) -> Any:
    """``entry[key]`` when it is a ``kind`` (never a bool), else ``error`` naming it: how
    every wire format (Chat Completions, Responses, Anthropic) reads a field."""
    value = entry.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        shown = "missing" if key not in entry else f"a {type(value).__name__}"
        raise error(f"{at}: {key!r} is {shown}")
    return value


def read_id(entry: Mapping[str, Any], at: str, error: type[InvalidArgumentError]) -> dict[str, Any]:
    """``{"message_id": ...}`` of an entry that carries an ``id`` (a string), else ``{}``: the
    keywords that give the message read from ``entry`` the id it was stored with."""
    if entry.get("id") is None:
        return {}
    return {"message_id": read_field(entry, "id", str, at, error)}


def b64decode(text: str, error: type[AgentCtxError], message: str) -> bytes:
    """``text`` decoded from strict base64, else ``error(message)``."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise error(message) from None


def data_url(mime_type: str, data: bytes) -> str:
    return f"data:{mime_type};base64,{base64.b64encode(data).decode('ascii')}"


def parse_data_url(url: str) -> tuple[str | None, bytes] | None:
    """``(mime_type, bytes)`` of a base64 ``data:`` URL, None for any other URL."""
    match = _DATA_URL.fullmatch(url)
    if match is None:
        return None
    try:
        data = base64.b64decode(match.group(3), validate=True)
    except (binascii.Error, ValueError) as error:
        raise InvalidArgumentError(f"a data: URL has invalid base64: {error}") from None
    return match.group(1) or None, data


def image_mime(part: ImagePart) -> str | None:
    """The image's mime type: its own, else the one its bytes start with (None if unknown)."""
    if part.mime_type:
        return part.mime_type
    data = part.data or b""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for magic, mime in _IMAGE_MAGIC if data.startswith(magic)), None)


def inline_image_url(part: ImagePart, data: bytes, at: str) -> str:
    """An inline image's ``data:`` URL; an image whose type is unknown cannot be sent."""
    mime = image_mime(part)
    if mime is None:
        raise InvalidArgumentError(
            f"{at}: an inline image needs a mime_type (not png, jpeg, gif or webp)"
        )
    return data_url(mime, data)


def inline_file_url(part: FilePart, data: bytes) -> str:
    """An inline file's ``data:`` URL (a file of no stated type is sent as octet-stream)."""
    return data_url(part.mime_type or "application/octet-stream", data)


def image_from_url(url: str, detail: Any) -> ImagePart:
    """The image a URL gives: inline for a ``data:`` URL, else by reference."""
    parsed = parse_data_url(url)
    if parsed is not None:
        return ImagePart(mime_type=parsed[0], data=parsed[1], detail=detail)
    return ImagePart(uri=url, detail=detail)


def decode_file_data(
    text: str, error: type[AgentCtxError], message: str
) -> tuple[str | None, bytes]:
    """``(mime_type, bytes)`` of a ``file_data`` field: a ``data:`` URL or bare base64."""
    parsed = parse_data_url(text)
    return (None, b64decode(text, error, message)) if parsed is None else parsed


def json_string_arguments(
    value: object, what: str, at: str, error: type[InvalidArgumentError]
) -> str:
    """A call's ``arguments`` when they are a string (the JSON text the model wrote)."""
    if not isinstance(value, str):
        raise error(f"{at}: {what} arguments must be a JSON string, got {type(value).__name__}")
    return value


def copy_json(value: Any) -> Any:
    """``value``'s dicts and lists copied all the way down (a caller that edits a request or a
    converted message never changes the stored message)."""
    if isinstance(value, dict):
        return {key: copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_json(item) for item in value]
    return value
