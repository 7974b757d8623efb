"""Writes the pure-Python wheel (py3-none-any) that goes with a native wheel: the same files,
version and metadata, without the extension, for platforms with no native wheel.

Usage: python3 scripts/pure_wheel.py NATIVE_WHEEL OUT_DIR
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

EXTENSION_SUFFIXES = (".so", ".pyd", ".dylib")


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def main(native: Path, out_dir: Path) -> Path:
    with zipfile.ZipFile(native) as wheel:
        names = wheel.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        name, version = dist_info[: -len(".dist-info")].rsplit("-", 1)
        files: dict[str, bytes] = {}
        for entry in names:
            if entry.endswith(EXTENSION_SUFFIXES) or entry.endswith("/"):
                continue
            if entry in (f"{dist_info}/WHEEL", f"{dist_info}/RECORD"):
                continue
            files[entry] = wheel.read(entry)
    files[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\n"
        "Generator: agentctx_fast scripts/pure_wheel.py\n"
        "Root-Is-Purelib: true\n"
        "Tag: py3-none-any\n"
    ).encode()
    record = [f"{path},{_digest(data)},{len(data)}" for path, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    target = out_dir / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as pure:
        for path, data in files.items():
            pure.writestr(path, data)
    print(f"pure wheel: {target.name} ({len(files)} files, no extension)")
    return target


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
