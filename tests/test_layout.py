"""The package's layout shows its architecture (issue 30).

- A module imports private modules and private names (``_x``) only from its own subpackage
  (``core/``, ``stores/``, ``runner/``…) or from the package root's private helpers
  (``agentctx_fast._blocking``, ``_ids``, …), never from a sibling subpackage: what two
  subpackages share is either the public API of one of them or a root helper.
- Every class and function a package exports (its ``__all__``) is defined in a public module.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import agentctx_fast

PACKAGE = Path(agentctx_fast.__file__).parent
SUBPACKAGES = sorted(
    path.name
    for path in PACKAGE.iterdir()
    if (path / "__init__.py").exists() and not path.name.startswith("_")
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _area(module: str) -> str:
    """The subpackage ``module`` belongs to; "" for the root package's own modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else ""


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").exists()


def _private(module: str, name: str | None = None) -> bool:
    below_root = module.split(".")[1:]
    return any(part.startswith("_") for part in below_root) or bool(name and name[0] == "_")


def _imports(tree: ast.AST) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` of each import of the package: ``name`` is None when the
    import names a module (``import a.b``, ``from a import b`` for a module ``a.b``)."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                if _is_module(f"{module}.{alias.name}"):
                    found.append((node.lineno, f"{module}.{alias.name}", None))
                else:
                    found.append((node.lineno, module, alias.name))
    return [item for item in found if item[1].startswith(("agentctx_fast", "."))]


def sibling_private_imports() -> list[str]:
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        for line, module, name in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(PACKAGE.parent)}:{line}"
            if module.startswith("."):
                violations.append(f"{where}: relative import (write it absolute)")
            elif _area(module) not in ("", _area(importer)) and _private(module, name):
                violations.append(f"{where}: imports {module}{'.' + name if name else ''}")
    return violations


def public_names_in_private_modules() -> list[str]:
    found = []
    for package in ["agentctx_fast", *(f"agentctx_fast.{name}" for name in SUBPACKAGES)]:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            defined_in = getattr(getattr(module, name), "__module__", None)
            if isinstance(defined_in, str) and _private(defined_in):
                found.append(f"{package}.{name} is defined in {defined_in}")
    return found


def test_no_module_imports_a_sibling_subpackages_private_modules_or_names() -> None:
    assert sibling_private_imports() == []


def test_every_exported_class_and_function_is_defined_in_a_public_module() -> None:
    assert public_names_in_private_modules() == []


def test_the_checks_see_a_violation() -> None:
    """The walk is not vacuous: it finds the package's imports and reads them as the rule
    says."""
    tree = ast.parse(
        "from agentctx_fast.stores._common import shared_port\n"
        "from agentctx_fast.formats import _provider\n"
        "from agentctx_fast.core.window import _compress\n"
        "from agentctx_fast._blocking import run_sync\n"
        "from agentctx_fast.core.window import build_window\n"
    )
    imports = _imports(tree)
    assert [(m, n) for _, m, n in imports] == [
        ("agentctx_fast.stores._common", "shared_port"),
        ("agentctx_fast.formats._provider", None),
        ("agentctx_fast.core.window", "_compress"),
        ("agentctx_fast._blocking", "run_sync"),
        ("agentctx_fast.core.window", "build_window"),
    ]
    flagged = [(m, n) for _, m, n in imports if _area(m) not in ("", "runner") and _private(m, n)]
    assert flagged == [
        ("agentctx_fast.stores._common", "shared_port"),
        ("agentctx_fast.formats._provider", None),
        ("agentctx_fast.core.window", "_compress"),
    ]
