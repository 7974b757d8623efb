#!/usr/bin/env bash
# Sets up a fresh machine: the PostgreSQL and Redis packages the tests start servers from,
# Python dependencies and the Rust extension, built in release mode.
# Idempotent; the test script runs it first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/servers.sh
python3 -m pip install --quiet --upgrade "pip>=23" "maturin>=1.5,<2"
python3 -m pip install --quiet -e ".[dev]"
