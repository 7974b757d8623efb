"""The code keeps the size issue 30 set (SPEC §24): the binding a mirror well under half the
size of the core it mirrors, no source file over about 600 lines before its tests, and the
binding on PyO3's safe API only.

Lines are counted as they stand in the file, up to a Rust file's ``#[cfg(test)]`` module.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUST = ROOT / "rust"
PYTHON = ROOT / "python" / "agentctx_fast"
MOST_LINES = 600
BINDING_SHARE = 0.45


def _lines(path: Path) -> int:
    """The file's lines before its tests."""
    text = path.read_text(encoding="utf-8")
    cut = text.find("\n#[cfg(test)]")
    return (text if cut < 0 else text[:cut]).count("\n") + 1


def _core() -> list[Path]:
    """The core crate's sources (`golden_tests.rs` is a test module)."""
    return [path for path in sorted(RUST.glob("*.rs")) if path.name != "golden_tests.rs"]


def _binding() -> list[Path]:
    return sorted((RUST / "py").glob("*.rs"))


def test_the_binding_is_well_under_half_the_core() -> None:
    binding = sum(map(_lines, _binding()))
    core = sum(map(_lines, _core()))
    assert _binding() and _core()
    assert binding <= BINDING_SHARE * core, (binding, core, round(binding / core, 3))


def test_no_source_file_is_over_about_600_lines() -> None:
    sources = [*_core(), *_binding(), *sorted(PYTHON.rglob("*.py"))]
    assert len(sources) > 100
    long = {str(path.relative_to(ROOT)): _lines(path) for path in sources}
    assert {name: n for name, n in long.items() if n > MOST_LINES} == {}


def test_the_binding_uses_the_safe_api_only() -> None:
    assert "#![deny(unsafe_code)]" in (RUST / "py" / "mod.rs").read_text(encoding="utf-8")
    raw = re.compile(r"\bunsafe\b|\bffi::|\bPy[A-Z][A-Za-z]*_[A-Z][A-Za-z]*\b")
    found = {
        str(path.relative_to(ROOT)): hit.group()
        for path in _binding()
        for line in path.read_text(encoding="utf-8").splitlines()
        if not line.lstrip().startswith("//") and (hit := raw.search(line))
    }
    assert found == {}
