#!/usr/bin/env bash
# Sets up a fresh machine: the PostgreSQL and Redis packages the tests start servers from,
# Python dependencies and the Rust extension, built in release mode.
# Idempotent; the test script runs it first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/servers.sh
python3 -m pip install --quiet --upgrade "pip>=23"
python3 -m pip install --quiet -r scripts/build-requirements.txt  # maturin, ziglang, auditwheel
# An extension built for one interpreter by an older checkout would shadow the abi3 one.
rm -f python/agentctx_fast/_native.cpython-*.so
if [[ "$(uname -s)" == "Linux" ]]; then
    # The extension is built as the native wheel is (zig links it against glibc 2.17, see
    # scripts/build-wheels.sh), in the same cargo target, so building the wheel reuses it.
    MATURIN_PEP517_ARGS="--zig --compatibility manylinux2014" \
        python3 -m pip install --quiet --no-build-isolation -e ".[dev]"
else
    python3 -m pip install --quiet -e ".[dev]"
fi
