"""The README's service example: a Starlette app streaming a turn of the async runner over
server-sent events on the SQLite store, driven in-process through httpx's ASGI transport: a
lookup, a refund that waits for its approval, and bad bodies answered with 400."""

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


def _serve(tmp_path: Path, client_calls: Any) -> Any:
    """Runs ``client_calls(client)`` against the example app (lifespan included) and returns
    what it returns."""
    httpx = pytest.importorskip("httpx")
    app = _example().create_app(f"sqlite:///{tmp_path / 'service.db'}")

    async def main() -> Any:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://service") as client:
                return await client_calls(client)

    return asyncio.run(main())


@pytest.mark.parametrize("approve", [True, False])
def test_a_refund_waits_for_its_approval(tmp_path: Path, approve: bool) -> None:
    async def calls(client: Any) -> tuple[Any, ...]:
        asked = await client.post(
            "/conversations/c1/turns", json={"message": "Please refund ORD-7."}
        )
        turn_id = _events(asked.text)[-1][1]["turn_id"]
        busy = await client.post("/conversations/c1/turns", json={"message": "Hello?"})
        url = f"/conversations/c1/turns/{turn_id}/approvals"
        answered = await client.post(url, json={"decisions": {"refund-1": approve}})
        again = await client.post(url, json={"decisions": {"refund-1": approve}})
        unknown = await client.post(
            "/conversations/c1/turns/no-such-turn/approvals",
            json={"decisions": {"refund-1": True}},
        )
        return asked, turn_id, busy, answered, again, unknown

    asked, turn_id, busy, answered, again, unknown = _serve(tmp_path, calls)
    events = _events(asked.text)
    assert [name for name, _ in events][-3:] == ["tool_call", "approval_required", "turn_ended"]
    assert events[-3][1] == {"id": "refund-1", "name": "issue_refund"}
    assert events[-2][1] == {"tool_call_ids": ["refund-1"]}
    assert events[-1][1]["status"] == "suspended"
    assert busy.status_code == 409 and busy.json()["turn_id"] == turn_id
    assert answered.status_code == 200
    assert answered.json() == {
        "turn_id": turn_id,
        "status": "completed",
        "text": "Refunded." if approve else "The refund was not issued.",
        "error": None,
    }
    assert again.status_code == 409  # the suspension was taken once
    assert unknown.status_code == 404


BAD_BODIES = [
    pytest.param(b"{}", id="empty-object"),
    pytest.param(b"not json", id="not-json"),
    pytest.param(b"[1, 2]", id="not-an-object"),
    pytest.param(b"\xff", id="not-utf8"),
    pytest.param(b"", id="empty"),
    pytest.param(b'{"message": 3, "decisions": [true]}', id="wrong-types"),
    pytest.param(b'{"decisions": {"refund-1": "yes"}}', id="decision-not-bool"),
]


@pytest.mark.parametrize("body", BAD_BODIES)
def test_a_bad_body_is_400_and_changes_nothing(tmp_path: Path, body: bytes) -> None:
    async def calls(client: Any) -> tuple[Any, Any, Any]:
        asked = await client.post("/conversations/c1/turns", json={"message": "Refund ORD-7"})
        turn_id = _events(asked.text)[-1][1]["turn_id"]
        turn = await client.post("/conversations/c2/turns", content=body)
        approval = await client.post(f"/conversations/c1/turns/{turn_id}/approvals", content=body)
        after = await client.post(
            f"/conversations/c1/turns/{turn_id}/approvals",
            json={"decisions": {"refund-1": True}},
        )
        return turn, approval, after

    turn, approval, after = _serve(tmp_path, calls)
    assert turn.status_code == 400 and "error" in turn.json()
    assert approval.status_code == 400 and "error" in approval.json()
    assert after.status_code == 200 and after.json()["status"] == "completed"
