"""Benchmark charts: run the comparison benchmarks and draw them as PNGs.

    python benches/report.py                  # run; write docs/bench-*.png, docs/benchmarks.md
    python benches/report.py --quick          # a short run (rough figures, same charts)
    python benches/report.py --from-json F    # draw a saved run again without running anything
    python benches/report.py --charts window,tokens --save-json run.json
    python benches/report.py --from-json run.json --readme   # also rewrite the README's table

One chart per comparison: the window core against LangChain's ``trim_messages`` and the
minimal scan (``bench_window.py``), the service path against the OpenAI Agents SDK's sessions
(``bench_service.py``), `AgentCtxSession` and the input filter against the SDK's sessions
(``bench_sessions.py``), token counting against tiktoken (``bench_tokens.py``). Every chart is
drawn from the medians of one pytest-benchmark run of its bench file, so its rows ran side by
side on the same machine; each file runs in a process of its own, so one suite's data (the
window bench keeps 100,000-message histories) never weighs on another's timings. The caption
names the machine and the versions. A bench file that is missing or a
peer library that is not installed skips its chart with a note; it never stops the others.
matplotlib is needed only here (it is in the dev extra).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
QUICK = ["--benchmark-max-time=0.05", "--benchmark-min-rounds=3"]
Role = Literal["ours", "peer", "floor", "other"]
Unit = Literal["time", "throughput"]
COLORS: dict[str, str] = {
    "ours": "#1f6fb4",
    "peer": "#e6550d",
    "floor": "#a6a6a6",
    "other": "#8c6bb1",
}
LEGEND: dict[str, str] = {
    "ours": "agentctx_fast",
    "peer": "peer library",
    "floor": "floor (does less work)",
    "other": "estimate (not exact)",
}


class ReportError(Exception):
    """A problem the report explains in one line (no traceback)."""


@dataclass(frozen=True)
class Result:
    """One benchmark row of a pytest-benchmark JSON file."""

    name: str
    group: str | None
    params: dict[str, Any]
    median: float
    extra_info: dict[str, Any]
    q1: float = 0.0  # the quartiles of the rounds (the median when the JSON has none)
    q3: float = 0.0

    @property
    def test(self) -> str:
        return self.name.split("[", 1)[0]


@dataclass(frozen=True)
class Row:
    label: str
    value: float  # seconds (time) or MB/s (throughput)
    role: Role
    versus: str | None = None  # the label of the agentctx_fast row this one is compared with
    spread: tuple[float, float] | None = None  # the middle half of the rounds, in value's unit


@dataclass(frozen=True)
class Panel:
    title: str
    unit: Unit
    rows: tuple[Row, ...]
    missing: tuple[str, ...] = ()  # rows the chart expects that did not run

    def row(self, label: str) -> Row | None:
        return next((row for row in self.rows if row.label == label), None)

    def ratio(self, row: Row) -> float | None:
        """How many times faster the paired agentctx_fast row is than ``row`` (>1: ours wins)."""
        base = self.row(row.versus) if row.versus is not None else None
        if base is None or base is row or base.value <= 0 or row.value <= 0:
            return None
        return row.value / base.value if self.unit == "time" else base.value / row.value


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    panels: tuple[Panel, ...]
    peers: tuple[str, ...]  # distributions whose versions go into the caption
    notes: tuple[str, ...] = ()
    columns: int = 2
    shared_rows: bool = False  # every panel has the same rows (the labels are drawn once)


@dataclass(frozen=True)
class Suite:
    key: str
    bench: str  # file under benches/
    requires: tuple[tuple[str, str], ...]  # (module, pip name) the comparison needs
    build: Callable[[list[Result]], Chart | None]


@dataclass
class Run:
    results: list[Result]
    machine: dict[str, Any]
    versions: dict[str, str]
    date: str
    load: float | None = None  # the machine's 1-minute load average around the run
    quick: bool = False


# -- reading ---------------------------------------------------------------------------------


def load(path: Path) -> Run:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ReportError(f"cannot read benchmark JSON {path}: {error}") from error
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ReportError(f"{path} is not a pytest-benchmark JSON file (no 'benchmarks' list)")
    results = []
    for entry in data["benchmarks"]:
        stats = entry.get("stats") or {}
        median = stats.get("median")
        if not isinstance(median, int | float):
            continue
        q1, q3 = stats.get("q1"), stats.get("q3")
        results.append(
            Result(
                name=str(entry.get("name", "")),
                group=entry.get("group"),
                params=dict(entry.get("params") or {}),
                median=float(median),
                extra_info=dict(entry.get("extra_info") or {}),
                q1=float(q1) if isinstance(q1, int | float) else float(median),
                q3=float(q3) if isinstance(q3, int | float) else float(median),
            )
        )
    extra = data.get("agentctx_report") or {}
    versions = extra.get("versions")
    if not isinstance(versions, dict):
        versions = installed_versions()  # a JSON written by plain pytest: today's environment
    return Run(
        results=results,
        machine=dict(data.get("machine_info") or {}),
        versions={str(k): str(v) for k, v in versions.items()},
        date=str(data.get("datetime", ""))[:10],
        load=float(extra["load"]) if isinstance(extra.get("load"), int | float) else None,
        quick=extra.get("quick") is True,
    )


def installed_versions() -> dict[str, str]:
    names = [
        "agentctx-fast",
        "pytest-benchmark",
        "langchain-core",
        "openai-agents",
        "tiktoken",
        "sqlalchemy",
        "redis",
    ]
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        import agentctx_fast

        versions["agentctx_fast backend"] = agentctx_fast.backend
    except ImportError:
        pass
    return versions


# -- the charts ------------------------------------------------------------------------------

WINDOW_ROWS: list[tuple[str, str, dict[str, Any], Role, str | None]] = [
    # label, test, params to match, role, compared with
    (
        "build_window, Rust",
        "test_build_window",
        {"engine": "rust", "options": "default"},
        "ours",
        None,
    ),
    (
        "build_window, Rust, compact + 8,000-token cap",
        "test_build_window",
        {"engine": "rust", "options": "compact+tokens8000"},
        "ours",
        None,
    ),
    (
        "build_window, pure-Python reference",
        "test_build_window",
        {"engine": "python", "options": "default"},
        "ours",
        "build_window, Rust",
    ),
    (
        "LangChain trim_messages, 100 messages",
        "test_peer_langchain_trim_messages",
        {"counter": "len"},
        "peer",
        "build_window, Rust",
    ),
    (
        "LangChain trim_messages, 8,000 approx. tokens",
        "test_peer_langchain_trim_messages",
        {"counter": "approx"},
        "peer",
        "build_window, Rust, compact + 8,000-token cap",
    ),
    (
        "minimal scan (turn/message caps only)",
        "test_floor_minimal_scan",
        {},
        "floor",
        "build_window, Rust",
    ),
    ("list slice (the copy alone)", "test_floor_list_slice", {}, "floor", "build_window, Rust"),
]


def window_chart(results: list[Result]) -> Chart | None:
    sizes = sorted(
        {
            int(r.params["size"])
            for r in results
            if r.test in {row[1] for row in WINDOW_ROWS} and isinstance(r.params.get("size"), int)
        }
    )
    panels = []
    for size in sizes:
        rows: list[Row] = []
        missing = []
        for label, test, match, role, versus in WINDOW_ROWS:
            found = [
                r
                for r in results
                if r.test == test
                and r.params.get("size") == size
                and all(r.params.get(k) == v for k, v in match.items())
            ]
            if found:
                r = found[0]
                rows.append(Row(label, r.median, role, versus or label, (r.q1, r.q3)))
            else:
                missing.append(label)
        if rows:
            panels.append(Panel(f"{size:,} stored messages", "time", tuple(rows), tuple(missing)))
    if not panels:
        return None
    return Chart(
        key="window",
        title="Building one model call's window (median time, lower is better)",
        panels=tuple(panels),
        peers=("langchain-core",),
        notes=(
            "Each label: the median, then how the row compares with build_window, Rust (the "
            "8,000-token LangChain row with the token-capped window). Caps: 10 turns, 100 "
            "messages. One pytest-benchmark run, rows side by side.",
        ),
        columns=len(panels),
        shared_rows=True,
    )


SERVICE_SIDES: dict[str, tuple[str, Role]] = {
    "ours-warm": ("read + build_window + to_openai, cache on", "ours"),
    "ours-cold": ("read + build_window + to_openai, cache off", "ours"),
    "ours": ("read + build_window + to_openai", "ours"),
    "ours-batch": ("add_messages_if_absent (one batch)", "ours"),
    "ours-one-by-one": ("add_message_if_absent x4", "ours"),
    "peer-get_items": ("{session}.get_items(limit=100)", "peer"),
    "peer-add_items": ("{session}.add_items(4 items)", "peer"),
}


def _service_label(side: str, kind: str) -> tuple[str, Role]:
    session = {"sqlite": "SQLiteSession", "redis": "RedisSession"}.get(kind, "session")
    label, role = SERVICE_SIDES.get(side, (side, "peer" if side.startswith("peer") else "ours"))
    return label.format(session=session), role


SERVICE_SCENARIOS = ("one call", "round-robin", "append")  # the groups compared with the SDK


def _service_rows(r: Result) -> list[Row]:
    """The chart rows of one service result. A result timing both sides in alternation
    (``extra_info`` holds each side's median, ``ours_median_us`` and ``peer_median_us``) is two
    rows, ours and the peer's: its own median is the pair's sum, which compares nothing."""
    kind = str(r.params.get("setup", ""))
    info = r.extra_info
    sides = {"ours": "ours-batch", "peer": "peer-add_items"}
    if all(isinstance(info.get(f"{side}_median_us"), int | float) for side in sides):
        rows = []
        for side, name in sides.items():
            label, role = _service_label(name, kind)
            q1, q3 = info.get(f"{side}_q1_us"), info.get(f"{side}_q3_us")
            spread = None  # the quartiles, when the run recorded them
            if isinstance(q1, int | float) and isinstance(q3, int | float):
                spread = (q1 * 1e-6, q3 * 1e-6)
            rows.append(Row(label, float(info[f"{side}_median_us"]) * 1e-6, role, None, spread))
        return rows
    label, role = _service_label(str(r.params.get("side", r.name)), kind)
    return [Row(label, r.median, role, None, (r.q1, r.q3))]


def service_chart(results: list[Result]) -> Chart | None:
    groups: dict[str, list[Result]] = {}
    for r in results:
        # other service groups (e.g. Redis server CPU per read) have no peer row: not charted
        if r.group and r.group.startswith("service:"):
            if any(scenario in r.group for scenario in SERVICE_SCENARIOS):
                groups.setdefault(r.group, []).append(r)
    if not groups:
        return None

    def order(group: str) -> tuple[int, int, int, str]:
        scenarios = SERVICE_SCENARIOS
        scenario = next((i for i, s in enumerate(scenarios) if s in group), len(scenarios))
        kind = next((i for i, k in enumerate(["sqlite", "redis"]) if f", {k}" in group), 2)
        sizes = re.findall(r"\d+", group)
        return scenario, int(sizes[-1]) if sizes else 0, kind, group

    panels = []
    for group in sorted(groups, key=order):
        rows = [row for r in groups[group] for row in _service_rows(r)]
        rows.sort(key=lambda row: 0 if row.role == "ours" else 1)
        base = rows[0].label if rows[0].role == "ours" else None
        title = group.removeprefix("service:").strip()
        panels.append(_compared_panel(title[0].upper() + title[1:], rows, base))
    return Chart(
        key="service",
        title="The service path vs the OpenAI Agents SDK sessions (median time, lower is better)",
        panels=tuple(panels),
        peers=("openai-agents", "sqlalchemy", "redis"),
        notes=(
            "Ours reads the tail as the runner does, builds the window and makes the request "
            "messages; the SDK's session only reads 100 items. Each label: the median, then how "
            "the row compares with the panel's first row. One pytest-benchmark run.",
        ),
    )


SESSION_SIDES: dict[str, tuple[str, Role]] = {
    "ours-warm": ("AgentCtxSession + window, blocking store, cache on", "ours"),
    "ours-cold": ("AgentCtxSession + window, blocking store, cache off", "ours"),
    "ours-async-warm": ("AgentCtxSession + window, asyncio store, cache on", "ours"),
    "ours-async-cold": ("AgentCtxSession + window, asyncio store, cache off", "ours"),
    "peer-get_items": ("{session}.get_items() (every item)", "peer"),
    "peer-get_items-limit": ("{session}.get_items(limit={count}) (as many items)", "peer"),
    "run-with-filter": ("Runner.run turn with AgentCtxInputFilter", "ours"),
    "filter-alone": ("AgentCtxInputFilter alone", "ours"),
    "run-without-filter": ("Runner.run turn without a filter", "floor"),
}


def _session_row(r: Result) -> tuple[int, Row]:
    """A result's row, and its place in the panel (`SESSION_SIDES`' order)."""
    session = {"sqlite": "SQLiteSession", "redis": "RedisSession"}.get(
        str(r.params.get("setup", "")), "session"
    )
    side = str(r.params.get("side", r.name))
    label, role = SESSION_SIDES.get(side, (side, "peer" if side.startswith("peer") else "ours"))
    label = label.format(session=session, count=r.extra_info.get("window_items", "N"))
    place = list(SESSION_SIDES).index(side) if side in SESSION_SIDES else len(SESSION_SIDES)
    return place, Row(label, r.median, role, None, (r.q1, r.q3))


def _compared_panel(title: str, rows: Sequence[Row], base: str | None) -> Panel:
    """A time panel whose rows are each compared with the row labelled ``base``; the title's
    sizes get thousands separators and the stores their names."""
    title = re.sub(r"\d{4,}", lambda m: f"{int(m.group()):,}", title)
    title = title.replace("sqlite", "SQLite").replace("redis", "Redis")
    return Panel(title, "time", tuple(Row(r.label, r.value, r.role, base, r.spread) for r in rows))


def sessions_chart(results: list[Result]) -> Chart | None:
    """`AgentCtxSession.get_items()` with a window beside the SDK's sessions (bench_sessions.py),
    one panel per store and size, and the input filter's share of a ``Runner.run`` turn; every
    row is compared with its panel's first (ours, blocking store, cache on; the filtered turn)."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        if r.group and r.group.startswith("sessions:"):
            groups.setdefault(r.group, []).append(r)
    if not groups:
        return None

    def order(group: str) -> tuple[int, int, int, str]:
        kind = next((i for i, k in enumerate(["sqlite", "redis"]) if f", {k}" in group), 2)
        sizes = re.findall(r"\d[\d,]*", group)
        size = int(sizes[-1].replace(",", "")) if sizes else 0
        return "get_items" not in group, size, kind, group

    panels = []
    for group in sorted(groups, key=order):
        rows = [row for _, row in sorted((_session_row(r) for r in groups[group]),
                                         key=lambda placed: placed[0])]  # fmt: skip
        panels.append(_compared_panel(group.removeprefix("sessions:").strip(), rows, rows[0].label))
    return Chart(
        key="sessions",
        title="The OpenAI Agents SDK session and input filter (median time, lower is better)",
        panels=tuple(panels),
        peers=("openai-agents", "sqlalchemy", "redis"),
        notes=(
            "Ours returns the window of the stored history (whole turns, about 50 items); the "
            "SDK's get_items() returns every item, get_items(limit=N) the last N items (as "
            "many as our window, not the same turns). Each label: the median, then how the "
            "row compares with the panel's first row. One pytest-benchmark run.",
        ),
    )


