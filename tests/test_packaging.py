"""Packaging facts (SPEC §22): an MIT LICENSE, one version written once (Cargo.toml, read by
maturin for the Python metadata) and reported as ``agentctx_fast.__version__``, a changelog
entry for it, complete metadata, and an ``all`` extra holding every other extra. The wheels
and the sdist themselves are checked by scripts/test-wheels.sh (LICENSE inside, the version)."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path
from typing import Any

import agentctx_fast

ROOT = Path(__file__).resolve().parent.parent


def _toml(name: str) -> dict[str, Any]:
    return tomllib.loads((ROOT / name).read_text(encoding="utf-8"))


def test_the_license_is_mit_in_the_repository_and_the_metadata() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the agentctx_fast authors" in text
    project = _toml("pyproject.toml")["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert _toml("Cargo.toml")["package"]["license"] == "MIT"


def test_the_version_is_written_once_and_reported() -> None:
    project = _toml("pyproject.toml")["project"]
    assert "version" not in project and "version" in project["dynamic"]
    version = _toml("Cargo.toml")["package"]["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert agentctx_fast.__version__ == importlib.metadata.version("agentctx-fast")
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(version)}\b", changelog, re.MULTILINE)


def test_the_all_extra_holds_every_other_extra() -> None:
    extras = _toml("pyproject.toml")["project"]["optional-dependencies"]
    [everything] = extras["all"]
    match = re.fullmatch(r"agentctx-fast\[([a-z0-9,-]+)\]", everything)
    assert match is not None, everything
    assert set(match.group(1).split(",")) == set(extras) - {"all", "dev"}


def test_the_metadata_is_complete() -> None:
    project = _toml("pyproject.toml")["project"]
    for field in ("description", "readme", "authors", "keywords", "classifiers"):
        assert project.get(field), field
    assert "Typing :: Typed" in project["classifiers"]
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]  # PEP 639
    package = _toml("Cargo.toml")["package"]
    for field in ("description", "license", "readme", "keywords", "categories"):
        assert package.get(field), field
