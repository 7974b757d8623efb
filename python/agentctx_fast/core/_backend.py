"""The core's functions on the backend picked at import (`agentctx_fast._backend`): the Rust
extension's, or the pure-Python reference's (`core._reference.api`, the same functions)."""

from __future__ import annotations

from types import ModuleType

from agentctx_fast._backend import backend, native
from agentctx_fast.core._reference import api as reference

__all__ = ["core"]

core: ModuleType = native if backend == "rust" and native is not None else reference
