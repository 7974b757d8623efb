"""``agentctx_fast.__version__``: the installed distribution's version, written once (in
Cargo.toml, which maturin reads for the package metadata), never copied into the code."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("agentctx-fast")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
