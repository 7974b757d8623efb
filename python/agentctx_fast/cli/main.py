"""The ``agentctx`` command: ``agentctx window FILE``, ``agentctx demo``, ``agentctx schema`` and
``agentctx doctor``.

``agentctx window FILE`` reads a conversation in OpenAI chat format and prints the window the
model would get (`agentctx_fast.cli._conversation_file` describes the file). ``agentctx demo`` runs
a customer-support conversation with tools, an approval and a resumed turn on the embedded
SQLite store (or a Redis or PostgreSQL store) and prints every model window. ``agentctx schema
--url URL`` prints the SQL store's DDL for the URL's dialect; ``agentctx doctor --store URL``
checks a store's records (`agentctx_fast.stores.doctor`). Bad input ends with one line on
standard error and exit status 2, never a traceback. A reader that closes the output early
(``agentctx … | head``) ends the command quietly with status 141, as a command killed by
SIGPIPE does, so a pipeline under ``set -o pipefail`` sees the output was cut short.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentctx_fast._backend import backend
from agentctx_fast.cli._conversation_file import ConversationFileError, read_conversation
from agentctx_fast.core.messages import AiMessage, Message, SystemMessage, ToolMessage
from agentctx_fast.core.protocol import close_unanswered_calls, unanswered_calls
from agentctx_fast.core.tokens import DEFAULT_ESTIMATOR, TokenEstimator, estimator_for_model
from agentctx_fast.core.turns import segment_turns
from agentctx_fast.core.types import CURRENT_TURNS
from agentctx_fast.core.window import ContextWindow, WindowOptions, build_window
from agentctx_fast.errors import AgentCtxError
from agentctx_fast.formats.openai import to_openai

__all__ = ["ConversationFileError", "main", "read_conversation"]

_WINDOW_EPILOG = """\
FILE holds OpenAI chat-format messages: a JSON array, JSONL (one message a line) or an
object with a "messages" array; "-" reads standard input. Entries with "role": "ui" are
UI-only messages ("kind": "action" or "form") that stay in the history and never reach the
model. --json prints the window as Chat Completions request messages (the messages= list);
add --ids to keep each message's "id" (a storage form, not API input). A window ending with
tool calls that have no result is not a request a model API accepts: --json refuses it (exit
status 2, naming the calls) unless --close-pending adds an error result to each ("not run");
--json --ids, a storage form, prints it as it is.
A reader closing the output early (agentctx ... | head) ends the command with status 141.
"""

_DEFAULTS = WindowOptions()  # the window options' defaults, declared by WindowOptions only

PENDING_TEXT = "not run: the conversation has no result for this call"
"""The result ``--close-pending`` gives each call left without one."""


def _excerpt(message: Message, width: int = 60) -> str:
    text = getattr(message, "text", None) or ""
    content = getattr(message, "content", None)
    if isinstance(content, tuple):  # multimodal: say which media it carries
        media = " ".join(f"[{type(p).__name__.removesuffix('Part').lower()}]" for p in content)
        text = " ".join(t for t in (str(text), media.replace("[text]", "").strip()) if t)
    if isinstance(message, AiMessage):
        if message.refusal is not None:
            text = f"{text} [refusal] {message.refusal}".strip()
        if message.tool_calls:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
            text = f"{text} -> {calls}" if text else f"-> {calls}"
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _role(message: Message) -> str:
    if isinstance(message, SystemMessage):
        return message.role
    return _ROLES.get(type(message).__name__, type(message).__name__)


_ROLES = {"UserMessage": "user", "AiMessage": "assistant", "ToolMessage": "tool"}


def _print_table(
    window: ContextWindow, closed: list[ToolMessage], estimator: TokenEstimator
) -> None:
    print(f"{'role':<10} {'id':<24} {'tokens':>6}  text")
    for m in [*window.messages, *closed]:
        tokens = estimator.estimate([m])
        print(f"{_role(m):<10} {m.message_id[:24]:<24} {tokens:>6}  {_excerpt(m)}")
    print(
        f"-- {len(window.messages)} messages, {window.estimated_tokens} estimated tokens, "
        f"attached {window.attached_turns} / dropped {window.dropped_turns} / compacted "
        f"{window.compacted_turns} turns, cut_by={window.cut_by}, "
        f"repairs={len(window.repairs)}, backend={backend}"
    )
    for repair in window.repairs:
        print(f"   repaired {repair.kind} at {repair.message_id} ({repair.tool_call_id})")
    for m in closed:
        print(f"   closed pending call {m.tool_call_id} as not run (--close-pending)")


def _window_command(args: argparse.Namespace) -> int:
    history = read_conversation(args.file)
    estimator = DEFAULT_ESTIMATOR if args.model is None else estimator_for_model(args.model)
    window = build_window(
        history,
        system=args.system,
        max_attached_turns=args.max_turns,
        max_attached_messages=args.max_messages,
        compact_completed_tool_turns=args.compact,
        compression_keep_recent_turns=args.keep_recent,
        max_attached_tokens=args.max_tokens,
        token_estimator=None if args.model is None else estimator,
        current_turn=args.current_turn,
        current_turn_tool_results_kept=args.keep_tool_results,
    )
    # Only the current turn can have calls without results: the window repairs the others.
    starts = segment_turns(window.messages).starts
    current = window.messages[int(starts[-1]) if len(starts) else 0 :]
    pending = [call_id for call_id, _ in unanswered_calls(current)]
    closed: list[ToolMessage] = []
    if pending and args.close_pending:
        closed = close_unanswered_calls(current, lambda _: PENDING_TEXT, id_prefix="pending")
    elif pending and args.json and not args.ids:
        print(
            f"agentctx: {args.file}: the window ends with tool calls that have no result "
            f"({', '.join(pending)}), which a model API refuses; add their results to the "
            "conversation, or pass --close-pending to close them as not run",
            file=sys.stderr,
        )
        return 2
    if args.json:
        entries = to_openai([*window.messages, *closed], include_ids=args.ids)
        print(json.dumps(entries, ensure_ascii=False, indent=2))
    else:
        _print_table(window, closed, estimator)
    if (
        args.max_tokens is not None
        and window.estimated_tokens > args.max_tokens
        and args.current_turn == "last"
    ):
        # Only the system message and the current turn are left (rule 3 keeps them whole).
        print(
            f"agentctx: note: the current turn alone (with the system message) is "
            f"{window.estimated_tokens} estimated tokens, over --max-tokens {args.max_tokens}; "
            "it is sent whole"
            + ("" if args.keep_tool_results is None else " but for its older tool results"),
            file=sys.stderr,
        )
    return 0


def _store_for(url: str) -> Any:
    if url.startswith(("redis://", "rediss://", "unix://")):
        from agentctx_fast.stores.redis import RedisAgentStore

        return RedisAgentStore(url)
    from agentctx_fast.stores.sql import SqlAgentStore

    store = SqlAgentStore(url)
    store.schema.initialize()
    return store


def _demo_command(args: argparse.Namespace) -> int:
    from agentctx_fast.cli.demo import run_demo

    url = args.store or f"sqlite:///{Path(args.db).resolve()}"
    store = _store_for(url)
    try:
        turns = run_demo(store)
    finally:
        store.close()
    return 0 if all(t.status.value == "completed" for t in turns) else 1


def _schema_command(args: argparse.Namespace) -> int:
    from agentctx_fast.stores.sql import schema_ddl

    sys.stdout.write(schema_ddl(args.url, table_prefix=args.table_prefix))
    return 0


def _doctor_command(args: argparse.Namespace) -> int:
    from agentctx_fast.cli.doctor import run_doctor

    return run_doctor(
        args.store, args.conversations, repair=args.repair, prefix=args.prefix,
        cluster=args.cluster,
    )  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentctx",
        description="Context windows for LLM agent services: inspect a conversation's model "
        "window, run the demo, or print the SQL store's schema.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    window = commands.add_parser(
        "window",
        help="print the model window of a conversation file",
        description="Print the window a model would get for the conversation in FILE.",
        epilog=_WINDOW_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    window.add_argument("file", metavar="FILE", help='conversation file, or "-" for stdin')
    window.add_argument(
        "--system", help="the agent's instructions (default: the file's leading system message)"
    )
    for flag, option, text in (
        ("--max-turns", "max_attached_turns", "most history turns to attach"),
        ("--max-messages", "max_attached_messages", "most messages besides the system message"),
        (
            "--max-tokens",
            "max_attached_tokens",
            "token budget of the window; older turns are dropped to fit",
        ),
    ):
        default = getattr(_DEFAULTS, option)
        shown = "none" if default is None else default
        window.add_argument(flag, type=int, default=default, help=f"{text} (default: {shown})")
    window.add_argument(
        "--current-turn",
        choices=CURRENT_TURNS,
        default=_DEFAULTS.current_turn,
        help='"none": the last turn is finished, every turn is history (default: %(default)s)',
    )
    window.add_argument(
        "--keep-tool-results",
        type=int,
        metavar="N",
        default=_DEFAULTS.current_turn_tool_results_kept,
        help="over --max-tokens, send the current turn's tool results but the newest N as "
        "placeholders (default: all sent)",
    )
    window.add_argument(
        "--compact",
        action="store_true",
        help="compact completed tool turns to question and answer (default: off)",
    )
    window.add_argument(
        "--keep-recent",
        type=int,
        default=_DEFAULTS.compression_keep_recent_turns,
        help="recent history turns never compacted (default: %(default)s)",
    )
    window.add_argument(
        "--model",
        metavar="NAME",
        help="count tokens as model NAME does, e.g. gpt-4o (default: the heuristic estimator)",
    )
    window.add_argument(
        "--json",
        action="store_true",
        help="print the window as Chat Completions request messages (default: a table)",
    )
    window.add_argument(
        "--ids", action="store_true", help='with --json, add each message\'s "id" (not API input)'
    )
    window.add_argument(
        "--close-pending",
        action="store_true",
        help="give each tool call left without a result an error result saying it did not run "
        "(without it, --json refuses such a window)",
    )
    window.set_defaults(run=_window_command)
    demo = commands.add_parser(
        "demo",
        help="run the support demo and print every model window",
        description="Run a customer-support conversation with tools, an approval and a resumed "
        "turn, printing every model window.",
    )
    demo.add_argument("--db", default="agentctx-demo.db", help="SQLite file (default: %(default)s)")
    demo.add_argument(
        "--store",
        metavar="URL",
        help="a store URL instead: redis://HOST:PORT/0 or postgresql://USER@HOST/DB",
    )
    demo.set_defaults(run=_demo_command)
    schema = commands.add_parser(
        "schema",
        help="print the SQL store's DDL for a database URL",
        description="Print the CREATE TABLE and CREATE INDEX statements of the SQL store for the "
        "dialect of URL (SQLite or PostgreSQL), for migrations of your own. Nothing connects "
        "to the database.",
    )
    schema.add_argument(
        "--url", required=True, help="a database URL, e.g. postgresql://USER@HOST/DB"
    )
    schema.add_argument(
        "--table-prefix", default="agent_", help="the store's table prefix (default: %(default)s)"
    )
    schema.set_defaults(run=_schema_command)
    doctor = commands.add_parser(
        "doctor",
        help="report (and repair) corrupt records, protocol violations and dead leases",
        description="Check a store's conversations (all of them when none is named): corrupt "
        "message, turn and lease records, tool-protocol violations in stored histories, "
        "expired leases and turns stuck in transition. Exit status 0 when healthy, 1 when "
        "problems remain.",
    )
    doctor.add_argument(
        "--store",
        metavar="URL",
        required=True,
        help="sqlite:///PATH, postgresql://USER@HOST/DB or redis://HOST:PORT/0",
    )
    doctor.add_argument(
        "--repair",
        action="store_true",
        help="quarantine corrupt records and release dead leases, one line per repair",
    )
    doctor.add_argument(
        "--prefix",
        default=None,
        help="the store's table prefix or key prefix (default: the store's default)",
    )
    doctor.add_argument(
        "--cluster",
        action="store_true",
        help="the redis:// URL is a node of a Redis Cluster (default: a single server)",
    )
    doctor.add_argument("conversations", nargs="*", metavar="CONVERSATION")
    doctor.set_defaults(run=_doctor_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentctx`` command; returns the exit status (2 for bad input)."""
    args = _parser().parse_args(argv)
    try:
        status = int(args.run(args))
        sys.stdout.flush()  # a reader that closed the pipe shows here, not at exit
        return status
    except BrokenPipeError:
        # The documented way (Python's signal module docs): what is still buffered goes to
        # devnull at exit, so no "Exception ignored" message follows.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except ConversationFileError as error:
        print(f"agentctx: {error}", file=sys.stderr)
    except (AgentCtxError, OSError) as error:
        where = f"{args.file}: " if getattr(args, "file", None) else ""
        problem = " ".join(str(error).split())
        print(f"agentctx: {where}{type(error).__name__}: {problem}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
