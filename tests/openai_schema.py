"""Two strict checks of Chat Completions request data, independent of agentctx_fast.

`type_errors(value, tp)` walks a value against the ``openai`` package's own request types
(TypedDicts): every required key present, no key the type does not declare, literals and
nested parts checked (pydantic would accept unknown keys and leave ``Iterable`` fields
unchecked, so it is not used). `request_errors(body)` is a hand-written checker of the API's
request rules, used by the local test server the way the real API answers a bad request
with HTTP 400: allowed keys per role, content part shapes, names, the tool schema and the
pairing of tool results with the calls before them.
"""

from __future__ import annotations

import base64
import binascii
import collections.abc
import os
import re
import types
import typing
from typing import Any

import typing_extensions

# --- against the SDK's TypedDicts -------------------------------------------------------------


def type_errors(value: Any, tp: Any, where: str = "$") -> list[str]:
    """Why ``value`` is not a ``tp`` (an openai request type); empty when it is."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or tp is object:
        return []
    if origin in (typing.Annotated, typing_extensions.Annotated):
        return type_errors(value, args[0], where)
    if origin in (typing_extensions.Required, typing_extensions.NotRequired):
        return type_errors(value, args[0], where)
    if origin in (typing.Union, types.UnionType):
        failures = [type_errors(value, option, where) for option in args]
        if any(not f for f in failures):
            return []
        return [
            f"{where}: matches none of {len(args)} options: "
            + " | ".join("; ".join(f) for f in failures)
        ]
    if origin in (typing.Literal, typing_extensions.Literal):
        return [] if value in args else [f"{where}: {value!r} not in {args}"]
    if tp is type(None) or tp is None:
        return [] if value is None else [f"{where}: expected null"]
    if typing_extensions.is_typeddict(tp):
        return _typeddict_errors(value, tp, where)
    if origin is not None and origin.__name__ == "SequenceNotStr":
        origin = collections.abc.Sequence
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence):
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {type(value).__name__}"]
        return [
            e for i, item in enumerate(value) for e in type_errors(item, args[0], f"{where}[{i}]")
        ]
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            return [f"{where}: expected an object"]
        return [e for k, v in value.items() for e in type_errors(v, args[1], f"{where}.{k}")]
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return [] if ok else [f"{where}: expected a number"]
    if isinstance(tp, type):
        ok = isinstance(value, tp) and (tp is bool or not isinstance(value, bool))
        return [] if ok else [f"{where}: expected {tp.__name__}, got {type(value).__name__}"]
    if origin in (typing.IO, os.PathLike):  # file inputs the SDKs read for you: never JSON
        return [f"{where}: expected a file object"]
    raise TypeError(f"{where}: the checker does not know {tp!r}")


def _typeddict_errors(value: Any, tp: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected an object for {tp.__name__}"]
    hints = typing.get_type_hints(tp, include_extras=True)
    errors = [f"{where}: unknown key {k!r} for {tp.__name__}" for k in value if k not in hints]
    errors += [
        f"{where}: missing key {k!r} for {tp.__name__}"
        for k in tp.__required_keys__
        if k not in value
    ]
    for key, item in value.items():
        if key in hints:
            errors += type_errors(item, hints[key], f"{where}.{key}")
    return errors


# --- the hand-written request checker ---------------------------------------------------------

_NAME = re.compile(r"[^\s<|\\/>]+")
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOP_LEVEL = {
    "model",
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "user",
    "n",
    "response_format",
    "metadata",
    "store",
    "reasoning_effort",
}
_ROLE_KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "refusal", "tool_calls", "audio"},
    "tool": {"role", "content", "tool_call_id"},
}


class RequestError(Exception):
    """What the API would answer with HTTP 400: a message and the offending parameter."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _keys(obj: Any, allowed: set[str], required: set[str], param: str) -> None:
    if not isinstance(obj, dict):
        raise RequestError(f"expected an object at {param}", param)
    for key in obj:
        if key not in allowed:
            raise RequestError(f"Unrecognized request argument supplied: {key}", f"{param}.{key}")
    for key in required:
        if key not in obj:
            raise RequestError(f"Missing required parameter: '{param}.{key}'", f"{param}.{key}")


