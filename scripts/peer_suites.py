"""Runs the OpenAI Agents SDK's own session tests on `AgentCtxSession`.

The SDK's source distribution ships its tests. This script downloads it (the pinned version,
which must be the one installed; cached in ``.peer/``), starts a real Redis server
(tests/servers.py), and runs the SDK's session tests and the runner-level tests that use
sessions from the unpacked sdist, with ``tests/peer/agents_sdk_plugin.py`` putting
`AgentCtxSession` on this library's stores in place of the SDK's session classes. Which tests
run and which are left out (each with its reason) is in ``tests/peer/agents_sdk_exclusions.toml``.

Modes: ``plain`` (``window=None``), ``window`` (``window=WindowOptions()``) and ``sdk`` (the
SDK's own classes: the baseline). It prints, per mode, the tests passed, skipped, excluded and
failed, and exits non-zero on a failure, an unexpected skip, or a run of ours in which no
`AgentCtxSession` was made.

    python3 scripts/peer_suites.py                 # plain and window
    python3 scripts/peer_suites.py sdk plain window
    python3 scripts/peer_suites.py plain -- -x -k redis   # extra pytest arguments
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEER = ROOT / "tests" / "peer"
CONFIG = PEER / "agents_sdk_exclusions.toml"
CACHE = ROOT / ".peer"
PACKAGE = "openai-agents"
MODES = ("sdk", "plain", "window")
TEST_DEPENDENCIES = ("pytest_asyncio", "inline_snapshot")
TIMEOUT = 600  # seconds for one mode's pytest run


def fail(message: str) -> None:
    print(f"peer suites: {message}", file=sys.stderr)
    sys.exit(2)


def pinned() -> str:
    """The pinned SDK version, which must be the installed one."""
    version = tomllib.loads(CONFIG.read_text(encoding="utf-8"))["sdk"]["version"]
    try:
        installed = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        fail(f"{PACKAGE} is not installed: pip install -e '.[dev]' (it pins {version})")
    if installed != version:
        fail(
            f"{PACKAGE} {installed} is installed but the peer suites pin {version} "
            f"({CONFIG.relative_to(ROOT)}): install {PACKAGE}=={version} or move the pin"
        )
    for module in TEST_DEPENDENCIES:
        if importlib.util.find_spec(module) is None:
            fail(f"the SDK's tests need {module}: pip install -e '.[dev]'")
    return version


def sdist(version: str) -> Path:
    """The unpacked sdist of ``version``, downloaded into the cache when it is not there."""
    unpacked = CACHE / f"openai_agents-{version}"
    if (unpacked / "tests" / "conftest.py").is_file():
        return unpacked
    CACHE.mkdir(exist_ok=True)
    archive = CACHE / f"openai_agents-{version}.tar.gz"
    if not archive.is_file():
        with tempfile.TemporaryDirectory(dir=CACHE) as download:
            subprocess.run(
                [
                    sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--no-binary", ":all:", "--dest", download, f"{PACKAGE}=={version}",
                ],
                check=True,
            )  # fmt: skip
            [got] = Path(download).glob("*.tar.gz")
            got.replace(archive)
    with tarfile.open(archive) as tar:
        tar.extractall(CACHE, filter="data")
    if not (unpacked / "tests" / "conftest.py").is_file():
        fail(f"{archive.name} holds no tests/ under {unpacked.name}/")
    return unpacked


def run_mode(mode: str, tree: Path, redis_url: str, extra: list[str]) -> tuple[bool, str]:
    """One pytest run of the selected SDK tests in ``mode``; (ok, summary line)."""
    config = tomllib.loads(CONFIG.read_text(encoding="utf-8"))
    allowed_skips = [re.compile(p) for p in config["sdk"].get("allowed_skips", [])]
    with tempfile.TemporaryDirectory() as scratch:
        report_path = Path(scratch) / "report.json"
        env = dict(os.environ)
        paths = [str(tree), str(PEER), str(ROOT / "python"), env.get("PYTHONPATH", "")]
        env.update(
            PYTHONPATH=os.pathsep.join(p for p in paths if p),
            AGENTCTX_PEER_MODE=mode,
            AGENTCTX_PEER_REDIS_URL=redis_url,
            AGENTCTX_PEER_REPORT=str(report_path),
        )
        # Test paths among the extra arguments replace the selection.
        selection = [] if any(a.startswith("tests/") for a in extra) else config["sdk"]["tests"]
        command = [
            sys.executable, "-m", "pytest", "-p", "agents_sdk_plugin", "-p", "no:cacheprovider",
            "-q", "--no-header", "-rf", "-o", "faulthandler_timeout=60", *selection, *extra,
        ]  # fmt: skip
        began = time.monotonic()
        try:  # a test that hangs fails the run; its stack is printed at 60 s (faulthandler)
            done = subprocess.run(command, cwd=tree, env=env, check=False, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return False, f"{mode}: pytest still ran after {TIMEOUT} s and was stopped"
        seconds = time.monotonic() - began
        if not report_path.is_file():
            return False, f"{mode}: pytest exited {done.returncode} without a report"
        report = json.loads(report_path.read_text(encoding="utf-8"))
        (CACHE / f"report-{mode}.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    outcomes = report["outcomes"]
    counts = {k: sum(1 for v in outcomes.values() if v == k) for k in ("passed", "failed")}
    unexpected = {
        nodeid: reason
        for nodeid, reason in report["skips"].items()
        if not any(p.search(reason) for p in allowed_skips)
    }
    using = sum(
        1
        for nodeid, made in report["sessions_by_test"].items()
        if made and outcomes.get(nodeid) == "passed"
    )
    problems = []
    if done.returncode != 0:
        problems.append(f"pytest exited {done.returncode}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected skips")
        for nodeid, reason in sorted(unexpected.items()):
            print(f"  unexpected skip: {nodeid}: {reason}")
    if mode != "sdk" and (report["sessions_made"] == 0 or using == 0):
        problems.append("no AgentCtxSession was made: the SDK's classes were not replaced")
    line = (
        f"{mode:>6}: {counts['passed']} passed ({using} made an AgentCtxSession), "
        f"{len(report['skips'])} skipped, {len(report['excluded'])} excluded, "
        f"{counts['failed']} failed; {report['sessions_made']} sessions in {seconds:.0f} s"
    )
    if problems:
        line += "  <- " + "; ".join(problems)
    return not problems, line


def main() -> None:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # No `choices=`: Python 3.11's argparse checks an empty "*" list against them.
    parser.add_argument("modes", nargs="*", help=f"of {', '.join(MODES)} (default: plain window)")
    args = parser.parse_args(argv[:cut])
    modes = args.modes or ["plain", "window"]
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"unknown mode(s): {', '.join(unknown)}")
    extra = argv[cut + 1 :]
    tree = sdist(pinned())
    sys.path.insert(0, str(ROOT / "tests"))
    from servers import RedisServer

    began = time.monotonic()
    with RedisServer() as redis_server:
        results = [run_mode(m, tree, redis_server.url_for(15), extra) for m in modes]
    print(f"== peer suites ({PACKAGE} from {tree.name}, {time.monotonic() - began:.0f} s)")
    for _, line in results:
        print(line)
    if not all(ok for ok, _ in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