def _token_label(r: Result) -> str:
    values = [str(v) for k, v in r.params.items() if k not in {"encoding", "size"}]
    return ", ".join(values) if values else r.name.removeprefix("test_")


def _token_role(label: str) -> Role:
    text = label.lower()
    if "tiktoken" in text:
        return "peer"
    if "heuristic" in text or "approx" in text:
        return "other"
    return "ours"


def _token_pair(label: str, ours: list[str]) -> str | None:
    """The agentctx_fast row a row is compared with: the one sharing most of its name's words
    besides who counts (``tiktoken-cl100k`` with ``ours-exact-cl100k``), else the first."""
    if not ours:
        return None
    generic = {"ours", "exact", "tiktoken", "heuristic", ""}

    def words(text: str) -> set[str]:
        return set(re.split(r"[-_ ,]+", text.lower())) - generic

    mine = words(label)
    return max(ours, key=lambda other: (len(mine & words(other)), -ours.index(other)))


def _megabytes(r: Result) -> float | None:
    info = r.extra_info
    for key, scale in (("megabytes", 1.0), ("mb", 1.0), ("bytes", 1e-6)):
        value = info.get(key)
        if isinstance(value, int | float) and value > 0:
            return float(value) * scale
    return None


def tokens_chart(results: list[Result]) -> Chart | None:
    groups: dict[str, list[Result]] = {}
    for r in results:
        if r.group and r.group.startswith("tokens-"):
            groups.setdefault(r.group, []).append(r)
    if not groups:
        return None
    panels = []
    for group in sorted(groups, key=lambda g: (not g.startswith("tokens-throughput"), g)):
        members = groups[group]
        sizes = [_megabytes(r) for r in members]
        throughput = all(size is not None for size in sizes)
        rows = []
        for r, size in zip(members, sizes, strict=True):
            label = _token_label(r)
            if throughput and size is not None:
                value, spread = size / r.median, (size / r.q3, size / r.q1)
            else:
                value, spread = r.median, (r.q1, r.q3)
            rows.append((label, value, _token_role(label), spread))
        rank = {"ours": 0, "peer": 1, "other": 2, "floor": 3}
        rows.sort(key=lambda row: rank[row[2]])
        ours = [label for label, _, role, _ in rows if role == "ours"]
        title = group.removeprefix("tokens-")
        if title.startswith("throughput-"):
            title = f"Counting tokens, {title.removeprefix('throughput-')} (MB/s)"
        elif title == "history":
            title = "Counting a whole history's tokens"
        panels.append(
            Panel(
                title,
                "throughput" if throughput else "time",
                tuple(
                    Row(label, value, role, _token_pair(label, ours), spread)
                    for label, value, role, spread in rows
                ),
            )
        )
    return Chart(
        key="tokens",
        title="Token counting vs tiktoken (MB/s: higher is better; time: lower is better)",
        panels=tuple(panels),
        peers=("tiktoken",),
        notes=(
            "Each label: the median (or MB/s), then how the row compares with the agentctx_fast "
            "row of the same encoding (else the panel's first). One pytest-benchmark run, rows "
            "side by side.",
        ),
        columns=2,
    )


