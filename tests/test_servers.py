"""The server harness against real PostgreSQL, Redis and a Redis Cluster: connect, restart,
crash, stop."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from server_fixtures import require_module, require_server
from servers import (
    PostgresServer,
    RedisClusterServer,
    RedisServer,
    ServerUnavailable,
    port_open,
)

psycopg = require_module("psycopg")
redis = require_module("redis")


@pytest.fixture
def own_pg() -> Iterator[PostgresServer]:
    """A server of the test's own, free to stop, kill and restart."""
    server = require_server(PostgresServer)
    yield server
    server.close()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = require_server(RedisServer)
    yield server
    server.close()


def _uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie is dead, just not reaped yet


# --- PostgreSQL --------------------------------------------------------------------------------


def test_postgres_select_one(postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_server.dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        row = conn.execute("SELECT current_user, current_database()").fetchone()
        assert row == (postgres_server.user, postgres_server.dbname)
        assert conn.execute("SHOW max_connections").fetchone() == ("100",)
        assert conn.execute("SHOW fsync").fetchone() == ("off",)


def test_postgres_urls(postgres_server: PostgresServer) -> None:
    port = postgres_server.port
    assert postgres_server.url == f"postgresql+psycopg://test@127.0.0.1:{port}/test"
    assert postgres_server.dsn == f"postgresql://test@127.0.0.1:{port}/test"
    assert postgres_server.dsn_for("other").endswith(f":{port}/other")


def test_postgres_runs_unprivileged(postgres_server: PostgresServer) -> None:
    pid = postgres_server.pid
    assert pid is not None
    uid = _uid_of(pid)
    assert uid != 0
    if os.geteuid() != 0:
        assert uid == os.geteuid()
    assert postgres_server.datadir.is_dir()


def test_postgres_from_template_or_not(postgres_server: PostgresServer) -> None:
    """A copied cluster and a fresh initdb both run, owned by the server's own user."""
    for use_template in (True, False):
        with require_server(lambda t=use_template: PostgresServer(use_template=t)) as pg:
            assert pg.datadir.stat().st_uid == _uid_of(pg.pid or 0)
            assert (pg.datadir / "PG_VERSION").stat().st_uid == pg.datadir.stat().st_uid
            with psycopg.connect(pg.dsn) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)


def test_postgres_restart_keeps_rows(own_pg: PostgresServer) -> None:
    with psycopg.connect(own_pg.dsn) as conn:
        conn.execute("CREATE TABLE kept (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO kept VALUES (1, 'before restart')")
    port, datadir = own_pg.port, own_pg.datadir
    own_pg.restart()
    assert (own_pg.port, own_pg.datadir) == (port, datadir)
    with psycopg.connect(own_pg.dsn) as conn:
        assert conn.execute("SELECT id, note FROM kept").fetchall() == [(1, "before restart")]


def test_postgres_stop_ends_open_sessions(own_pg: PostgresServer) -> None:
    """A graceful stop is PostgreSQL's fast shutdown: it does not wait for idle clients."""
    conn = psycopg.connect(own_pg.dsn)
    try:
        conn.execute("SELECT 1")
        own_pg.stop()
        assert not own_pg.running
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    finally:
        conn.close()


