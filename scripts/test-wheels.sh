#!/usr/bin/env bash
# Installs the wheels of dist/ (scripts/build-wheels.sh) into fresh virtual environments, one
# per CPython 3.11+ on this machine (scripts/find_pythons.py), and runs the smoke test in each:
# the native wheel must report the rust backend, the pure wheel the python backend. The pure
# wheel is installed and run with nothing but its environment on PATH (no compiler, no cargo),
# and on the first interpreter it also passes the core tests.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
native=$(ls "$root"/dist/*-abi3-*.whl)
pure=$(ls "$root"/dist/*-py3-none-any.whl)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp scripts/smoke_test.py "$work/"
core_tests=(tests/test_window_golden.py tests/test_window_invariants.py tests/test_messages.py
            tests/test_window_compressor.py)
first=1
for python in $(python3 scripts/find_pythons.py); do
    version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    env="$work/native-$version"
    "$python" -m venv "$env"
    "$env/bin/python" -m pip install --quiet --disable-pip-version-check "$native[sql]"
    (cd "$work" && "$env/bin/python" smoke_test.py rust)
    env="$work/pure-$version"
    "$python" -m venv "$env"
    PATH="$env/bin" "$env/bin/python" -m pip install --quiet --disable-pip-version-check \
        "$pure[sql]"
    (cd "$work" && PATH="$env/bin" "$env/bin/python" smoke_test.py python)
    if [[ $first == 1 ]]; then
        PATH="$env/bin" "$env/bin/python" -m pip install --quiet --disable-pip-version-check \
            pytest hypothesis
        # From the repository root, where `agentctx_fast` is not importable from the source tree
        # (it lives under python/): the tests import the installed pure wheel.
        PATH="$env/bin" "$env/bin/python" -m pytest -o addopts="" -q -p no:cacheprovider \
            "${core_tests[@]}" \
            -W ignore::DeprecationWarning
        first=0
    fi
done