SUITES: tuple[Suite, ...] = (
    Suite("window", "bench_window.py", (("langchain_core", "langchain-core"),), window_chart),
    Suite("service", "bench_service.py", (("agents", "openai-agents"),), service_chart),
    Suite("sessions", "bench_sessions.py", (("agents", "openai-agents"),), sessions_chart),
    Suite("tokens", "bench_tokens.py", (("tiktoken", "tiktoken"),), tokens_chart),
)


# -- running ---------------------------------------------------------------------------------


def plan(suites: Sequence[Suite], benches: Path) -> tuple[list[Path], list[str]]:
    """The bench files to run, and a note for each chart that cannot be drawn."""
    files, notes = [], []
    for suite in suites:
        path = benches / suite.bench
        if not path.is_file():
            notes.append(f"{suite.key} chart skipped: benches/{suite.bench} does not exist")
            continue
        absent = [pip for module, pip in suite.requires if importlib.util.find_spec(module) is None]
        if absent:
            notes.append(
                f"{suite.key} chart skipped: {', '.join(absent)} is not installed "
                f"(pip install {' '.join(absent)})"
            )
            continue
        files.append(path)
    return files, notes


def run_benchmarks(files: list[Path], json_path: Path, quick: bool) -> list[str]:
    """One pytest run per file (its rows side by side), the runs' rows gathered in
    ``json_path``; returns notes."""
    data: dict[str, Any] | None = None
    notes: list[str] = []
    load = os.getloadavg()[0]
    for index, file in enumerate(files):
        part = json_path.with_name(f"{json_path.stem}.{index}{json_path.suffix}")
        command = [
            sys.executable,
            "-m",
            "pytest",
            str(file.relative_to(ROOT)),
            "--benchmark-enable",
            f"--benchmark-json={part}",
            "--benchmark-columns=median,rounds",
            *(QUICK if quick else []),
        ]
        print("running:", " ".join(command[1:]), flush=True)
        code = subprocess.run(command, cwd=ROOT, check=False).returncode
        load = max(load, os.getloadavg()[0])
        if not part.is_file():
            notes.append(f"{file.name}: pytest exited with status {code} and wrote no JSON")
            continue
        run = json.loads(part.read_text(encoding="utf-8"))
        part.unlink()
        if data is None:
            data = run
        else:
            data["benchmarks"].extend(run.get("benchmarks", []))
        if code != 0:
            notes.append(f"{file.name}: pytest exited with status {code}: the rows that ran")
    if data is None:
        raise ReportError("no benchmark run wrote its JSON")
    data["agentctx_report"] = {"versions": installed_versions(), "quick": quick, "load": load}
    json_path.write_text(json.dumps(data), encoding="utf-8")
    return notes


