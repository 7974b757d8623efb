"""agentctx_fast: context windows for LLM agent services, with a Rust core.

>>> import agentctx_fast
>>> agentctx_fast.backend in ("rust", "python")
True
"""

from agentctx_fast._backend import backend
from agentctx_fast.errors import (
    AgentConversationBusyError,
    AgentCtxError,
    CompressionError,
    CompressionStateConflictError,
    CompressorOutputError,
    ContentTooLargeError,
    CoveredMessageNotFoundError,
    DuplicateMessageError,
    InvalidArgumentError,
    InvalidMessageTypeError,
    MessageNotFoundError,
    SerializationError,
    StoreError,
    StoreUnavailableError,
    ToolProtocolError,
    TurnNotFoundError,
    TurnStateError,
    VersionConflictError,
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
    UserMessage,
)
from agentctx_fast.openai import OpenAIFormatError, from_openai, to_openai
from agentctx_fast.protocol import ProtocolViolation, check_tool_protocol, validate_tool_protocol
from agentctx_fast.tokens import HeuristicTokenEstimator, TiktokenEstimator, TokenEstimator
from agentctx_fast.turns import TurnSegments, TurnStatus, segment_turns
from agentctx_fast.window import AgentContextCompressor, ContextWindow, build_window

__all__ = [
    "MAX_INLINE_BYTES",
    "AgentActionMessage",
    "AgentContextCompressor",
    "AgentConversationBusyError",
    "AgentCtxError",
    "AgentFormMessage",
    "AiMessage",
    "AudioPart",
    "CompressionError",
    "CompressionStateConflictError",
    "CompressorOutputError",
    "ContentTooLargeError",
    "ContextWindow",
    "CoveredMessageNotFoundError",
    "DuplicateMessageError",
    "FilePart",
    "HeuristicTokenEstimator",
    "ImagePart",
    "InvalidArgumentError",
    "InvalidMessageTypeError",
    "Message",
    "MessageNotFoundError",
    "OpenAIFormatError",
    "ProtocolViolation",
    "SerializationError",
    "StoreError",
    "StoreUnavailableError",
    "SystemMessage",
    "TextPart",
    "TiktokenEstimator",
    "TokenEstimator",
    "ToolCall",
    "ToolMessage",
    "ToolProtocolError",
    "TurnNotFoundError",
    "TurnSegments",
    "TurnStateError",
    "TurnStatus",
    "UserMessage",
    "VersionConflictError",
    "backend",
    "build_window",
    "check_tool_protocol",
    "from_openai",
    "segment_turns",
    "to_openai",
    "validate_tool_protocol",
]