def _string(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise RequestError(f"Invalid type for '{param}': expected a string", param)
    return value


def _base64(value: Any, param: str) -> None:
    try:
        base64.b64decode(_string(value, param), validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(f"Invalid base64 data at '{param}'", param) from None


def _part(part: Any, allowed: set[str], param: str) -> None:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in allowed:
        raise RequestError(f"Invalid content part type {kind!r} at '{param}'", f"{param}.type")
    if kind == "text":
        _keys(part, {"type", "text"}, {"type", "text"}, param)
        _string(part["text"], f"{param}.text")
    elif kind == "refusal":
        _keys(part, {"type", "refusal"}, {"type", "refusal"}, param)
        _string(part["refusal"], f"{param}.refusal")
    elif kind == "image_url":
        _keys(part, {"type", "image_url"}, {"type", "image_url"}, param)
        image = part["image_url"]
        _keys(image, {"url", "detail"}, {"url"}, f"{param}.image_url")
        url = _string(image["url"], f"{param}.image_url.url")
        if url.startswith("data:"):
            match = re.fullmatch(r"data:image/[a-z0-9.+-]+;base64,(.*)", url, re.S)
            if match is None:
                raise RequestError("Invalid image data URL", f"{param}.image_url.url")
            _base64(match.group(1), f"{param}.image_url.url")
        elif not url.startswith(("http://", "https://")):
            raise RequestError("Invalid image URL", f"{param}.image_url.url")
        if "detail" in image and image["detail"] not in ("auto", "low", "high", "original"):
            raise RequestError("Invalid image detail", f"{param}.image_url.detail")
    elif kind == "input_audio":
        _keys(part, {"type", "input_audio"}, {"type", "input_audio"}, param)
        audio = part["input_audio"]
        _keys(audio, {"data", "format"}, {"data", "format"}, f"{param}.input_audio")
        _base64(audio["data"], f"{param}.input_audio.data")
        if audio["format"] not in ("wav", "mp3"):
            raise RequestError("Invalid audio format", f"{param}.input_audio.format")
    else:
        _keys(part, {"type", "file"}, {"type", "file"}, param)
        file = part["file"]
        _keys(file, {"file_data", "file_id", "filename"}, set(), f"{param}.file")
        if "file_data" in file:
            if "filename" not in file:
                raise RequestError("Missing filename for file_data", f"{param}.file.filename")
            match = re.fullmatch(r"data:[\w.+-]+/[\w.+-]+;base64,(.*)", file["file_data"], re.S)
            if match is None:
                raise RequestError("Invalid file_data", f"{param}.file.file_data")
            _base64(match.group(1), f"{param}.file.file_data")
        elif "file_id" in file:
            _string(file["file_id"], f"{param}.file.file_id")
        else:
            raise RequestError("A file part needs file_data or file_id", f"{param}.file")


def _content(message: dict[str, Any], parts: set[str], param: str, required: bool) -> None:
    content = message.get("content")
    if content is None:
        if required:
            raise RequestError(f"Missing required parameter: '{param}.content'", param)
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise RequestError(f"Invalid type for '{param}.content'", f"{param}.content")
    for i, part in enumerate(content):
        _part(part, parts, f"{param}.content[{i}]")


def _message(message: Any, param: str, open_calls: set[str]) -> None:
    role = message.get("role") if isinstance(message, dict) else None
    if role not in _ROLE_KEYS:
        raise RequestError(f"Invalid value for '{param}.role': {role!r}", f"{param}.role")
    _keys(message, _ROLE_KEYS[role], {"role"}, param)
    if "name" in message and not _NAME.fullmatch(_string(message["name"], f"{param}.name")):
        raise RequestError(f"'{message['name']}' does not match the name pattern", f"{param}.name")
    if role in ("system", "developer"):
        _content(message, {"text"}, param, True)
    elif role == "user":
        _content(message, {"text", "image_url", "input_audio", "file"}, param, True)
    elif role == "tool":
        _content(message, {"text"}, param, True)
        call_id = _string(message.get("tool_call_id"), f"{param}.tool_call_id")
        if call_id not in open_calls:
            raise RequestError(
                "Invalid parameter: messages with role 'tool' must be a response to a "
                "preceding message with 'tool_calls'.",
                param,
            )
        open_calls.discard(call_id)
    else:
        calls = message.get("tool_calls")
        _content(message, {"text", "refusal"}, param, not calls and "refusal" not in message)
        if "refusal" in message and message["refusal"] is not None:
            _string(message["refusal"], f"{param}.refusal")
        if calls is not None:
            if not isinstance(calls, list) or not calls:
                raise RequestError("tool_calls must be a non-empty array", f"{param}.tool_calls")
            for i, call in enumerate(calls):
                where = f"{param}.tool_calls[{i}]"
                _keys(call, {"id", "type", "function"}, {"id", "type", "function"}, where)
                if call["type"] != "function":
                    raise RequestError("Invalid tool call type", f"{where}.type")
                _keys(call["function"], {"name", "arguments"}, {"name", "arguments"}, where)
                _string(call["function"]["name"], f"{where}.function.name")
                _string(call["function"]["arguments"], f"{where}.function.arguments")
                open_calls.add(_string(call["id"], f"{where}.id"))


def _tool(tool: Any, param: str) -> None:
    _keys(tool, {"type", "function"}, {"type", "function"}, param)
    if tool["type"] != "function":
        raise RequestError("Invalid tool type", f"{param}.type")
    function = tool["function"]
    _keys(function, {"name", "description", "parameters", "strict"}, {"name"}, f"{param}.function")
    if not _FUNCTION_NAME.fullmatch(_string(function["name"], f"{param}.function.name")):
        raise RequestError("Invalid function name", f"{param}.function.name")
    if "description" in function:
        _string(function["description"], f"{param}.function.description")
    schema = function.get("parameters", {"type": "object"})
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise RequestError("Invalid schema: parameters must be an object schema", param)


def request_errors(body: Any) -> RequestError | None:
    """The first rule of the Chat Completions request ``body`` breaks, or None."""
    try:
        _keys(body, _TOP_LEVEL, {"model", "messages"}, "body")
        _string(body["model"], "model")
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages must be a non-empty array", "messages")
        open_calls: set[str] = set()
        for i, message in enumerate(messages):
            if isinstance(message, dict) and message.get("role") != "tool" and open_calls:
                raise RequestError(
                    "An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'.",
                    f"messages.[{i}]",
                )
            _message(message, f"messages.[{i}]", open_calls)
        if open_calls:
            raise RequestError("tool calls without results at the end", "messages")
        for i, tool in enumerate(body.get("tools", [])):
            _tool(tool, f"tools.[{i}]")
        if "stream" in body and not isinstance(body["stream"], bool):
            raise RequestError("stream must be a boolean", "stream")
        if "stream_options" in body:
            _keys(body["stream_options"], {"include_usage"}, set(), "stream_options")
            if not body.get("stream"):
                raise RequestError("stream_options is only allowed with stream", "stream_options")
    except RequestError as error:
        return error
    return None