# -- drawing ---------------------------------------------------------------------------------


def format_value(value: float, unit: Unit) -> str:
    if unit == "throughput":
        return f"{value:,.0f} MB/s" if value >= 100 else f"{value:.3g} MB/s"
    if value >= 1000:
        return f"{value:,.0f} s"
    for scale, suffix in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if value >= scale:
            return f"{value / scale:.3g} {suffix}"
    return f"{value * 1e9:.3g} ns"


def format_ratio(ratio: float) -> str:
    if ratio >= 1000:
        return f"{float(f'{ratio:.3g}'):,.0f}x"
    if ratio >= 10:
        return f"{ratio:.0f}x"
    return f"{ratio:.2f}x" if ratio < 1.1 else f"{ratio:.1f}x"


def compare(ratio: float) -> str:
    """How agentctx_fast's row compares with the row beside it: ``ratio`` is how many times
    faster ours is."""
    if ratio >= 1:
        return f"{format_ratio(ratio)} faster"
    return f"{format_ratio(1 / ratio)} slower"


def bar_label(ratio: float, row: Row | None = None) -> str:
    """The note beside a compared row's bar (``ratio`` as in `compare`). The bar is the other
    row's, so the note names the row it is compared with: agentctx_fast beside a peer or a
    floor, our base row (its last qualifier, "cache on") beside another of our rows."""
    name = "agentctx_fast"
    if row is not None and row.role == "ours" and row.versus:
        name = row.versus.rsplit(", ", 1)[-1]
    return f"{name} {compare(ratio)}"


