#!/usr/bin/env bash
# Writes into dist/: the native wheel (abi3 for CPython 3.11+, tagged manylinux2014 on Linux and
# checked with auditwheel), a pure-Python py3-none-any wheel of the same version with no
# extension in it, and the sdist. On Linux, zig (the ziglang package) links the extension
# against glibc 2.17, so the wheel installs on any manylinux2014 system.
#
# The tools it needs (scripts/build-requirements.txt: maturin; on Linux ziglang and auditwheel)
# are installed into this python3 when missing, so a fresh clone builds without
# scripts/setup.sh; a Rust toolchain (cargo) must be there already.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() {
    echo "build-wheels.sh: $*" >&2
    exit 1
}
command -v cargo >/dev/null ||
    fail "cargo not found: the native wheel needs a Rust toolchain (install it with rustup)"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
    -r scripts/build-requirements.txt ||
    fail "could not install the build tools into $(python3 -c 'import sys; print(sys.prefix)');" \
        "install them yourself: python3 -m pip install -r scripts/build-requirements.txt"
if [[ "$(uname -s)" == "Linux" ]]; then
    python3 -m ziglang version >/dev/null ||
        fail "zig (the ziglang package) does not run here: python3 -m ziglang version failed"
fi
rm -rf dist
mkdir -p dist
python3 -m maturin sdist --out dist
if [[ "$(uname -s)" == "Linux" ]]; then
    python3 -m maturin build --release --zig --compatibility manylinux2014 --out dist
    native=$(ls dist/*-abi3-*.whl)
    python3 -m auditwheel show "$native" > dist/auditwheel.txt
    python3 - dist/auditwheel.txt <<'PY'
import re, sys
report = open(sys.argv[1], encoding="utf-8").read()
tags = [int(minor) for minor in re.findall(r'"manylinux_2_(\d+)_', report)]
if not tags or max(tags) > 17:
    sys.exit(f"the native wheel is not manylinux2014 (manylinux_2_17) or older:\n{report}")
print(f"auditwheel: consistent with manylinux_2_{max(tags)}")
PY
    rm dist/auditwheel.txt
else
    python3 -m maturin build --release --out dist
    native=$(ls dist/*-abi3-*.whl)
fi
python3 scripts/pure_wheel.py "$native" dist
ls -1 dist
