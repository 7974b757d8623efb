"""Optional extras: whatever needs a package that is not installed says which extra brings it,
always as `MissingDependencyError` naming ``pip install 'agentctx-fast[EXTRA]'``."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import NoReturn

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


def stand_in(name: str, error: MissingDependencyError) -> type:
    """A class called ``name`` standing for one whose extra is missing: importing it works
    (so ``from agentctx_fast import *`` does without the sql and redis extras), making one
    raises ``error``'s `MissingDependencyError` where the store is actually used."""
    message = str(error)

    def __new__(cls: type, *args: object, **kwargs: object) -> NoReturn:
        raise MissingDependencyError(message)

    doc = f"Unavailable: {message}."
    return type(name, (), {"__new__": __new__, "__doc__": doc, "__module__": "agentctx_fast"})
