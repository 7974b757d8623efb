"""benches/report.py draws its charts from pytest-benchmark JSON: checked on a small made-up
run of each chart kind (no benchmark runs here)."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

import report

MACHINE = {
    "system": "Linux",
    "machine": "x86_64",
    "python_implementation": "CPython",
    "python_version": "3.11.7",
    "cpu": {"brand_raw": "Test CPU 9000", "count": 2},
}
VERSIONS = {
    "agentctx-fast": "0.1.0",
    "agentctx_fast backend": "rust",
    "langchain-core": "1.8.3",
    "openai-agents": "0.24.0",
    "tiktoken": "0.14.0",
    "pytest-benchmark": "5.3.1",
}


def bench(name: str, median: float, group: str | None = None, **params: Any) -> dict[str, Any]:
    extra = params.pop("extra_info", {})
    return {
        "name": name,
        "group": group,
        "params": params,
        "extra_info": extra,
        "stats": {"median": median, "mean": median, "rounds": 5},
    }


def window_rows() -> list[dict[str, Any]]:
    rows = []
    for size in (1_000, 100_000):
        rows += [
            bench(
                f"test_build_window[rust-default-{size}]",
                2e-6,
                engine="rust",
                options="default",
                size=size,
            ),
            bench(
                f"test_build_window[rust-compact+tokens8000-{size}]",
                4e-6,
                engine="rust",
                options="compact+tokens8000",
                size=size,
            ),
            bench(
                f"test_build_window[python-default-{size}]",
                8e-5,
                engine="python",
                options="default",
                size=size,
            ),
            bench(f"test_floor_minimal_scan[{size}]", 1e-6, size=size),
            bench(f"test_floor_list_slice[{size}]", 1e-7, size=size),
        ]
    rows += [  # LangChain runs at 1,000 only, as in bench_window.py (not at 100,000)
        bench("test_peer_langchain_trim_messages[len-1000]", 1.48e-4, counter="len", size=1_000),
        bench("test_peer_langchain_trim_messages[approx-1000]", 4e-3, counter="approx", size=1_000),
    ]
    return rows


def service_rows() -> list[dict[str, Any]]:
    rows = []
    for kind in ("redis", "sqlite"):
        for size in (10_000, 1_000):
            group = f"service: one call's input, {kind}, {size} messages"
            for side, median in (
                ("ours-warm", 2e-4),
                ("ours-cold", 8e-4),
                ("peer-get_items", 1e-4),
            ):
                rows.append(
                    bench(
                        f"test_assemble_one_call[{kind}-{side}-{size}]",
                        median,
                        group,
                        setup=kind,
                        side=side,
                        size=size,
                    )
                )
        group = f"service: append a finished tool turn, {kind}"
        for side, median in (("ours-batch", 5e-4), ("peer-add_items", 3.5e-3)):
            rows.append(
                bench(
                    f"test_append_a_tool_turn[{kind}-{side}]", median, group, setup=kind, side=side
                )
            )
    return rows


def token_rows() -> list[dict[str, Any]]:
    """Named as bench_tokens.py names them (the parameter ``row``)."""
    rows = []
    for encoding in ("o200k_base", "cl100k_base"):
        group = f"tokens-throughput-{encoding}"
        for counter, median in (("tiktoken", 0.1), ("heuristic", 0.005), ("ours-exact", 0.025)):
            rows.append(
                bench(
                    f"test_throughput[{encoding}-{counter}]",
                    median,
                    group,
                    encoding=encoding,
                    row=counter,
                    extra_info={"megabytes": 5.0},
                )
            )
    history = (
        ("ours-exact-o200k", 0.002),
        ("ours-exact-cl100k", 0.003),
        ("tiktoken-cl100k", 0.015),
        ("heuristic", 0.001),
    )
    for counter, median in history:
        rows.append(bench(f"test_history[{counter}]", median, "tokens-history", row=counter))
    return rows


def write_run(path: Path, rows: list[dict[str, Any]], versions: bool = True) -> Path:
    data: dict[str, Any] = {
        "machine_info": MACHINE,
        "benchmarks": rows,
        "datetime": "2026-12-03T17:00:00.000000+00:00",
        "version": "5.3.1",
    }
    if versions:
        data["agentctx_report"] = {"versions": VERSIONS, "quick": False, "load": 3.31}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def results(rows: list[dict[str, Any]], tmp_path: Path) -> list[report.Result]:
    return report.load(write_run(tmp_path / "run.json", rows)).results


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_window_chart_pairs_each_peer_with_the_matching_window(tmp_path: Path) -> None:
    chart = report.window_chart(results(window_rows(), tmp_path))
    assert chart is not None and chart.shared_rows
    assert [p.title for p in chart.panels] == ["1,000 stored messages", "100,000 stored messages"]
    small, large = chart.panels
    rust = "build_window, Rust"
    langchain_len = small.row("LangChain trim_messages, 100 messages")
    langchain_approx = small.row("LangChain trim_messages, 8,000 approx. tokens")
    assert langchain_len is not None and langchain_approx is not None
    assert langchain_len.role == "peer" and langchain_len.versus == rust
    assert small.ratio(langchain_len) == pytest.approx(74)
    # the token-budget peer is matched with the token-capped window: 4 ms / 4 µs
    assert small.ratio(langchain_approx) == pytest.approx(1000)
    scan = small.row("minimal scan (turn/message caps only)")
    assert scan is not None and scan.role == "floor" and small.ratio(scan) == pytest.approx(0.5)
    assert small.ratio(small.rows[0]) is None  # the reference row has no ratio
    assert large.missing == (
        "LangChain trim_messages, 100 messages",
        "LangChain trim_messages, 8,000 approx. tokens",
    )
    assert report.needs_log(small) and report.needs_log(large)


def test_service_chart_orders_panels_and_names_the_peer_session(tmp_path: Path) -> None:
    chart = report.service_chart(results(service_rows(), tmp_path))
    assert chart is not None
    assert [p.title for p in chart.panels] == [
        "One call's input, SQLite, 1,000 messages",
        "One call's input, Redis, 1,000 messages",
        "One call's input, SQLite, 10,000 messages",
        "One call's input, Redis, 10,000 messages",
        "Append a finished tool turn, SQLite",
        "Append a finished tool turn, Redis",
    ]
    first = chart.panels[0]
    assert [r.role for r in first.rows] == ["ours", "ours", "peer"]
    peer = first.rows[2]
    assert peer.label == "SQLiteSession.get_items(limit=100)"
    assert first.ratio(peer) == pytest.approx(0.5)  # the peer is faster: said so, not hidden
    assert report.compare(0.5) == "2.0x slower"
    assert chart.panels[1].rows[2].label == "RedisSession.get_items(limit=100)"
    append = chart.panels[4]
    assert append.ratio(append.rows[1]) == pytest.approx(7)
    assert not report.needs_log(first)


def session_rows() -> list[dict[str, Any]]:
    """Named as bench_sessions.py names them (``setup``, ``side``, ``size``)."""
    rows = []
    for kind in ("redis", "sqlite"):
        for size in (10_000, 1_000):
            group = f"sessions: get_items, {kind}, {size} items"
            for side, median in (
                ("peer-get_items-limit", 2e-4),
                ("ours-cold", 2e-3),
                ("peer-get_items", 4e-3 * size / 1_000),
                ("ours-async-warm", 6e-4),
                ("ours-warm", 5e-4),
                ("ours-async-cold", 2.5e-3),
            ):
                rows.append(
                    bench(
                        f"test_get_items[{kind}-{side}-{size}]",
                        median,
                        group,
                        setup=kind,
                        side=side,
                        size=size,
                        extra_info={"window_items": 48},
                    )
                )
    group = "sessions: the input filter in a Runner.run turn, 1,000 items"
    for side, median in (("run-without-filter", 2e-3), ("filter-alone", 4e-5)):
        rows.append(bench(f"test_input_filter_share_of_a_turn[{side}]", median, group, side=side))
    rows.append(
        bench("test_input_filter_share_of_a_turn[run-with-filter]", 2.05e-3, group,
              side="run-with-filter")
    )  # fmt: skip
    return rows


def test_sessions_chart_compares_the_sdk_sessions_with_our_windowed_session(
    tmp_path: Path,
) -> None:
    chart = report.sessions_chart(results(session_rows(), tmp_path))
    assert chart is not None and chart.key == "sessions"
    assert [p.title for p in chart.panels] == [
        "get_items, SQLite, 1,000 items",
        "get_items, Redis, 1,000 items",
        "get_items, SQLite, 10,000 items",
        "get_items, Redis, 10,000 items",
        "the input filter in a Runner.run turn, 1,000 items",
    ]
    first = chart.panels[0]
    assert [(r.label, r.role) for r in first.rows] == [
        ("AgentCtxSession + window, blocking store, cache on", "ours"),
        ("AgentCtxSession + window, blocking store, cache off", "ours"),
        ("AgentCtxSession + window, asyncio store, cache on", "ours"),
        ("AgentCtxSession + window, asyncio store, cache off", "ours"),
        ("SQLiteSession.get_items() (every item)", "peer"),
        ("SQLiteSession.get_items(limit=48) (as many items)", "peer"),
    ]
    assert first.ratio(first.rows[4]) == pytest.approx(8)  # every item: ours is faster
    assert first.ratio(first.rows[5]) == pytest.approx(0.4)  # 48 items: the peer is, said so
    assert chart.panels[3].rows[4].label == "RedisSession.get_items() (every item)"
    assert chart.panels[3].ratio(chart.panels[3].rows[4]) == pytest.approx(80)
    turn = chart.panels[4]
    assert [(r.label, r.role) for r in turn.rows] == [
        ("Runner.run turn with AgentCtxInputFilter", "ours"),
        ("AgentCtxInputFilter alone", "ours"),
        ("Runner.run turn without a filter", "floor"),
    ]
    assert report.compare(turn.ratio(turn.rows[2]) or 0) == "1.03x slower"  # the filter's cost
    lines = report.table([chart], ("peer",)).splitlines()
    assert len(lines) == 2 + 8  # two peer rows per get_items panel, none for the turn
    assert (
        "| sessions: get_items, SQLite, 1,000 items "
        "| AgentCtxSession + window, blocking store, cache on | 500 µs "
        "| SQLiteSession.get_items() (every item) | 4 ms | 8.0x faster |"
    ) in lines


def test_tokens_chart_reports_throughput_in_mb_per_second(tmp_path: Path) -> None:
    chart = report.tokens_chart(results(token_rows(), tmp_path))
    assert chart is not None
    titles = [p.title for p in chart.panels]
    assert titles == [
        "Counting tokens, cl100k_base (MB/s)",
        "Counting tokens, o200k_base (MB/s)",
        "Counting a whole history's tokens",
    ]
    throughput = chart.panels[0]
    assert throughput.unit == "throughput"
    assert [(r.label, r.role) for r in throughput.rows] == [
        ("ours-exact", "ours"),
        ("tiktoken", "peer"),
        ("heuristic", "other"),
    ]
    assert throughput.rows[0].value == pytest.approx(200.0)  # 5 MB in 25 ms
    assert throughput.ratio(throughput.rows[1]) == pytest.approx(4)  # 200 vs 50 MB/s
    assert throughput.ratio(throughput.rows[2]) == pytest.approx(0.2)
    history = chart.panels[2]
    assert history.unit == "time"
    assert [(r.label, r.role, r.versus) for r in history.rows] == [
        ("ours-exact-o200k", "ours", "ours-exact-o200k"),
        ("ours-exact-cl100k", "ours", "ours-exact-cl100k"),
        ("tiktoken-cl100k", "peer", "ours-exact-cl100k"),  # the same encoding
        ("heuristic", "other", "ours-exact-o200k"),  # nothing shared: the first
    ]
    assert history.ratio(history.rows[2]) == pytest.approx(5)
    assert history.ratio(history.rows[3]) == pytest.approx(0.5)


def test_from_json_renders_every_chart_and_the_table(tmp_path: Path) -> None:
    rows = window_rows() + service_rows() + session_rows() + token_rows()
    run = write_run(tmp_path / "run.json", rows)
    out = tmp_path / "docs"
    assert report.main(["--from-json", str(run), "--out", str(out)]) == 0
    for key in ("window", "service", "sessions", "tokens"):
        width, height = png_size(out / f"bench-{key}.png")
        assert width > 600 and height > 300
    text = (out / "benchmarks.md").read_text(encoding="utf-8")
    for key in ("window", "service", "sessions", "tokens"):
        image = f"bench-{key}.png"
        assert f"]({image})" in text
    assert (
        "| window: 1,000 stored messages | build_window, Rust | 2 µs "
        "| LangChain trim_messages, 100 messages | 148 µs | 74x faster |"
    ) in text
    assert "| SQLiteSession.add_items(4 items) | 3.5 ms | 7.0x faster |" in text
    assert "| RedisSession.get_items(limit=48) (as many items) | 200 µs | 2.5x slower |" in text
    assert "| tiktoken | 50 MB/s | 4.0x faster |" in text
    assert "Test CPU 9000, 2 cores" in text and "agentctx_fast 0.1.0 (rust backend)" in text


def test_caption_names_machine_versions_and_date(tmp_path: Path) -> None:
    run = report.load(write_run(tmp_path / "run.json", window_rows()))
    chart = report.window_chart(run.results)
    assert chart is not None
    text = report.caption(run, chart)
    for part in (
        "Test CPU 9000, 2 cores",
        "Linux x86_64",
        "CPython 3.11.7",
        "(load average 3.3 during the run)",
        "agentctx_fast 0.1.0 (rust backend)",
        "langchain-core 1.8.3",
        "2026-12-03",
    ):
        assert part in text
    assert "tiktoken" not in text.split("\n")[0]  # only this chart's peers


def test_a_chart_without_rows_is_skipped_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "run.json", window_rows())
    out = tmp_path / "docs"
    assert report.main(["--from-json", str(run), "--out", str(out)]) == 0
    assert (out / "bench-window.png").is_file()
    assert not (out / "bench-service.png").exists() and not (out / "bench-tokens.png").exists()
    printed = capsys.readouterr().out
    assert "note: service chart skipped: no bench_service.py rows" in printed
    assert "note: tokens chart skipped: no bench_tokens.py rows" in printed
    assert report.main(["--from-json", str(run), "--out", str(out), "--charts", "tokens"]) == 1


def test_plan_skips_a_missing_bench_file_and_a_missing_peer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bench_window.py").write_text("", encoding="utf-8")
    (tmp_path / "bench_service.py").write_text("", encoding="utf-8")
    (tmp_path / "bench_sessions.py").write_text("", encoding="utf-8")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "agents" else real(name)
    )
    files, notes = report.plan(report.SUITES, tmp_path)
    assert files == [tmp_path / "bench_window.py"]
    assert notes == [
        "service chart skipped: openai-agents is not installed (pip install openai-agents)",
        "sessions chart skipped: openai-agents is not installed (pip install openai-agents)",
        "tokens chart skipped: benches/bench_tokens.py does not exist",
    ]


def test_missing_matplotlib_is_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if absent
    run = write_run(tmp_path / "run.json", window_rows())
    assert report.main(["--from-json", str(run), "--out", str(tmp_path)]) == 2
    assert "the benchmark charts need matplotlib: pip install matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "bench-window.png").exists()


def test_unreadable_json_is_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"no": "benchmarks"}', encoding="utf-8")
    assert report.main(["--from-json", str(bad), "--out", str(tmp_path)]) == 2
    assert "is not a pytest-benchmark JSON file" in capsys.readouterr().err


def test_a_plain_pytest_json_takes_todays_versions(tmp_path: Path) -> None:
    run = report.load(write_run(tmp_path / "run.json", window_rows(), versions=False))
    assert run.versions.get("pytest-benchmark")  # installed with the dev extra
    assert run.date == "2026-12-03"


def test_formats() -> None:
    assert report.format_value(2.5e-6, "time") == "2.5 µs"
    assert report.format_value(1.48e-4, "time") == "148 µs"
    assert report.format_value(3.2e-8, "time") == "32 ns"
    assert report.format_value(1.5, "time") == "1.5 s"
    assert report.format_value(1234.5, "time") == "1,234 s"
    assert report.format_value(1234.0, "throughput") == "1,234 MB/s"
    assert report.compare(74.2) == "74x faster"
    assert report.compare(27_506.0) == "27,500x faster"
    assert report.compare(1.03) == "1.03x faster"
    assert report.compare(0.25) == "4.0x slower"


def test_readme_table_is_rewritten_between_its_markers(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run.json", window_rows())
    readme = tmp_path / "README.md"
    before = f"# Title\n\n{report.README_START}\n| old | table |\n{report.README_END}\n\nAfter.\n"
    readme.write_text(before, encoding="utf-8")
    argv = ["--from-json", str(run), "--out", str(tmp_path / "docs"), "--readme", str(readme)]
    assert report.main([*argv, "--charts", "window"]) == 0
    text = readme.read_text(encoding="utf-8")
    assert "| old | table |" not in text
    assert text.startswith(f"# Title\n\n{report.README_START}\n| Comparison |")
    assert text.endswith(f"| 4 ms | 1,000x faster |\n{report.README_END}\n\nAfter.\n")
    assert "minimal scan" not in text  # the README table has the peers only
    readme.write_text("# No markers\n", encoding="utf-8")
    assert report.main([*argv, "--charts", "window"]) == 2
    assert readme.read_text(encoding="utf-8") == "# No markers\n"


def test_whiskers_are_the_quartiles_in_the_rows_unit(tmp_path: Path) -> None:
    rows = token_rows()
    rows[0]["stats"].update(q1=0.08, q3=0.125)  # tiktoken, o200k_base: 5 MB in 80 to 125 ms
    chart = report.tokens_chart(results(rows, tmp_path))
    assert chart is not None
    tiktoken = chart.panels[1].row("tiktoken")
    assert tiktoken is not None and tiktoken.spread == pytest.approx((40.0, 62.5))  # MB/s
    window = report.window_chart(results(window_rows(), tmp_path))
    assert window is not None and window.panels[0].rows[0].spread == (2e-6, 2e-6)  # no quartiles


def test_a_quick_run_says_so_in_the_caption(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run.json", window_rows())
    data = json.loads(path.read_text(encoding="utf-8"))
    data["agentctx_report"]["quick"] = True
    path.write_text(json.dumps(data), encoding="utf-8")
    run = report.load(path)
    chart = report.window_chart(run.results)
    assert chart is not None and "[quick run: rough figures]" in report.caption(run, chart)


def test_service_groups_without_a_peer_comparison_are_left_out(tmp_path: Path) -> None:
    group = "service: Redis server CPU per page read (see server_usec_per_read)"
    extra = [
        bench(f"test_redis_server_cpu_per_page_read[redis-{read}]", 1e-4, group, setup="redis",
              read=read, extra_info={"server_usec_per_read": 12.0})
        for read in ("ours-get_messages", "plain-lrange")
    ]  # fmt: skip
    chart = report.service_chart(results(service_rows() + extra, tmp_path))
    assert chart is not None and len(chart.panels) == 6
    assert not any("CPU" in panel.title for panel in chart.panels)
    assert report.service_chart(results(extra, tmp_path)) is None


def test_a_peer_bar_is_labelled_with_how_agentctx_fast_compares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The note beside a peer's bar names agentctx_fast: "74x faster" alone there would read
    as the peer being faster."""
    from matplotlib.figure import Figure

    drawn: list[Any] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *_, **__: drawn.append(self))
    run = report.load(write_run(tmp_path / "run.json", window_rows()))
    chart = report.window_chart(run.results)
    assert chart is not None
    report.render(chart, run, tmp_path / "window.png")
    texts = [text.get_text() for axes in drawn[0].axes for text in axes.texts]
    assert any(t.endswith("·  agentctx_fast 74x faster") for t in texts), texts
    assert any(t.endswith("·  agentctx_fast 2.0x slower") for t in texts), texts  # the floor
    assert not any(t.endswith("·  74x faster") for t in texts)
    assert report.bar_label(0.25) == "agentctx_fast 4.0x slower"
    ours = report.Row("read, cache off", 2.0, "ours", versus="read + window, cache on")
    assert report.bar_label(1.6, ours) == "cache on 1.6x faster"


