"""The turn loop, written once (SPEC §11, §17): both runners drive it through an I/O port.

Each model call gets a freshly built window over the conversation. The loop reads the history
page by page only as far back as a window can reach, keeps this turn's messages as it writes
them (``add_message_if_absent``, with ids derived from the turn id, so a retried write is
harmless), and never calls ``clear()``. A turn holds its conversation through a lease in the
store: a second ``run`` meets `AgentConversationBusyError`, and a crashed process's lease
expires, after which the next ``run`` closes the crashed turn as `FAILED`.

`AgentRunner` drives it with blocking stores and a blocking port (every await completes at
once, see `agentctx_fast._blocking`); `AsyncAgentRunner` with async stores and a port that awaits.

The engine is plain functions over a turn's state (`TurnRun`) and the runner's parts
(`Engine`), split by concern:

- `_start`: a new turn (its conversation taken, its record and user message stored), and
  ``run_history``;
- `_resume`: a stored turn taken back: ``resume`` (approvals, or a dead process's turn),
  ``cancel`` and ``turn``;
- `_loop`: the loop itself: window, model call, reply recorded, tool step, until it ends;
- `_windows`: each model call's window (turn statuses, compression, summaries);
- `_tools` and `_approvals`: a step's tool calls, and a resume's decisions;
- `_writes` and `_persist`: the turn's messages, and its record (saving, ending, closing a
  dead process's turn);
- `_history`: what a turn reads of its conversation (page by page: `agentctx_fast._reads`);
- `_state`: the turn's state, the runner's parts, units of store I/O and the lease checks;
  `_leases`: the one lease keeper; `_observed`: spans and turn metrics; `_io`: the ports.

This module names the operations the runners call.
"""

from __future__ import annotations

from agentctx_fast.runner._resume import cancel, resume, turn
from agentctx_fast.runner._start import run, run_history
from agentctx_fast.runner._state import Engine

__all__ = ["Engine", "cancel", "resume", "run", "run_history", "turn"]