def needs_log(panel: Panel) -> bool:
    values = [row.value for row in panel.rows if row.value > 0]
    return len(values) > 1 and max(values) / min(values) > 20


def caption(run: Run, chart: Chart) -> str:
    cpu = run.machine.get("cpu") or {}
    brand = cpu.get("brand_raw") or run.machine.get("processor") or "unknown CPU"
    count = cpu.get("count")
    python = " ".join(
        str(run.machine.get(k, "")) for k in ("python_implementation", "python_version")
    ).strip()
    machine = f"{brand}, {count} cores" if count else str(brand)
    if run.load is not None:
        machine += f" (load average {run.load:.1f} during the run)"
    if run.quick:
        machine += " [quick run: rough figures]"
    system = " ".join(str(run.machine.get(k, "")) for k in ("system", "machine")).strip()
    versions = [f"agentctx_fast {run.versions.get('agentctx-fast', '?')}"]
    backend = run.versions.get("agentctx_fast backend")
    if backend:
        versions[0] += f" ({backend} backend)"
    versions += [f"{name} {run.versions[name]}" for name in chart.peers if name in run.versions]
    if "pytest-benchmark" in run.versions:
        versions.append(f"pytest-benchmark {run.versions['pytest-benchmark']}")
    parts = [machine, system, python, ", ".join(versions), run.date]
    whiskers = "Whiskers: the middle half of the rounds (first to third quartile)."
    return " · ".join(p for p in parts if p) + "\n" + " ".join([*chart.notes, whiskers])


