"""Picks the core once: the Rust extension or the pure-Python reference (SPEC §14).

``AGENTCTX_FAST_BACKEND``: ``auto`` (default) uses Rust when the extension imports, ``rust``
fails loudly without it, ``python`` forces the reference.
"""

from __future__ import annotations

import os
from types import ModuleType

from agentctx_fast.core._reference import api as reference
from agentctx_fast.errors import BackendUnavailableError

__all__ = ["BackendUnavailableError", "backend", "core", "native"]


def _load_native() -> ModuleType | None:
    try:
        from agentctx_fast import _native
    except ImportError:
        return None
    # The classes the binding relies on, captured when the reference imports its own.
    _native.capture_library()
    return _native


native: ModuleType | None = _load_native()


def _choose() -> tuple[str, ModuleType]:
    wanted = os.environ.get("AGENTCTX_FAST_BACKEND", "auto").strip().lower() or "auto"
    if wanted == "python":
        return "python", reference
    if wanted == "rust":
        if native is None:
            raise BackendUnavailableError(
                "AGENTCTX_FAST_BACKEND=rust but the extension agentctx_fast._native "
                "does not import; install a native wheel or build it with "
                "`maturin develop --release`"
            )
        return "rust", native
    if wanted != "auto":
        raise BackendUnavailableError(
            f"AGENTCTX_FAST_BACKEND must be auto, rust or python, got {wanted!r}"
        )
    return ("rust", native) if native is not None else ("python", reference)


backend, core = _choose()
