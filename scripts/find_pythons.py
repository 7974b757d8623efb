"""Prints every CPython 3.11+ on this machine (on PATH, and pyenv's when pyenv is installed),
one interpreter a line, the running one first. Free-threaded builds are left out: the native
wheel targets the stable ABI, which they do not offer."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

PROBE = (
    "import sys, sysconfig; "
    "print(sys.implementation.name, sys.version_info >= (3, 11), "
    "bool(sysconfig.get_config_var('Py_GIL_DISABLED')), sys.base_prefix, sys.version.split()[0])"
)


def candidates() -> list[str]:
    found = [sys.executable]
    for minor in range(11, 20):
        path = shutil.which(f"python3.{minor}")
        if path:
            found.append(path)
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        if root:
            found.extend(str(p) for p in sorted(Path(root, "versions").glob("*/bin/python3")))
    return found


def main() -> None:
    seen: set[str] = set()
    for path in candidates():
        try:
            probe = subprocess.run([path, "-c", PROBE], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        fields = probe.stdout.split()
        if probe.returncode != 0 or len(fields) != 5:
            continue
        name, recent, free_threaded, base, _version = fields
        if name != "cpython" or recent != "True" or free_threaded == "True" or base in seen:
            continue
        seen.add(base)
        print(path)


if __name__ == "__main__":
    main()
