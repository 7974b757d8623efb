"""agentctx_fast: context windows for LLM agent services, with a Rust core.

>>> import agentctx_fast
>>> agentctx_fast.backend in ("rust", "python")
True
"""

from typing import TYPE_CHECKING

from agentctx_fast._backend import backend
from agentctx_fast._version import __version__ as __version__
from agentctx_fast.compression import compressors
from agentctx_fast.compression.compressors import IncrementalCompressor
from agentctx_fast.compression.coordinator import (
    AsyncCompressionStateStore,
    CompressionCoordinator,
    CompressionResult,
    CompressionState,
    CompressionStateStore,
    CompressionTriggerInput,
    InMemoryCompressionStateStore,
)
from agentctx_fast.core.calibration import CalibratedTokenEstimator
from agentctx_fast.core.messages import (
    MAX_INLINE_BYTES,
    AgentActionMessage,
    AgentFormMessage,
    AiMessage,
    AudioPart,
    FilePart,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from agentctx_fast.core.protocol import (
    ProtocolViolation,
    check_tool_protocol,
    validate_tool_protocol,
)
from agentctx_fast.core.tokens import (
    BpeTokenEstimator,
    HeuristicTokenEstimator,
    TiktokenEstimator,
    TokenEstimator,
    estimator_for_model,
)
from agentctx_fast.core.turns import TurnSegments, TurnStatus, segment_turns
from agentctx_fast.core.window import (
    Compressor,
    ContextWindow,
    WindowOptions,
    build_window,
)
from agentctx_fast.errors import (
    AgentConversationBusyError,
    AgentCtxError,
    BackendUnavailableError,
    CompressionError,
    CompressionStateConflictError,
    CompressorOutputError,
    ContentTooLargeError,
    CoveredMessageNotFoundError,
    DuplicateMessageError,
    InvalidArgumentError,
    InvalidMessageTypeError,
    LeaseLostError,
    MessageNotFoundError,
    MissingDependencyError,
    ModelCallError,
    SchemaNotInitializedError,
    SerializationError,
    StoreBusyError,
    StoreError,
    StoreUnavailableError,
    ToolProtocolError,
    TurnNotFoundError,
    TurnStateError,
    VersionConflictError,
)
from agentctx_fast.formats.anthropic import AnthropicFormatError, from_anthropic, to_anthropic
from agentctx_fast.formats.openai import OpenAIFormatError, from_openai, openai_tools, to_openai
from agentctx_fast.formats.responses import (
    RESPONSES_METADATA_KEY,
    ResponsesFormatError,
    from_responses,
    to_responses,
)
from agentctx_fast.memory import (
    AsyncChatMemory,
    ChatMemory,
    ChatMemoryProvider,
    InMemoryChatMemory,
)
from agentctx_fast.models import AsyncOpenAIChatModel, OpenAIChatModel
from agentctx_fast.models.protocol import AsyncChatModel, ChatModel, StreamingChatModel
from agentctx_fast.models.scripted import (
    AsyncScriptedChatModel,
    ScriptedChatModel,
    ScriptExhaustedError,
)
from agentctx_fast.observability.metrics import AgentMetrics, InMemoryMetrics, MetricSummary
from agentctx_fast.runner import (
    AgentRunner,
    ApprovalRequired,
    AsyncAgentRunner,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnded,
)
from agentctx_fast.runner.agent import Agent, AgentTurn
from agentctx_fast.runner.tools import Tool, ToolResultPage, tool
from agentctx_fast.stores import (
    AgentStore,
    AsyncAgentStore,
    AsyncInMemoryAgentStore,
    InMemoryAgentStore,
    JsonAgentStoreSerializer,
)
from agentctx_fast.stores.turn_store import (
    AgentTurnSnapshot,
    AgentTurnStore,
    AsyncAgentTurnStore,
    ConversationLease,
    Fence,
    InMemoryAgentTurnStore,
    LeaseRenewal,
    PendingApproval,
)

__all__ = [  # noqa: RUF022 (grouped by area, like the imports above: not alphabetical)
    # the core: messages, turns, the tool protocol, tokens, the window
    "backend",
    "Message",
    "SystemMessage",
    "UserMessage",
    "AiMessage",
    "ToolMessage",
    "AgentActionMessage",
    "AgentFormMessage",
    "TextPart",
    "ImagePart",
    "AudioPart",
    "FilePart",
    "ToolCall",
    "Usage",
    "MAX_INLINE_BYTES",
    "TurnStatus",
    "TurnSegments",
    "segment_turns",
    "ProtocolViolation",
    "check_tool_protocol",
    "validate_tool_protocol",
    "TokenEstimator",
    "HeuristicTokenEstimator",
    "BpeTokenEstimator",
    "TiktokenEstimator",
    "CalibratedTokenEstimator",
    "estimator_for_model",
    "WindowOptions",
    "ContextWindow",
    "Compressor",
    "build_window",
    # chat memory and stores
    "ChatMemory",
    "AsyncChatMemory",
    "ChatMemoryProvider",
    "InMemoryChatMemory",
    "AgentStore",
    "AsyncAgentStore",
    "InMemoryAgentStore",
    "AsyncInMemoryAgentStore",
    "SqlAgentStore",
    "AsyncSqlAgentStore",
    "RedisAgentStore",
    "AsyncRedisAgentStore",
    "JsonAgentStoreSerializer",
    "AgentTurnStore",
    "AsyncAgentTurnStore",
    "InMemoryAgentTurnStore",
    "AgentTurnSnapshot",
    "ConversationLease",
    "LeaseRenewal",
    "Fence",
    "PendingApproval",
    # the runner: agents, tools, turns, events
    "Agent",
    "AgentTurn",
    "AgentRunner",
    "AsyncAgentRunner",
    "Tool",
    "tool",
    "ToolResultPage",
    "ApprovalRequired",
    "StreamEvent",
    "TextDelta",
    "ToolCallEvent",
    "ToolResultEvent",
    "TurnEnded",
    # chat models
    "ChatModel",
    "AsyncChatModel",
    "StreamingChatModel",
    "OpenAIChatModel",
    "AsyncOpenAIChatModel",
    "ScriptedChatModel",
    "AsyncScriptedChatModel",
    "ScriptExhaustedError",
    # compression
    "compressors",
    "IncrementalCompressor",
    "CompressionCoordinator",
    "CompressionResult",
    "CompressionState",
    "CompressionStateStore",
    "AsyncCompressionStateStore",
    "InMemoryCompressionStateStore",
    "CompressionTriggerInput",
    # wire formats
    "to_openai",
    "from_openai",
    "openai_tools",
    "OpenAIFormatError",
    "to_responses",
    "from_responses",
    "RESPONSES_METADATA_KEY",
    "ResponsesFormatError",
    "to_anthropic",
    "from_anthropic",
    "AnthropicFormatError",
    # observability
    "AgentMetrics",
    "InMemoryMetrics",
    "MetricSummary",
    # errors
    "AgentCtxError",
    "AgentConversationBusyError",
    "BackendUnavailableError",
    "CompressionError",
    "CompressionStateConflictError",
    "CompressorOutputError",
    "ContentTooLargeError",
    "CoveredMessageNotFoundError",
    "DuplicateMessageError",
    "InvalidArgumentError",
    "InvalidMessageTypeError",
    "LeaseLostError",
    "MessageNotFoundError",
    "MissingDependencyError",
    "ModelCallError",
    "SchemaNotInitializedError",
    "SerializationError",
    "StoreBusyError",
    "StoreError",
    "StoreUnavailableError",
    "ToolProtocolError",
    "TurnNotFoundError",
    "TurnStateError",
    "VersionConflictError",
]


def __getattr__(name: str) -> object:
    # The SQL and Redis stores import SQLAlchemy / redis-py, optional extras: load on use.
    if name in _STORES:
        from agentctx_fast import stores

        return getattr(stores, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_STORES = ("SqlAgentStore", "AsyncSqlAgentStore", "RedisAgentStore", "AsyncRedisAgentStore")

if TYPE_CHECKING:  # typed for users; imported on first use at run time
    from agentctx_fast.stores.redis import AsyncRedisAgentStore, RedisAgentStore
    from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore
