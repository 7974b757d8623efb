"""The core's functions on the backend picked at import (`agentctx_fast._backend`): the Rust
extension's, or the pure-Python reference's (`core._reference.api`, the same functions)."""

from __future__ import annotations

from types import ModuleType

from agentctx_fast._backend import backend, native
from agentctx_fast.core._reference import api as reference

__all__ = ["core"]

if native is not None:
    # The package classes the binding relies on, handed over now that the reference has
    # imported its own (the message classes derive from the extension, so they do not exist
    # when it is imported).
    native.capture_library(*reference.LIBRARY)

core: ModuleType = native if backend == "rust" and native is not None else reference
