"""``agentctx``: the command-line tools.

``agentctx demo`` runs a customer-support conversation with tools, an approval and a resumed
turn on the embedded SQLite store (or ``--store redis://…`` / ``postgresql://…``) and prints
every model window. ``agentctx window FILE`` reads a conversation in OpenAI chat format (a
JSON array, or JSONL) and prints the window the model would get. Entries with ``"role": "ui"``
are UI-only messages (``"kind": "action"`` or ``"form"``, with an optional ``payload``): they
stay in the history but never reach the model.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentctx_fast._backend import backend
from agentctx_fast.errors import AgentCtxError
from agentctx_fast.messages import AgentActionMessage, AgentFormMessage, AiMessage, Message
from agentctx_fast.openai import OpenAIFormatError, from_openai
from agentctx_fast.tokens import DEFAULT_ESTIMATOR
from agentctx_fast.window import ContextWindow, build_window


def read_conversation(path: Path) -> list[Message]:
    """Messages of an OpenAI-format conversation file (JSON array or JSONL)."""
    raw = path.read_text(encoding="utf-8")
    stripped = raw.lstrip()
    entries: list[Any]
    try:
        if stripped.startswith("["):
            entries = json.loads(raw)
        else:
            entries = [json.loads(line) for line in raw.splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        raise OpenAIFormatError(f"{path}: not JSON or JSONL: {error}") from error
    messages: list[Message] = []
    for index, entry in enumerate(entries):
        if isinstance(entry, dict) and entry.get("role") == "ui":
            ids = {"message_id": entry["id"]} if isinstance(entry.get("id"), str) else {}
            kind = AgentFormMessage if entry.get("kind") == "form" else AgentActionMessage
            messages.append(kind(payload=entry.get("payload"), **ids))
        else:
            try:
                messages.extend(from_openai([entry]))
            except OpenAIFormatError as error:
                raise OpenAIFormatError(str(error).replace("entry 0", f"entry {index}")) from None
    return messages


def _excerpt(message: Message, width: int = 60) -> str:
    text = getattr(message, "text", None) or ""
    if isinstance(message, AiMessage) and message.tool_calls:
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        text = f"{text} -> {calls}" if text else f"-> {calls}"
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


_ROLES = {
    "SystemMessage": "system",
    "UserMessage": "user",
    "AiMessage": "assistant",
    "ToolMessage": "tool",
}


def _summary(window: ContextWindow) -> dict[str, Any]:
    return {
        "messages": len(window.messages),
        "estimated_tokens": window.estimated_tokens,
        "attached_turns": window.attached_turns,
        "dropped_turns": window.dropped_turns,
        "compacted_turns": window.compacted_turns,
        "cut_by": window.cut_by,
        "repairs": [
            {"kind": r.kind, "message_id": r.message_id, "tool_call_id": r.tool_call_id}
            for r in window.repairs
        ],
        "backend": backend,
    }


def _print_window(window: ContextWindow, as_json: bool) -> None:
    rows: list[dict[str, Any]] = [
        {
            "role": _ROLES.get(type(m).__name__, type(m).__name__),
            "id": m.message_id,
            "tokens": DEFAULT_ESTIMATOR.count_message(m),
            "text": _excerpt(m),
        }
        for m in window.messages
    ]
    if as_json:
        print(json.dumps({"window": rows, "summary": _summary(window)}, ensure_ascii=False))
        return
    print(f"{'role':<10} {'id':<24} {'tokens':>6}  text")
    for row in rows:
        print(f"{row['role']:<10} {row['id'][:24]:<24} {row['tokens']:>6}  {row['text']}")
    s = _summary(window)
    print(
        f"-- {s['messages']} messages, {s['estimated_tokens']} estimated tokens, "
        f"attached {s['attached_turns']} / dropped {s['dropped_turns']} / compacted "
        f"{s['compacted_turns']} turns, cut_by={s['cut_by']}, repairs={len(s['repairs'])}, "
        f"backend={backend}"
    )
    for repair in s["repairs"]:
        print(f"   repaired {repair['kind']} at {repair['message_id']} ({repair['tool_call_id']})")


def _window_command(args: argparse.Namespace) -> int:
    history = read_conversation(Path(args.file))
    window = build_window(
        history,
        system=args.system,
        max_attached_turns=args.max_turns,
        max_attached_messages=args.max_messages,
        compact_completed_tool_turns=args.compact,
        compression_keep_recent_turns=args.keep_recent,
        max_attached_tokens=args.max_tokens,
    )
    _print_window(window, args.json)
    return 0


def _store_for(url: str) -> Any:
    if url.startswith(("redis://", "rediss://", "unix://")):
        from agentctx_fast.stores.redis import RedisAgentStore

        return RedisAgentStore(url)
    from agentctx_fast.stores.sql import SqlAgentStore

    if url.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    store = SqlAgentStore(url)
    store.schema().initialize()
    return store


def _demo_command(args: argparse.Namespace) -> int:
    from agentctx_fast.demo import run_demo

    url = args.store or f"sqlite:///{Path(args.db).resolve()}"
    store = _store_for(url)
    try:
        turns = run_demo(store)
    finally:
        store.close()
    return 0 if all(t.status.value == "completed" for t in turns) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentctx`` command."""
    parser = argparse.ArgumentParser(prog="agentctx", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    window = commands.add_parser("window", help="print the model window of a conversation file")
    window.add_argument("file", help="conversation in OpenAI chat format (JSON array or JSONL)")
    window.add_argument("--system", help="the agent's instructions (default: the file's own)")
    window.add_argument("--max-turns", type=int, default=10, help="max_attached_turns")
    window.add_argument("--max-messages", type=int, default=100, help="max_attached_messages")
    window.add_argument("--max-tokens", type=int, default=None, help="max_attached_tokens")
    window.add_argument("--compact", action="store_true", help="compact_completed_tool_turns")
    window.add_argument("--keep-recent", type=int, default=2, help="compression_keep_recent_turns")
    window.add_argument("--json", action="store_true", help="print the window as JSON")
    window.set_defaults(run=_window_command)
    demo = commands.add_parser("demo", help="run the support demo and print every model window")
    demo.add_argument("--db", default="agentctx-demo.db", help="SQLite file (default: %(default)s)")
    demo.add_argument("--store", help="a store URL instead: redis://… or postgresql://…")
    demo.set_defaults(run=_demo_command)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (AgentCtxError, OSError) as error:
        print(f"agentctx: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