def _high(row: Row) -> float:
    return max(row.value, row.spread[1]) if row.spread else row.value


def render(chart: Chart, run: Run, path: Path) -> None:
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
        from matplotlib.ticker import FuncFormatter
    except ImportError as error:
        raise ReportError(
            "the benchmark charts need matplotlib: pip install matplotlib "
            '(or pip install -e ".[dev]")'
        ) from error
    columns = min(chart.columns, len(chart.panels))
    grid_rows = math.ceil(len(chart.panels) / columns)
    if chart.shared_rows:  # one row list for all panels, labelled once; a gap where a row is absent
        labels = list(dict.fromkeys(row.label for p in chart.panels for row in p.rows))
        labels += [m for p in chart.panels for m in p.missing if m not in labels]
    tallest = max(len(p.rows) + len(p.missing) for p in chart.panels)
    width = 4.6 * columns + (3.2 if chart.shared_rows else 3.4 * columns)
    figure = Figure(figsize=(width, (0.4 * tallest + 1.0) * grid_rows + 1.3), layout="constrained")
    shared = chart.shared_rows
    axes_grid = figure.subplots(grid_rows, columns, squeeze=False, sharey=shared, sharex=shared)
    every = [row.value for p in chart.panels for row in p.rows if row.value > 0]
    every += [_high(row) for p in chart.panels for row in p.rows]
    log_all = any(needs_log(p) for p in chart.panels)
    for index, axes in enumerate(axes_grid.flat):
        if index >= len(chart.panels):
            axes.set_visible(False)
            continue
        panel = chart.panels[index]
        order = labels if chart.shared_rows else [row.label for row in panel.rows]
        positions = [order.index(row.label) for row in panel.rows]
        values = [row.value for row in panel.rows]
        below = [row.value - (row.spread or (row.value, 0))[0] for row in panel.rows]
        above = [_high(row) - row.value for row in panel.rows]
        axes.barh(
            positions,
            values,
            color=[COLORS[row.role] for row in panel.rows],
            height=0.65,
            xerr=[[max(b, 0) for b in below], [max(a, 0) for a in above]],
            error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#333333"},
        )
        if index % columns == 0 or not chart.shared_rows:
            axes.set_yticks(range(len(order)), order, fontsize=8.5)
        if index == 0 or not chart.shared_rows:
            axes.invert_yaxis()
        highs = [_high(row) for row in panel.rows]
        low, top = min(every if shared else values), max(every if shared else values + highs)
        log = log_all if shared else needs_log(panel)
        if log:
            axes.set_xscale("log")
            axes.set_xlim(low / 2, top * 30)
            start = low / 1.5
        else:
            axes.set_xlim(0, top * 2.0)  # room for the label after the longest whisker
            start = top * 0.02
        for position, row, high in zip(positions, panel.rows, highs, strict=True):
            text = format_value(row.value, panel.unit)
            ratio = panel.ratio(row)
            if ratio is not None:  # beside a peer's bar: how ours compares with it
                text += f"  ·  {bar_label(ratio, row)}"
            x = high * 1.12 if log else high + top * 0.015
            axes.text(x, position, text, va="center", fontsize=8)
        for missing in panel.missing:
            if missing in order:
                axes.text(
                    start,
                    order.index(missing),
                    "not run",
                    va="center",
                    fontsize=8,
                    style="italic",
                    color="#666666",
                )
        unit = panel.unit
        axes.xaxis.set_major_formatter(
            FuncFormatter(lambda v, _, unit=unit: format_value(v, unit) if v > 0 else "0")
        )
        axes.set_xlabel("MB/s" if unit == "throughput" else "median time", fontsize=8)
        axes.tick_params(axis="x", labelsize=7.5)
        axes.set_title(panel.title, fontsize=10, loc="left")
        for side in ("top", "right"):
            axes.spines[side].set_visible(False)
    roles = [role for role in COLORS if any(r.role == role for p in chart.panels for r in p.rows)]
    figure.legend(
        handles=[Patch(color=COLORS[role], label=LEGEND[role]) for role in roles],
        loc="outside lower right",
        ncols=len(roles),
        fontsize=8.5,
        frameon=False,
    )
    figure.suptitle(chart.title, fontsize=12, x=0.01, ha="left")
    room = int((width - 4.2) * 17)  # characters a caption line may take beside the legend
    text = "\n".join(textwrap.fill(line, room) for line in caption(run, chart).split("\n"))
    figure.supxlabel(text, fontsize=7.5, color="#444444", x=0.01, ha="left")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


