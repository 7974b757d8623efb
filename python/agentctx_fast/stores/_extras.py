"""Optional extras: a store whose driver is not installed says which extra brings it."""

from __future__ import annotations

import importlib
from types import ModuleType

from agentctx_fast.errors import MissingDependencyError


def missing_dependency(extra: str, error: ImportError) -> MissingDependencyError:
    """The error for a missing optional package, naming the extra that installs it."""
    return MissingDependencyError(
        f"{error.name or 'a package'} is not installed; install the extra: "
        f"pip install 'agentctx-fast[{extra}]'"
    )


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise `MissingDependencyError` naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise missing_dependency(extra, error) from error
