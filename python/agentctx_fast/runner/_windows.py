"""The turn loop's windows: turn statuses from the turn records, the compression coordinator in
the loop (SPEC §9, §11 "Completing the runner"), per-conversation incremental summaries, and the
``on_compression_error`` policy."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial

from agentctx_fast._ids import check_identifier
from agentctx_fast.compression.compressors import IncrementalCompressor
from agentctx_fast.compression.coordinator import (
    CompressionCoordinator,
    fenced_state_store,
    resumed,
)
from agentctx_fast.core.calibration import CalibratedTokenEstimator
from agentctx_fast.core.messages import AiMessage, Message
from agentctx_fast.core.turns import TurnStatus, segment_turns
from agentctx_fast.core.window import Compressor, ContextWindow, build_window, run_compressor
from agentctx_fast.errors import (
    CompressionError,
    CompressionStateConflictError,
    CompressorOutputError,
    CoveredMessageNotFoundError,
    InvalidArgumentError,
    StoreError,
)
from agentctx_fast.memory import AsyncChatMemory
from agentctx_fast.observability import metrics as m
from agentctx_fast.runner._state import (
    Engine,
    TurnRun,
    counted,
    log_context,
    remember_status,
    together,
)
from agentctx_fast.runner.agent import Agent
from agentctx_fast.stores.turn_store import AgentTurnSnapshot

log = logging.getLogger("agentctx_fast.runner")

COMPRESSION_FAILURES = (
    CompressionError,
    CompressorOutputError,
    CoveredMessageNotFoundError,
    CompressionStateConflictError,
    StoreError,
)
"""What a failing compressor or coordinator raises; ``on_compression_error`` decides."""

_UNKNOWN = TurnStatus.RUNNING  # a cache miss (RUNNING, an open status, is never cached)
_CACHED_SUMMARIES = 1_024
_PAGE = 256


async def window_for(eng: Engine, run: TurnRun) -> ContextWindow:
    agent = run.agent
    labels = {"agent": agent.name}
    statuses = await _turn_statuses(eng, run)
    timeline = [*run.history, *run.messages]
    try:
        if agent.context_compressor is None:
            window = _build(agent, timeline, None, statuses)
        elif agent.compression_trigger is not None and run.conversation_id is not None:
            coordinated = await _coordinated_messages(eng, run, timeline)
            window = _build(agent, coordinated, None, statuses)
        else:
            compressor = _compressor_for(eng, run, partial(_summary_keeper, eng))
            try:
                window = await run.io.offload(_build, agent, timeline, compressor, statuses)
            except CompressionError as error:
                if not isinstance(error.__cause__, CoveredMessageNotFoundError):
                    raise
                # The window's older turns moved past this conversation's running summary
                # (a heavy turn attached fewer of them): start a new summary of them.
                _forget_summary(eng, run)
                compressor = _compressor_for(eng, run, partial(_summary_keeper, eng))
                window = await run.io.offload(_build, agent, timeline, compressor, statuses)
    except COMPRESSION_FAILURES as error:
        if eng.metrics is not None:
            eng.metrics.record(m.COMPRESSOR_FAILURES, 1, labels)
        if agent.on_compression_error != "uncompressed":
            raise
        log.warning(
            "agent %r, conversation %r, turn %r: compression failed (%s: %s); the model "
            "call goes ahead without it",
            agent.name, run.conversation_id, run.turn_id, type(error).__name__, error,
            extra=log_context(run),
        )  # fmt: skip
        window = _build(agent, timeline, None, statuses)
    if window.repairs:
        log.debug(
            "turn %r: the window repaired %d tool-protocol violation(s) of the history",
            run.turn_id, len(window.repairs), extra=log_context(run),
        )  # fmt: skip
    if eng.metrics is not None:
        record = eng.metrics.record
        record(m.WINDOW_MESSAGES, len(window.messages), labels)
        record(m.WINDOW_TOKENS, window.estimated_tokens, labels)
        record(m.WINDOW_DROPPED_TURNS, window.dropped_turns, labels)
        record(m.WINDOW_COMPACTED_TURNS, window.compacted_turns, labels)
    return window


def observe_reply(
    eng: Engine, run: TurnRun, window: ContextWindow, reply: object, started: float
) -> None:
    """Model latency and the usage the model reported (with the window's estimate ratio);
    a `CalibratedTokenEstimator` of the agent learns from the reported prompt tokens."""
    usage = getattr(reply, "usage", None) if isinstance(reply, AiMessage) else None
    prompt = _count(getattr(usage, "prompt_tokens", None))
    completion = _count(getattr(usage, "completion_tokens", None))
    estimator = run.agent.token_estimator
    if prompt and isinstance(estimator, CalibratedTokenEstimator):
        estimator.observe(estimator.base.estimate(window.messages), prompt)
    if eng.metrics is None:
        return
    labels = {"agent": run.agent.name}
    record = eng.metrics.record
    record(m.MODEL_LATENCY_SECONDS, time.perf_counter() - started, labels)
    if prompt is not None:
        record(m.MODEL_PROMPT_TOKENS, prompt, labels)
        if prompt > 0:
            record(m.WINDOW_ESTIMATE_RATIO, window.estimated_tokens / prompt, labels)
    if completion is not None:
        record(m.MODEL_COMPLETION_TOKENS, completion, labels)


async def _turn_statuses(eng: Engine, run: TurnRun) -> dict[str, TurnStatus] | None:
    """The recorded status of every turn of the window's history the store knows, so a
    cancelled, failed or suspended turn is never compacted, even with a final answer."""
    conversation_id = run.conversation_id
    if conversation_id is None:
        return None
    statuses = {run.turn_id: TurnStatus.RUNNING}
    cache = eng.status_cache
    known: dict[str, TurnStatus | None] = {}
    for turn_id in dict.fromkeys(msg.turn_id for msg in run.history if msg.turn_id):
        if turn_id in statuses or not _storable(turn_id):
            continue
        known[turn_id] = cache.get((conversation_id, turn_id), _UNKNOWN)
    unknown = [turn_id for turn_id, status in known.items() if status is _UNKNOWN]
    if unknown:

        async def load() -> list[AgentTurnSnapshot | None]:
            return [await eng.turn_store.load_turn(conversation_id, t) for t in unknown]

        # all of them as one unit of store I/O (one thread hop on the async SQLite store)
        snapshots = await together(eng, run, "loading turn statuses", load)
        for turn_id, snapshot in zip(unknown, snapshots, strict=True):
            # No record: written without the runner, its status is inferred; a record is
            # made before a turn's first message, so none appears later. A final status
            # never changes again. Both are kept; an open one is asked again next time.
            status = None if snapshot is None else snapshot.status
            remember_status(eng, conversation_id, turn_id, status)
            known[turn_id] = status
    for turn_id, status in known.items():
        if status is not None:
            statuses[turn_id] = status
    return statuses


def _compressor_for(
    eng: Engine,
    run: TurnRun,
    own: Callable[[IncrementalCompressor, TurnRun], IncrementalCompressor],
) -> Compressor:
    """The agent's compressor for this conversation, metrics counted: an incremental one is
    replaced by ``own(compressor, run)``, so no summary is shared between conversations."""
    compressor = run.agent.context_compressor
    assert compressor is not None
    if isinstance(compressor, IncrementalCompressor):
        compressor = own(compressor, run)
    if eng.metrics is not None:
        compressor = counted(compressor, eng.metrics, {"agent": run.agent.name})
    return compressor


def _forget_summary(eng: Engine, run: TurnRun) -> None:
    compressor = run.agent.context_compressor
    key_id = run.conversation_id or f"turn:{run.turn_id}"
    with eng.caches_lock:
        eng.summaries.pop((compressor, key_id), None)  # type: ignore[arg-type]


def _summary_keeper(
    eng: Engine, compressor: IncrementalCompressor, run: TurnRun
) -> IncrementalCompressor:
    """Without a trigger: one running summary per conversation, kept in this process."""
    if run.conversation_id is None:
        key_id = f"turn:{run.turn_id}"  # an explicit history: one summary for this turn
    else:
        key_id = run.conversation_id
    key = (compressor, key_id)
    with eng.caches_lock:  # the blocking runner serves many threads
        own = eng.summaries.get(key)
        if own is None:
            own = eng.summaries[key] = compressor.fork()
            if len(eng.summaries) > _CACHED_SUMMARIES:
                eng.summaries.popitem(last=False)
        else:
            eng.summaries.move_to_end(key)
        return own


async def _coordinated_messages(
    eng: Engine, run: TurnRun, timeline: list[Message]
) -> list[Message]:
    """The saved summary, the older messages it does not cover yet and the protected
    recent turns; the coordinator compresses first when the agent's trigger fires."""
    agent = run.agent
    conversation_id = run.conversation_id
    memory = run.memory
    assert conversation_id is not None and agent.compression_trigger is not None
    segments = segment_turns(timeline)
    protected = agent.compression_keep_recent_turns + 1  # the current turn too
    if memory is None or len(segments) <= protected:
        return timeline
    boundary = int(segments.starts[len(segments) - protected])
    recent = timeline[boundary:]
    state = await eng.states.load(conversation_id)
    covered = None if state is None else state.covered_until_message_id
    older = await _older(memory, recent[0].message_id, covered)
    compressible = [message for message in older if message.model_visible]
    # An incremental compressor continues the persisted summary (saved by any process),
    # never its in-process state of another conversation.
    compressor = _compressor_for(eng, run, lambda inner, _run: resumed(inner, state))
    coordinator = CompressionCoordinator(
        eng.states,
        agent.compression_trigger,
        compressor,
        agent.window_options.token_estimator,
    )

    async def call(chosen: Compressor, inputs: list[Message]) -> list[Message]:
        return await run.io.offload(run_compressor, chosen, inputs)

    # The state is written for this turn: fenced like its messages (SPEC §20).
    states = eng.states if run.fence is None else fenced_state_store(eng.states, run.fence)
    try:
        result = await coordinator.compress_with(
            states, conversation_id, compressible, call=call, loaded=state
        )
    except CompressionStateConflictError:
        # Another process saved first: reload once and use the winner's summary.
        result = await coordinator.compress_with(
            eng.states, conversation_id, compressible, allow_compression=False
        )
    return [*result.model_messages, *recent]


def _build(
    agent: Agent,
    timeline: Sequence[Message],
    compressor: Compressor | None,
    statuses: Mapping[str, TurnStatus] | None,
) -> ContextWindow:
    options = agent.window_options  # checked once, when the agent was made
    if compressor is not options.context_compressor:  # per conversation, counted, or none
        options = replace(options, context_compressor=compressor)
    return build_window(timeline, options, system=agent.instructions, turn_statuses=statuses)


def _count(value: object) -> int | None:
    """A reported token count, or None when the model reported none (or nonsense)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _storable(turn_id: str) -> bool:
    try:
        check_identifier(turn_id, "turn_id")
    except InvalidArgumentError:
        return False
    return True


async def _older(
    memory: AsyncChatMemory, boundary_id: str, covered_id: str | None
) -> list[Message]:
    """The stored messages before ``boundary_id``, from ``covered_id`` on (inclusive), or from
    the start when nothing is covered yet: read page by page from the newest backwards."""
    collected: list[Message] = []
    while True:
        chunk = await memory.get_messages(_PAGE, offset=len(collected))
        collected = chunk + collected
        ids = [message.message_id for message in collected]
        at_start = len(chunk) < _PAGE
        if boundary_id in ids and (at_start or (covered_id is not None and covered_id in ids)):
            end = ids.index(boundary_id)
            start = ids.index(covered_id) if covered_id is not None and covered_id in ids else 0
            return collected[start:end] if start < end else []
        if at_start:
            raise CoveredMessageNotFoundError(
                f"message {boundary_id!r} of the current window is not in chat memory"
            )
