"""A local OpenAI-compatible Chat Completions server for the client tests.

It listens on a free loopback port, checks every request body with the strict request checker
(`openai_schema.request_errors`; a bad body gets HTTP 400 like the real API) and answers each
request with the next scripted reply: a completion, an error status, or a server-sent-event
stream of chunks. Every request body is recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from openai_schema import request_errors


@dataclass
class Completion:
    """A whole reply: the assistant ``message`` (API form) and its ``usage``."""

    message: dict[str, Any]
    usage: dict[str, int] | None = None
    finish_reason: str = "stop"


@dataclass
class Failure:
    """An error answer with HTTP ``status``."""

    status: int
    message: str = "scripted failure"
    kind: str = "server_error"


@dataclass
class Stream:
    """A streamed reply: each delta becomes one ``chat.completion.chunk`` event."""

    deltas: list[dict[str, Any]]
    usage: dict[str, int] | None = None
    finish_reason: str = "stop"


Reply = Completion | Failure | Stream


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


@dataclass
class ChatServer:
    """The running server: ``base_url`` for the client, ``script`` to fill, ``requests`` seen."""

    base_url: str = ""
    script: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.requests.append(body)
            if not self.script:
                return Failure(500, "the test server has no scripted reply left")
            return self.script.pop(0)


def _chunk(body: dict[str, Any], choices: list[Any], **extra: Any) -> bytes:
    event = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": body["model"],
        "choices": choices,
        **extra,
    }
    return f"data: {json.dumps(event)}\n\n".encode()


class _Handler(BaseHTTPRequestHandler):
    server_state: ChatServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str, param: str | None = None) -> None:
        self._send_json(
            status, {"error": {"message": message, "type": kind, "param": param, "code": None}}
        )

    def do_POST(self) -> None:
        state = self.server_state
        if self.path != "/v1/chat/completions":
            self._error(404, f"unknown path {self.path}", "invalid_request_error")
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        except ValueError:
            self._error(400, "body is not JSON", "invalid_request_error")
            return
        problem = request_errors(body)
        if problem is not None:
            with state.lock:
                state.requests.append(body)
                state.rejected.append(f"{problem.param}: {problem}")
            self._error(400, str(problem), "invalid_request_error", problem.param)
            return
        reply = state.next_reply(body)
        if isinstance(reply, Failure):
            self._error(reply.status, reply.message, reply.kind)
        elif body.get("stream"):
            if not isinstance(reply, Stream):
                self._error(500, "a stream was asked for a non-stream script", "test_error")
                return
            self._stream(body, reply)
        elif isinstance(reply, Completion):
            self._send_json(
                200,
                {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": reply.finish_reason,
                            "logprobs": None,
                            "message": {
                                "role": "assistant",
                                "content": None,
                                "refusal": None,
                                **reply.message,
                            },
                        }
                    ],
                    "usage": reply.usage,
                },
            )
        else:
            self._error(500, "a completion was asked for a stream script", "test_error")

    def _stream(self, body: dict[str, Any], reply: Stream) -> None:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        extra = {"usage": None} if include_usage else {}
        # Like the API: a text reply opens with content "", a tool call or refusal with null.
        has_text = any(d.get("content") for d in reply.deltas)
        first = {"role": "assistant", "content": "" if has_text else None}
        self.wfile.write(
            _chunk(body, [{"index": 0, "delta": first, "finish_reason": None}], **extra)
        )
        for delta in reply.deltas:
            self.wfile.write(
                _chunk(body, [{"index": 0, "delta": delta, "finish_reason": None}], **extra)
            )
        self.wfile.write(
            _chunk(body, [{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}], **extra)
        )
        if include_usage:
            self.wfile.write(_chunk(body, [], usage=reply.usage))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def serve() -> Iterator[ChatServer]:
    """Runs a server on a free loopback port until the generator is closed."""
    state = ChatServer()
    handler = type("Handler", (_Handler,), {"server_state": state})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
