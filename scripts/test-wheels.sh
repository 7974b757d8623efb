#!/usr/bin/env bash
# Checks the files of dist/ (scripts/build-wheels.sh): the LICENSE in both wheels and the sdist,
# and one version in all three names. Then installs the wheels into fresh virtual environments,
# one per CPython 3.11+ on this machine (scripts/find_pythons.py), and runs the smoke test in
# each: the native wheel must report the rust backend, the pure wheel the python backend, both
# that version as __version__ and their LICENSE. The pure wheel is installed and run with
# nothing but its environment on PATH (no compiler, no cargo), and on the first interpreter it
# also passes the core tests.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
native=$(ls "$root"/dist/*-abi3-*.whl)
pure=$(ls "$root"/dist/*-py3-none-any.whl)
sdist=$(ls "$root"/dist/*.tar.gz)
dist_version=$(python3 - "$native" "$pure" "$sdist" <<'PY'
import sys, tarfile, zipfile
from pathlib import Path

native, pure, sdist = sys.argv[1:]
license_text = Path("LICENSE").read_bytes()
versions = {Path(wheel).name.split("-")[1] for wheel in (native, pure)}
for wheel in (native, pure):
    with zipfile.ZipFile(wheel) as archive:
        found = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        if len(found) != 1 or archive.read(found[0]) != license_text:
            sys.exit(f"{Path(wheel).name}: no LICENSE in .dist-info/licenses/ ({found})")
with tarfile.open(sdist) as archive:
    name = Path(sdist).name.removesuffix(".tar.gz")
    member = archive.extractfile(f"{name}/LICENSE")
    if member is None or member.read() != license_text:
        sys.exit(f"{Path(sdist).name}: no LICENSE at its root")
    versions.add(name.rsplit("-", 1)[1])
if len(versions) != 1:
    sys.exit(f"the wheels and the sdist have different versions: {sorted(versions)}")
print(versions.pop())
PY
)
echo "dist: version $dist_version, LICENSE in both wheels and the sdist"
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
    (cd "$work" && "$env/bin/python" smoke_test.py rust "$dist_version")
    env="$work/pure-$version"
    "$python" -m venv "$env"
    PATH="$env/bin" "$env/bin/python" -m pip install --quiet --disable-pip-version-check \
        "$pure[sql]"
    (cd "$work" && PATH="$env/bin" "$env/bin/python" smoke_test.py python "$dist_version")
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
