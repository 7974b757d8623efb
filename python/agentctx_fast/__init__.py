"""agentctx_fast: context windows for LLM agent services, with a Rust core.

>>> import agentctx_fast
>>> agentctx_fast.backend in ("rust", "python")
True
"""

from typing import TYPE_CHECKING

from agentctx_fast._backend import backend
from agentctx_fast._version import __version__ as __version__
from agentctx_fast.agent import Agent, AgentTurn
from agentctx_fast.anthropic import AnthropicFormatError, from_anthropic, to_anthropic
from agentctx_fast.calibration import CalibratedTokenEstimator
from agentctx_fast.chat_model import AsyncChatModel, ChatModel, StreamingChatModel
from agentctx_fast.clients import AsyncOpenAIChatModel, OpenAIChatModel
from agentctx_fast.compressors import AgentContextCompressors, IncrementalCompressor
from agentctx_fast.coordinator import (
    AgentContextCompressionCoordinator,
    AgentContextCompressionResult,
    AgentContextCompressionState,
    AgentContextCompressionStateStore,
    AsyncAgentContextCompressionStateStore,
    CompressionTriggerInput,
    InMemoryCompressionStateStore,
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
from agentctx_fast.memory import (
    AsyncChatMemory,
    ChatMemory,
    ChatMemoryProvider,
    InMemoryChatMemory,
)
from agentctx_fast.messages import (
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
from agentctx_fast.metrics import AgentMetrics, InMemoryMetrics, MetricSummary
from agentctx_fast.openai import OpenAIFormatError, from_openai, openai_tools, to_openai
from agentctx_fast.protocol import ProtocolViolation, check_tool_protocol, validate_tool_protocol
from agentctx_fast.responses import (
    RESPONSES_METADATA_KEY,
    ResponsesFormatError,
    from_responses,
    to_responses,
)
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
from agentctx_fast.scripted import AsyncScriptedChatModel, ScriptedChatModel, ScriptExhaustedError
from agentctx_fast.stores import (
    AgentStore,
    AsyncAgentStore,
    AsyncInMemoryAgentStore,
    InMemoryAgentStore,
    JsonAgentStoreSerializer,
)
from agentctx_fast.stores.turns import (
    AgentTurnSnapshot,
    AgentTurnStore,
    AsyncAgentTurnStore,
    ConversationLease,
    Fence,
    InMemoryAgentTurnStore,
    LeaseRenewal,
    PendingApproval,
)
from agentctx_fast.tokens import (
    BpeTokenEstimator,
    HeuristicTokenEstimator,
    TiktokenEstimator,
    TokenEstimator,
    estimator_for_model,
)
from agentctx_fast.tools import Tool, ToolResultPage, tool
from agentctx_fast.turns import TurnSegments, TurnStatus, segment_turns
from agentctx_fast.window import (
    AgentContextCompressor,
    ContextWindow,
    WindowOptions,
    build_window,
)

__all__ = [
    "MAX_INLINE_BYTES",
    "RESPONSES_METADATA_KEY",
    "Agent",
    "AgentActionMessage",
    "AgentContextCompressionCoordinator",
    "AgentContextCompressionResult",
    "AgentContextCompressionState",
    "AgentContextCompressionStateStore",
    "AgentContextCompressor",
    "AgentContextCompressors",
    "AgentConversationBusyError",
    "AgentCtxError",
    "AgentFormMessage",
    "AgentMetrics",
    "AgentRunner",
    "AgentStore",
    "AgentTurn",
    "AgentTurnSnapshot",
    "AgentTurnStore",
    "AiMessage",
    "AnthropicFormatError",
    "ApprovalRequired",
    "AsyncAgentContextCompressionStateStore",
    "AsyncAgentRunner",
    "AsyncAgentStore",
    "AsyncAgentTurnStore",
    "AsyncChatMemory",
    "AsyncChatModel",
    "AsyncInMemoryAgentStore",
    "AsyncOpenAIChatModel",
    "AsyncRedisAgentStore",
    "AsyncScriptedChatModel",
    "AsyncSqlAgentStore",
    "AudioPart",
    "BackendUnavailableError",
    "BpeTokenEstimator",
    "CalibratedTokenEstimator",
    "ChatMemory",
    "ChatMemoryProvider",
    "ChatModel",
    "CompressionError",
    "CompressionStateConflictError",
    "CompressionTriggerInput",
    "CompressorOutputError",
    "ContentTooLargeError",
    "ContextWindow",
    "ConversationLease",
    "CoveredMessageNotFoundError",
    "DuplicateMessageError",
    "Fence",
    "FilePart",
    "HeuristicTokenEstimator",
    "ImagePart",
    "InMemoryAgentStore",
    "InMemoryAgentTurnStore",
    "InMemoryChatMemory",
    "InMemoryCompressionStateStore",
    "InMemoryMetrics",
    "IncrementalCompressor",
    "InvalidArgumentError",
    "InvalidMessageTypeError",
    "JsonAgentStoreSerializer",
    "LeaseLostError",
    "LeaseRenewal",
    "Message",
    "MessageNotFoundError",
    "MetricSummary",
    "MissingDependencyError",
    "ModelCallError",
    "OpenAIChatModel",
    "OpenAIFormatError",
    "PendingApproval",
    "ProtocolViolation",
    "RedisAgentStore",
    "ResponsesFormatError",
    "SchemaNotInitializedError",
    "ScriptExhaustedError",
    "ScriptedChatModel",
    "SerializationError",
    "SqlAgentStore",
    "StoreBusyError",
    "StoreError",
    "StoreUnavailableError",
    "StreamEvent",
    "StreamingChatModel",
    "SystemMessage",
    "TextDelta",
    "TextPart",
    "TiktokenEstimator",
    "TokenEstimator",
    "Tool",
    "ToolCall",
    "ToolCallEvent",
    "ToolMessage",
    "ToolProtocolError",
    "ToolResultEvent",
    "ToolResultPage",
    "TurnEnded",
    "TurnNotFoundError",
    "TurnSegments",
    "TurnStateError",
    "TurnStatus",
    "Usage",
    "UserMessage",
    "VersionConflictError",
    "WindowOptions",
    "backend",
    "build_window",
    "check_tool_protocol",
    "estimator_for_model",
    "from_anthropic",
    "from_openai",
    "from_responses",
    "openai_tools",
    "segment_turns",
    "to_anthropic",
    "to_openai",
    "to_responses",
    "tool",
    "validate_tool_protocol",
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
