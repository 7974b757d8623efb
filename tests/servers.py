"""Real PostgreSQL and Redis servers for the tests, from Debian's packages (stdlib only).

Each server runs on 127.0.0.1 on a free port, with its data in a temporary directory::

    with PostgresServer() as pg, RedisServer() as rd, RedisClusterServer() as cluster:
        engine = sqlalchemy.create_engine(pg.url)   # postgresql+psycopg://...
        conn = psycopg.connect(pg.dsn)              # postgresql://...
        client = redis.Redis.from_url(rd.url)       # redis://127.0.0.1:PORT/0
        nodes = redis.cluster.RedisCluster.from_url(cluster.url)  # three masters

``start()`` starts it and waits until it takes connections; ``stop()`` stops it and keeps the
data; ``restart()`` is both, on the same port and data directory; ``close()`` (or leaving the
``with``) stops it for good and removes the directory. ``stop(kill=True)`` / ``restart(kill=True)``
SIGKILL the server instead, to test a crash in the middle of a run. Any reason a server cannot
run (binary missing, start timeout, early exit) is raised as ``ServerUnavailable`` with the tail
of the server's log. Servers still running when the interpreter exits are closed by ``atexit``;
on Linux they also get SIGKILL if the process that started them dies without cleaning up.

PostgreSQL refuses to run as root: as root, initdb and postgres run as the ``postgres`` system
user (``nobody`` if there is none), which owns the temporary directory. initdb runs once per
process: later PostgreSQL servers copy that fresh cluster (``use_template=False`` to opt out).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import pwd
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, ClassVar, Self

__all__ = [
    "PostgresServer",
    "RedisClusterServer",
    "RedisServer",
    "Server",
    "ServerUnavailable",
    "find_postgres_bindir",
    "find_redis_server",
    "free_port",
    "port_open",
]

HOST = "127.0.0.1"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
LOG_TAIL_LINES = 30


class ServerUnavailable(RuntimeError):
    """A test server cannot be started: binary missing, start timeout or early exit."""


# --- helpers -----------------------------------------------------------------------------------

_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def free_port() -> int:
    """A free TCP port on 127.0.0.1, never the same one twice in this process."""
    with _handed_out_lock:
        for _ in range(50):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((HOST, 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise ServerUnavailable("no free port found on 127.0.0.1")


def port_open(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.name)) or (-1,)


def find_postgres_bindir(root: Path = Path("/usr/lib/postgresql")) -> Path:
    """``/usr/lib/postgresql/<highest version>/bin`` holding initdb and postgres."""
    candidates = [
        d / "bin"
        for d in (root.iterdir() if root.is_dir() else ())
        if (d / "bin" / "initdb").is_file() and (d / "bin" / "postgres").is_file()
    ]
    if not candidates:
        raise ServerUnavailable(
            f"PostgreSQL not installed: no {root}/<version>/bin/initdb "
            "(run `bash scripts/servers.sh`)"
        )
    return max(candidates, key=lambda b: _version_key(b.parent))


def find_redis_server() -> Path:
    """The ``redis-server`` binary, from PATH or /usr/bin."""
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    fallback = Path("/usr/bin/redis-server")
    if fallback.is_file() and os.access(fallback, os.X_OK):
        return fallback
    raise ServerUnavailable(
        "redis-server not installed: not on PATH nor in /usr/bin (run `bash scripts/servers.sh`)"
    )


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else f"(log {path} is empty)"


def _parent_death_signal() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGKILL the child when its parent dies, or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        # Runs in the child after setuid, so the setting survives the change of user.
        prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)

    return preexec


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without libpq's PG* variables, which could point the tools elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    env.pop("LANG", None)
    env.pop("LANGUAGE", None)
    if extra:
        env.update(extra)
    return env


# --- base class --------------------------------------------------------------------------------

_live: set[Server] = set()
_live_lock = threading.Lock()


@atexit.register
def _close_all() -> None:
    with _live_lock:
        servers = list(_live)
    for server in servers:
        with contextlib.suppress(Exception):
            server.close()


class Server:
    """A server process on 127.0.0.1 on a free port, with its data in a temporary directory."""

    name: ClassVar[str] = "server"
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM

    def __init__(self, *, port: int | None = None, start_timeout: float = START_TIMEOUT) -> None:
        self._port = port
        self.start_timeout = start_timeout
        self._tmpdir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._closed = False
        self._initialized = False
        self._started_once = False
        self.last_start_seconds: float | None = None

    # -- public API

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"{self.name} server has no port yet: call start() first")
        return self._port

    @property
    def tmpdir(self) -> Path:
        if self._tmpdir is None:
            raise RuntimeError(f"{self.name} server has no directory yet: call start() first")
        return self._tmpdir

    @property
    def log_path(self) -> Path:
        return self.tmpdir / f"{self.name}.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    def start(self) -> Self:
        """Start the server (a no-op when it runs) and wait until it takes connections."""
        if self._closed:
            raise RuntimeError(f"{self.name} server was closed; make a new one")
        if self.running:
            return self
        began = time.monotonic()
        self._find_binaries()
        if self._tmpdir is None:
            self._tmpdir = self._make_tmpdir()
            with _live_lock:
                _live.add(self)
        if self._port is None:
            self._port = free_port()
        if port_open(self.port):
            raise ServerUnavailable(f"{self.name}: port {self.port} on {HOST} is already taken")
        try:
            if not self._initialized:
                self._init_data()
                self._initialized = True
            self._spawn()
            self._wait_ready()
            if not self._started_once:
                self._after_first_start()
                self._started_once = True
        except BaseException:
            self._terminate(kill=True)
            raise
        self.last_start_seconds = time.monotonic() - began
        return self

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server, keeping its data: gracefully, or with SIGKILL when ``kill``."""
        self._terminate(kill=kill)

    def restart(self, *, kill: bool = False) -> Self:
        """Stop then start again on the same port and data directory; the data is kept."""
        self.stop(kill=kill)
        return self.start()

    def close(self) -> None:
        """Stop the server for good and remove its temporary directory."""
        self._terminate(kill=False)
        self._closed = True
        with _live_lock:
            _live.discard(self)
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} {HOST}:{self._port} {state}>"

    # -- for subclasses

    def _find_binaries(self) -> None:
        raise NotImplementedError

    def _make_tmpdir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"test-{self.name}-"))

    def _init_data(self) -> None:
        """Prepare the data directory, once, before the first start."""

    def _after_first_start(self) -> None:
        """Work to do once the server took connections the first time."""

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _popen_kwargs(self) -> dict[str, Any]:
        return {}

    def _ready(self) -> bool:
        raise NotImplementedError

    # -- process handling

    def _spawn(self) -> None:
        log = open(self.log_path, "ab")  # closed in _terminate
        self._log_file = log
        self._proc = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.tmpdir,
            start_new_session=True,
            preexec_fn=_parent_death_signal(),
            **self._popen_kwargs(),
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise ServerUnavailable(
                    f"{self.name} exited during start (code {code}) on port {self._port}; "
                    f"log {self.log_path}:\n{_log_tail(self.log_path)}"
                )
            if port_open(self.port) and self._ready():
                return
            if time.monotonic() > deadline:
                raise ServerUnavailable(
                    f"{self.name} did not take connections on {HOST}:{self._port} within "
                    f"{self.start_timeout:.0f} s; log {self.log_path}:\n{_log_tail(self.log_path)}"
                )
            time.sleep(0.05)

    def _signal_group(self, proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        # The server is the leader of its own session, so its pid is its process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def _terminate(self, *, kill: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                if kill:
                    self._signal_group(proc, signal.SIGKILL)
                else:
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(self.stop_signal)
                try:
                    proc.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self._signal_group(proc, signal.SIGKILL)
                    proc.wait(timeout=STOP_TIMEOUT)
            # Anything the server left in its group (a backend, say) goes too.
            self._signal_group(proc, signal.SIGKILL)
            self._wait_port_closed()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _wait_port_closed(self, timeout: float = 5.0) -> None:
        if self._port is None:
            return
        deadline = time.monotonic() + timeout
        while port_open(self._port, timeout=0.2) and time.monotonic() < deadline:
            time.sleep(0.05)


# --- PostgreSQL --------------------------------------------------------------------------------

# Fresh initdb clusters, one per (bindir, superuser, run-as uid), copied by each new server.
_templates: dict[tuple[str, str, int | None], Path] = {}
_templates_lock = threading.Lock()


@atexit.register
def _remove_templates() -> None:
    with _templates_lock:
        for template in _templates.values():
            shutil.rmtree(template.parent, ignore_errors=True)
        _templates.clear()


class PostgresServer(Server):
    """A PostgreSQL cluster with trust auth, a superuser ``user`` and a database ``dbname``.

    ``url`` is for SQLAlchemy (``postgresql+psycopg://user@127.0.0.1:PORT/dbname``), ``dsn``
    for libpq and psycopg (``postgresql://user@127.0.0.1:PORT/dbname``).
    """

    name = "postgres"
    # SIGINT is PostgreSQL's "fast" shutdown (pg_ctl stop -m fast): open sessions are ended.
    # SIGTERM would be "smart" shutdown, which waits for every client to disconnect.
    stop_signal = signal.SIGINT

    def __init__(
        self,
        *,
        user: str = "test",
        dbname: str = "test",
        port: int | None = None,
        bindir: Path | str | None = None,
        max_connections: int = 100,
        settings: dict[str, str] | None = None,
        use_template: bool = True,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        super().__init__(port=port, start_timeout=start_timeout)
        self.use_template = use_template
        self.user = user
        self.dbname = dbname
        self.max_connections = max_connections
        self.settings = dict(settings or {})
        self._bindir = Path(bindir) if bindir is not None else None
        self._run_as: pwd.struct_passwd | None = None

    @property
    def bindir(self) -> Path:
        if self._bindir is None:
            self._bindir = find_postgres_bindir()
        return self._bindir

    @property
    def datadir(self) -> Path:
        return self.tmpdir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.tmpdir

    @property
    def url(self) -> str:
        """SQLAlchemy URL: ``postgresql+psycopg://user@127.0.0.1:PORT/dbname``."""
        return self.url_for(self.dbname)

    @property
    def dsn(self) -> str:
        """libpq / psycopg URL: ``postgresql://user@127.0.0.1:PORT/dbname``."""
        return self.dsn_for(self.dbname)

    def url_for(self, dbname: str) -> str:
        return f"postgresql+psycopg://{self.user}@{HOST}:{self.port}/{dbname}"

    def dsn_for(self, dbname: str) -> str:
        return f"postgresql://{self.user}@{HOST}:{self.port}/{dbname}"

    def create_database(self, dbname: str) -> None:
        """Create another database on this server."""
        self._client(["createdb", "-h", HOST, "-p", str(self.port), "-U", self.user, dbname])

    # -- Server hooks

    def _find_binaries(self) -> None:
        for tool in ("initdb", "postgres"):
            if not (self.bindir / tool).is_file():
                raise ServerUnavailable(f"PostgreSQL tool missing: {self.bindir / tool}")
        if os.geteuid() == 0 and self._run_as is None:
            self._run_as = self._unprivileged_user()

    @staticmethod
    def _unprivileged_user() -> pwd.struct_passwd:
        for candidate in ("postgres", "nobody"):
            try:
                entry = pwd.getpwnam(candidate)
            except KeyError:
                continue
            if entry.pw_uid != 0:
                return entry
        raise ServerUnavailable(
            "running as root, and PostgreSQL refuses root: no `postgres` (or `nobody`) user"
        )

    def _make_tmpdir(self) -> Path:
        parent = None
        if self._run_as is not None:
            # The postgres user must be able to reach the directory: skip a private TMPDIR.
            default = Path(tempfile.gettempdir())
            if not os.stat(default).st_mode & 0o001:
                parent = "/tmp"
        path = Path(tempfile.mkdtemp(prefix="test-postgres-", dir=parent))
        if self._run_as is not None:
            os.chown(path, self._run_as.pw_uid, self._run_as.pw_gid)
        return path

    def _popen_kwargs(self) -> dict[str, Any]:
        env: dict[str, str] = {}
        kwargs: dict[str, Any] = {}
        if self._run_as is not None:
            kwargs.update(user=self._run_as.pw_uid, group=self._run_as.pw_gid, extra_groups=[])
            env.update(HOME=str(self.tmpdir), USER=self._run_as.pw_name)
            env["LOGNAME"] = self._run_as.pw_name
        kwargs["env"] = _clean_env(env)
        return kwargs

    def _init_data(self) -> None:
        if not self.use_template:
            self._initdb(self.datadir)
            return
        # initdb takes over a second here; a copy of a cluster made once per process, 0.2 s.
        key = (str(self.bindir), self.user, self._run_as.pw_uid if self._run_as else None)
        with _templates_lock:
            template = _templates.get(key)
            if template is None or not template.is_dir():
                holder = self._make_tmpdir()
                try:
                    self._initdb(holder / "data", cwd=holder)
                except BaseException:
                    shutil.rmtree(holder, ignore_errors=True)
                    raise
                template = _templates[key] = holder / "data"
        shutil.copytree(template, self.datadir, symlinks=True)
        if self._run_as is not None:
            uid, gid = self._run_as.pw_uid, self._run_as.pw_gid
            for root, dirs, files in os.walk(self.datadir):
                os.chown(root, uid, gid)
                for entry in (*dirs, *files):
                    os.chown(os.path.join(root, entry), uid, gid, follow_symlinks=False)

    def _initdb(self, datadir: Path, cwd: Path | None = None) -> None:
        cmd = [
            str(self.bindir / "initdb"),
            "-D", str(datadir),
            "--auth=trust",
            "-U", self.user,
            "-E", "UTF8",
            "--locale=C",
            "--no-sync",
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(cmd)}\n".encode())
            log.flush()
            done = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd or self.tmpdir,
                timeout=120,
                check=False,
                **self._popen_kwargs(),
            )
        if done.returncode != 0:
            raise ServerUnavailable(
                f"initdb failed (code {done.returncode}); log {self.log_path}:\n"
                f"{_log_tail(self.log_path)}"
            )

    def _command(self) -> list[str]:
        settings = {
            "listen_addresses": HOST,
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "max_connections": str(self.max_connections),
            "fsync": "off",
            "synchronous_commit": "on",
            "full_page_writes": "off",
            "logging_collector": "off",
            "log_min_messages": "warning",
            **self.settings,
        }
        cmd = [str(self.bindir / "postgres"), "-D", str(self.datadir)]
        for key, value in settings.items():
            cmd += ["-c", f"{key}={value}"]
        return cmd

    def _ready(self) -> bool:
        if not _pg_accepts(self.port, self.user):
            return False
        isready = self.bindir / "pg_isready"
        if not isready.is_file():
            return True
        done = subprocess.run(
            [str(isready), "-q", "-h", HOST, "-p", str(self.port), "-U", self.user,
             "-d", "postgres", "-t", "2"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_clean_env(),
            timeout=10,
            check=False,
        )  # fmt: skip
        return done.returncode == 0

    def _after_first_start(self) -> None:
        if self.dbname != "postgres":
            self.create_database(self.dbname)

    def _client(self, args: Sequence[str]) -> None:
        tool = self.bindir / args[0]
        if not tool.is_file():
            raise ServerUnavailable(f"PostgreSQL tool missing: {tool}")
        done = subprocess.run(
            [str(tool), *args[1:]],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=_clean_env(),
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            out = (done.stdout + done.stderr).decode(errors="replace").strip()
            raise ServerUnavailable(f"{args[0]} failed (code {done.returncode}): {out}")


def _pg_accepts(port: int, user: str, timeout: float = 2.0) -> bool:
    """Whether PostgreSQL on 127.0.0.1:port completes a startup handshake (wire protocol 3.0)."""
    params = b"".join(f"{k}\0{v}\0".encode() for k, v in (("user", user), ("database", "postgres")))
    body = struct.pack("!I", 196608) + params + b"\0"
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            sock.sendall(struct.pack("!I", len(body) + 4) + body)
            head = _recv_exact(sock, 9)
            ok = head[:1] == b"R" and struct.unpack("!I", head[5:9])[0] == 0
            with contextlib.suppress(OSError):
                sock.sendall(b"X" + struct.pack("!I", 4))
            return ok
    except OSError:
        return False


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


# --- Redis -------------------------------------------------------------------------------------


class RedisServer(Server):
    """A Redis server with an append-only file (fsync always), so a restart keeps the data.

    ``url`` is ``redis://127.0.0.1:PORT/0``; ``url_for(db)`` picks another database number.
    """

    name = "redis"
    stop_signal = signal.SIGTERM

    def __init__(
        self,
        *,
        port: int | None = None,
        binary: Path | str | None = None,
        args: Sequence[str] = (),
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        super().__init__(port=port, start_timeout=start_timeout)
        self._binary = Path(binary) if binary is not None else None
        self.extra_args = list(args)

    @property
    def binary(self) -> Path:
        if self._binary is None:
            self._binary = find_redis_server()
        return self._binary

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return self.url_for(0)

    def url_for(self, db: int) -> str:
        return f"redis://{HOST}:{self.port}/{db}"

    def _find_binaries(self) -> None:
        if not self.binary.is_file():
            raise ServerUnavailable(f"redis-server missing: {self.binary}")

    def _command(self) -> list[str]:
        return [
            str(self.binary),
            "--port", str(self.port),
            "--bind", HOST,
            "--dir", str(self.tmpdir),
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--logfile", "",
            *self.extra_args,
        ]  # fmt: skip

    def _ready(self) -> bool:
        return _redis_ping(self.port)


def _redis_ping(port: int, timeout: float = 2.0) -> bool:
    """Whether Redis on 127.0.0.1:port answers PING with +PONG (not -LOADING, say)."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = sock.recv(256)
                if not chunk:
                    break
                reply += chunk
            return reply.startswith(b"+PONG")
    except OSError:
        return False


# --- Redis Cluster -----------------------------------------------------------------------------

CLUSTER_SLOTS = 16384


class RedisClusterServer:
    """A Redis Cluster of ``masters`` masters and no replicas: one `RedisServer` per master in
    cluster mode (client and bus ports free on 127.0.0.1, no persistence), the hash slots split
    evenly, joined with ``CLUSTER MEET`` and waited for until every node says
    ``cluster_state:ok``. Same life cycle as a `Server` (``start``, ``close``, ``with``).

    ``url`` is the first master's ``redis://127.0.0.1:PORT/0``, enough for
    ``redis.cluster.RedisCluster.from_url`` to discover the others; ``nodes`` are the masters.
    """

    name = "redis-cluster"

    def __init__(self, *, masters: int = 3, start_timeout: float = START_TIMEOUT) -> None:
        if masters < 1:
            raise ValueError("a cluster needs at least one master")
        self.masters = masters
        self.start_timeout = start_timeout
        self.nodes: list[RedisServer] = []
        self._bus_ports: list[int] = []
        self._closed = False
        self.last_start_seconds: float | None = None

    @property
    def running(self) -> bool:
        return bool(self.nodes) and all(node.running for node in self.nodes)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0`` of the first master (a startup node)."""
        if not self.nodes:
            raise RuntimeError("the cluster has no nodes yet: call start() first")
        return self.nodes[0].url

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def start(self) -> Self:
        """Start the masters, assign the slots, join them and wait for ``cluster_state:ok``."""
        if self._closed:
            raise RuntimeError("the cluster was closed; make a new one")
        if self.running:
            return self
        began = time.monotonic()
        try:
            if not self.nodes:
                for _ in range(self.masters):
                    self.nodes.append(self._node())
                for node in self.nodes:
                    node.start()
                self._join()
            else:  # stopped nodes keep their nodes.conf: they find each other again
                for node in self.nodes:
                    node.start()
            self._wait_ok()
        except BaseException:
            for node in self.nodes:
                node.stop(kill=True)
            raise
        self.last_start_seconds = time.monotonic() - began
        return self

    def stop(self, *, kill: bool = False) -> None:
        for node in self.nodes:
            node.stop(kill=kill)

    def close(self) -> None:
        """Stop every master for good and remove their directories."""
        self._closed = True
        for node in self.nodes:
            node.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RedisClusterServer {HOST}:{self.ports if self.nodes else '?'} {state}>"

    def _node(self) -> RedisServer:
        # The bus port is chosen too: the default, port + 10000, may be taken or out of range.
        self._bus_ports.append(free_port())
        args = [
            "--cluster-enabled", "yes",
            "--cluster-port", str(self._bus_ports[-1]),
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "5000",
            "--cluster-require-full-coverage", "yes",
            "--appendonly", "no",
        ]  # fmt: skip
        return RedisServer(args=args, start_timeout=self.start_timeout)

    def _join(self) -> None:
        share, extra = divmod(CLUSTER_SLOTS, len(self.nodes))
        first = 0
        for index, node in enumerate(self.nodes):
            count = share + (1 if index < extra else 0)
            slots = [str(slot) for slot in range(first, first + count)]
            _redis_call(node.port, "CLUSTER", "ADDSLOTS", *slots)
            first += count
        for node, bus_port in zip(self.nodes[1:], self._bus_ports[1:], strict=True):
            meet = ("CLUSTER", "MEET", HOST, str(node.port), str(bus_port))
            _redis_call(self.nodes[0].port, *meet)

    def _wait_ok(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        want = {"cluster_state": "ok", "cluster_slots_ok": str(CLUSTER_SLOTS)}
        want["cluster_known_nodes"] = str(len(self.nodes))
        infos: list[dict[str, str]] = []
        while True:
            infos = [_cluster_info(node.port) for node in self.nodes]
            if all(want.items() <= info.items() for info in infos):
                return
            if time.monotonic() > deadline:
                raise ServerUnavailable(
                    f"the Redis cluster on ports {self.ports} did not reach cluster_state:ok "
                    f"within {self.start_timeout:.0f} s: {infos}"
                )
            time.sleep(0.05)


def _cluster_info(port: int) -> dict[str, str]:
    reply = _redis_call(port, "CLUSTER", "INFO")
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def _redis_call(port: int, *args: str, timeout: float = 5.0) -> bytes | int | str | None:
    """One command to Redis on 127.0.0.1:port in RESP; an error reply is `ServerUnavailable`."""
    payload = f"*{len(args)}\r\n".encode() + b"".join(
        f"${len(arg.encode())}\r\n{arg}\r\n".encode() for arg in args
    )
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(payload)
        reader = sock.makefile("rb")
        line = reader.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise ServerUnavailable(f"Redis on port {port} refused {args[:2]}: {rest.decode()}")
        if kind == b"+":
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else reader.read(size + 2)[:size]
        raise ServerUnavailable(f"unexpected reply from Redis on port {port}: {line!r}")
