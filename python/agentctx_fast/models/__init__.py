"""Chat models over model provider SDKs; each SDK is imported only when a model is made."""

from agentctx_fast.models.openai import AsyncOpenAIChatModel, OpenAIChatModel

__all__ = ["AsyncOpenAIChatModel", "OpenAIChatModel"]
