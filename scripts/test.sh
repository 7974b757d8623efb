#!/usr/bin/env bash
# The whole test suite: Rust checks, linters, type checks, pytest on both backends.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
export PYO3_PYTHON="${PYO3_PYTHON:-$(command -v python3)}"

echo "== cargo fmt / clippy / test"
cargo fmt --check
cargo clippy --quiet --all-targets -- -D warnings
cargo clippy --quiet --features python -- -D warnings
cargo test --quiet

echo "== ruff / mypy"
python3 -m ruff check python tests benches examples
python3 -m mypy --strict python/agentctx_fast

echo "== pytest, Rust backend (whole suite)"
AGENTCTX_FAST_BACKEND=rust python3 -m pytest tests
echo "== pytest, Python backend (core tests; parity tests already compared both cores)"
AGENTCTX_FAST_BACKEND=python python3 -m pytest tests -m "not servers" \
  --ignore=tests/test_window_parity.py --ignore=tests/test_tokens_parity.py \
  --ignore=tests/test_window_entry.py
echo "== done in $(( $(date +%s) - start )) s"
