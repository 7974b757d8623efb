"""Runs Python as if some packages were not installed, as a user without an extra has it:
``python3 without_packages.py PACKAGE[,PACKAGE…] -c CODE`` or ``… -m MODULE [ARGS…]``.

A finder placed first on `sys.meta_path` answers every import of a hidden package (or of one
of its submodules) with the `ModuleNotFoundError` a missing package gives.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import runpy
import sys
from collections.abc import Sequence
from types import ModuleType


class HiddenPackages(importlib.abc.MetaPathFinder):
    """Makes ``import NAME`` fail for each hidden top-level package NAME."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def main(argv: list[str]) -> None:
    names, mode, target, *rest = argv
    sys.meta_path.insert(0, HiddenPackages(set(names.split(","))))
    if mode == "-c":
        sys.argv = ["-c", *rest]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
    elif mode == "-m":
        sys.argv = [target, *rest]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.exit(f"usage: {sys.argv[0]} PACKAGE[,PACKAGE...] -c CODE | -m MODULE [ARGS...]")


if __name__ == "__main__":
    main(sys.argv[1:])
