"""Which core runs, picked once at import (SPEC §14): the Rust extension or the pure-Python
reference. The core's functions (`agentctx_fast.core._backend`) and the stores' native decoder
(`agentctx_fast.stores.serializer`) both follow this choice.

``AGENTCTX_FAST_BACKEND``: ``auto`` (default) uses Rust when the extension imports, ``rust``
fails loudly without it, ``python`` forces the reference.
"""

from __future__ import annotations

import os
from types import ModuleType

from agentctx_fast.errors import BackendUnavailableError

__all__ = ["backend", "native"]


def _load_native() -> ModuleType | None:
    try:
        from agentctx_fast import _native
    except ImportError:
        return None
    return _native


native: ModuleType | None = _load_native()
"""The Rust extension, or None where it does not import."""


def _choose() -> str:
    wanted = os.environ.get("AGENTCTX_FAST_BACKEND", "auto").strip().lower() or "auto"
    if wanted == "python":
        return "python"
    if wanted == "rust":
        if native is None:
            raise BackendUnavailableError(
                "AGENTCTX_FAST_BACKEND=rust but the extension agentctx_fast._native "
                "does not import; install a native wheel or build it with "
                "`maturin develop --release`"
            )
        return "rust"
    if wanted != "auto":
        raise BackendUnavailableError(
            f"AGENTCTX_FAST_BACKEND must be auto, rust or python, got {wanted!r}"
        )
    return "rust" if native is not None else "python"


backend: str = _choose()
"""The core in use: ``"rust"`` or ``"python"`` (``agentctx_fast.backend``)."""