def test_an_alternating_run_is_two_labelled_bars_ours_and_the_peers(tmp_path: Path) -> None:
    """bench_service times both sides of an append in alternation in one benchmark: its own
    median is the pair's sum. The panel shows each side's median as its own named bar."""
    alternating = [
        bench(
            f"test_append_a_tool_turn_alternating[{kind}]",
            1.2e-3,
            f"service: append a tool turn, ours and the peer alternating, {kind}",
            setup=kind,
            extra_info={"ours_median_us": 400.0, "peer_median_us": 800.0}
            | ({"ours_q1_us": 350.0, "ours_q3_us": 450.0} if kind == "redis" else {}),
        )
        for kind in ("sqlite", "redis")
    ]
    chart = report.service_chart(results(service_rows() + alternating, tmp_path))
    assert chart is not None
    panels = {panel.title: panel for panel in chart.panels}
    sqlite = panels["Append a tool turn, ours and the peer alternating, SQLite"]
    assert [(row.label, row.role) for row in sqlite.rows] == [
        ("add_messages_if_absent (one batch)", "ours"),
        ("SQLiteSession.add_items(4 items)", "peer"),
    ]
    assert [row.value for row in sqlite.rows] == pytest.approx([4e-4, 8e-4])
    assert sqlite.ratio(sqlite.rows[1]) == pytest.approx(2)
    assert sqlite.rows[0].spread is None  # no quartiles recorded: no whiskers made up
    redis = panels["Append a tool turn, ours and the peer alternating, Redis"]
    assert redis.rows[1].label == "RedisSession.add_items(4 items)"
    assert redis.rows[0].spread == pytest.approx((3.5e-4, 4.5e-4))
    assert "| service: Append a tool turn, ours and the peer alternating, Redis |" in (
        report.table([chart])
    )