# -- the table -------------------------------------------------------------------------------


def table(charts: Sequence[Chart], roles: Sequence[Role] = ("peer", "floor")) -> str:
    """The key ratios as markdown: each peer (and floor) row beside the row it is matched with."""
    lines = [
        "| Comparison | agentctx_fast | median | compared with | median | agentctx_fast is |",
        "|---|---|---|---|---|---|",
    ]
    for chart in charts:
        for panel in chart.panels:
            for row in panel.rows:
                ratio = panel.ratio(row)
                base = panel.row(row.versus) if row.versus else None
                if row.role not in roles or ratio is None or base is None:
                    continue
                lines.append(
                    f"| {chart.key}: {panel.title} | {base.label} "
                    f"| {format_value(base.value, panel.unit)} | {row.label} "
                    f"| {format_value(row.value, panel.unit)} | {compare(ratio)} |"
                )
    return "\n".join(lines) + "\n"


def markdown(charts: Sequence[Chart], run: Run) -> str:
    parts = [
        "# Benchmarks\n",
        "Generated by `python benches/report.py` from one pytest-benchmark "
        "run per bench file; medians, rows side by side. How each benchmark is run: "
        "[benchmarking.md](benchmarking.md).\n",
    ]
    for chart in charts:
        parts.append(f"![{chart.title}](bench-{chart.key}.png)\n")
    parts.append(table(charts))
    if charts:
        parts.append("\n" + caption(run, charts[0]).split("\n")[0] + "\n")
    return "\n".join(parts)