def test_postgres_crash_keeps_committed_drops_uncommitted(own_pg: PostgresServer) -> None:
    with psycopg.connect(own_pg.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE ledger (id int PRIMARY KEY)")
        conn.execute("INSERT INTO ledger VALUES (1)")
    half = psycopg.connect(own_pg.dsn)
    try:
        half.execute("INSERT INTO ledger VALUES (2)")  # open transaction, never committed
        own_pg.restart(kill=True)
    finally:
        half.close()
    with psycopg.connect(own_pg.dsn) as conn:
        assert conn.execute("SELECT id FROM ledger ORDER BY id").fetchall() == [(1,)]


# --- Redis -------------------------------------------------------------------------------------


def test_redis_set_get(redis_server: RedisServer) -> None:
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"
    client = redis.Redis.from_url(redis_server.url)
    try:
        assert client.set("harness:greeting", "hello")
        assert client.get("harness:greeting") == b"hello"
    finally:
        client.close()


@pytest.mark.parametrize("kill", [False, True], ids=["graceful", "kill"])
def test_redis_restart_keeps_keys(own_redis: RedisServer, kill: bool) -> None:
    client = redis.Redis.from_url(own_redis.url)
    try:
        client.set("kept", "yes")
        client.rpush("list", "a", "b")
    finally:
        client.close()
    port = own_redis.port
    own_redis.restart(kill=kill)
    assert own_redis.port == port
    client = redis.Redis.from_url(own_redis.url)
    try:
        assert client.get("kept") == b"yes"
        assert client.lrange("list", 0, -1) == [b"a", b"b"]
    finally:
        client.close()


# --- both --------------------------------------------------------------------------------------


def test_two_servers_get_different_ports() -> None:
    with (
        require_server(RedisServer) as a,
        require_server(RedisServer) as b,
        require_server(PostgresServer) as c,
        require_server(PostgresServer) as d,
    ):
        ports = {a.port, b.port, c.port, d.port}
        assert len(ports) == 4
        assert all(port_open(p) for p in ports)


@pytest.mark.parametrize("kind", [PostgresServer, RedisServer])
def test_stopped_port_refuses_and_close_cleans_up(kind: type[PostgresServer | RedisServer]) -> None:
    server = require_server(kind)
    try:
        pid, port, tmpdir = server.pid, server.port, server.tmpdir
        assert pid is not None
        assert port_open(port)
        server.stop()
        assert not port_open(port)
        assert not _alive(pid)
        assert tmpdir.is_dir(), "stop() keeps the data"
        if isinstance(server, PostgresServer):
            with pytest.raises(psycopg.OperationalError):
                psycopg.connect(server.dsn, connect_timeout=2)
        else:
            client = redis.Redis.from_url(server.url, socket_connect_timeout=2)
            with pytest.raises(redis.ConnectionError):
                client.ping()
            client.close()
    finally:
        server.close()
    assert not tmpdir.exists(), "close() removes the directory"
    with pytest.raises(RuntimeError):
        server.start()


def test_redis_cluster_has_three_masters_covering_every_slot(
    redis_cluster: RedisClusterServer,
) -> None:
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(redis_cluster.url)
    try:
        masters = client.get_primaries()
        assert sorted(node.port for node in masters) == sorted(redis_cluster.ports)
        info = client.cluster_info(target_nodes=RedisCluster.ALL_NODES)
        states = info.values() if isinstance(next(iter(info.values())), dict) else [info]
        assert all(state["cluster_state"] == "ok" for state in states)
        assert all(int(state["cluster_slots_ok"]) == 16384 for state in states)
        for i in range(30):  # keys land on the master of their slot, whichever that is
            client.set(f"harness-{i}", i)
        assert [int(client.get(f"harness-{i}")) for i in range(30)] == list(range(30))
    finally:
        client.close()


def test_redis_cluster_close_stops_every_master_and_cleans_up() -> None:
    cluster = require_server(RedisClusterServer)
    try:
        ports = cluster.ports
        dirs = [node.tmpdir for node in cluster.nodes]
        assert len(ports) == 3 and all(port_open(port) for port in ports)
    finally:
        cluster.close()
    assert not any(port_open(port) for port in ports)
    assert not any(directory.exists() for directory in dirs)
    with pytest.raises(RuntimeError):
        cluster.start()


def test_missing_binaries_raise_server_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ServerUnavailable, match="initdb"):
        PostgresServer(bindir=tmp_path).start()
    with pytest.raises(ServerUnavailable, match="redis-server"):
        RedisServer(binary=tmp_path / "redis-server").start()


def test_require_server_follows_ci_rule(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def broken() -> RedisServer:
        return RedisServer(binary=tmp_path / "redis-server")

    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="redis-server"):
        require_server(broken)
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="redis-server"):
        require_server(broken)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        require_module("no_such_module_for_the_harness")
