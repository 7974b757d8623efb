"""The README's service example: a Starlette app streaming a turn of the async runner over
server-sent events on the SQLite store, driven in-process through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).parent.parent / "examples" / "asgi_service.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("asgi_service_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _events(body: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_a_turn_streams_as_server_sent_events(tmp_path: Path) -> None:
    httpx = pytest.importorskip("httpx")
    app = _example().create_app(f"sqlite:///{tmp_path / 'service.db'}")

    async def main() -> tuple[Any, Any, Any]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://service") as client:
                first = await client.post(
                    "/conversations/c1/turns", json={"message": "Where is ORD-1?"}
                )
                second = await client.post("/conversations/c1/turns", json={"message": "Thanks!"})
                bad = await client.post("/conversations/bad%00id/turns", json={"message": "x"})
                return first, second, bad

    first, second, bad = asyncio.run(main())
    assert first.status_code == 200
    assert first.headers["content-type"].startswith("text/event-stream")
    events = _events(first.text)
    names = [name for name, _ in events]
    assert names[-1] == "turn_ended" and "tool_call" in names and "tool_result" in names
    assert names.index("tool_call") < names.index("tool_result")
    assert events[names.index("tool_result")][1]["text"] == (
        '{"order_id": "ORD-1", "status": "shipped", "carrier": "DHL"}'
    )
    ended = events[-1][1]
    assert ended["status"] == "completed" and ended["text"] == "ORD-1 has shipped with DHL."
    text = "".join(data["text"] for name, data in events if name == "text")
    assert text == "Let me look that up.ORD-1 has shipped with DHL."
    assert _events(second.text)[-1][1]["status"] == "completed"
    assert bad.status_code == 400