README_START = "<!-- benchmark table: written by python benches/report.py --readme -->"
README_END = "<!-- end of the benchmark table -->"


def update_readme(path: Path, charts: Sequence[Chart]) -> None:
    """Replace the table between the README's two markers with this run's peer rows."""
    text = path.read_text(encoding="utf-8")
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ReportError(
            f"{path} has no benchmark table markers ({README_START} ... {README_END})"
        )
    head = text[: start + len(README_START)]
    path.write_text(f"{head}\n{table(charts, ('peer',))}{text[end:]}", encoding="utf-8")


# -- main ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--charts",
        default=",".join(s.key for s in SUITES),
        help="comma-separated charts to make (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="a short benchmark run")
    parser.add_argument("--from-json", type=Path, help="draw this saved run instead of running")
    parser.add_argument("--save-json", type=Path, help="keep the run's JSON here")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the PNGs go")
    parser.add_argument(
        "--readme",
        type=Path,
        nargs="?",
        const=ROOT / "README.md",
        help="also rewrite the peer table between the README's markers (with the charts drawn)",
    )
    args = parser.parse_args(argv)
    keys = [key.strip() for key in args.charts.split(",") if key.strip()]
    unknown = sorted(set(keys) - {s.key for s in SUITES})
    if unknown:
        parser.error(f"unknown chart(s): {', '.join(unknown)}")
    suites = [s for s in SUITES if s.key in keys]
    try:
        notes: list[str] = []
        if args.from_json is not None:
            run = load(args.from_json)
        else:
            files, notes = plan(suites, ROOT / "benches")
            for note in notes:
                print("note:", note, flush=True)
            if not files:
                raise ReportError("nothing to run")
            with tempfile.TemporaryDirectory() as scratch:
                json_path = args.save_json or Path(scratch) / "bench.json"
                notes += run_benchmarks(files, json_path, args.quick)
                run = load(json_path)
        charts = []
        for suite in suites:
            chart = suite.build(run.results)
            if chart is None:
                note = f"{suite.key} chart skipped: no {suite.bench} rows in the results"
                if not any(n.startswith(f"{suite.key} chart") for n in notes):
                    notes.append(note)
                continue
            path = args.out / f"bench-{suite.key}.png"
            render(chart, run, path)
            print(f"wrote {path}")
            charts.append(chart)
        if charts:
            (args.out / "benchmarks.md").write_text(markdown(charts, run), encoding="utf-8")
            print(f"wrote {args.out / 'benchmarks.md'}\n\n{table(charts)}")
            if args.readme is not None:
                update_readme(args.readme, charts)
                print(f"wrote the table in {args.readme}")
        for note in notes:
            print("note:", note)
        return 0 if charts else 1
    except ReportError as error:
        print(f"report: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
