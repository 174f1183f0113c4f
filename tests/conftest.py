"""Shared fixtures: real embedded servers for the whole session, isolated names for every test.

- Tier 1 (default): Tansu broker, PostgreSQL and Redis from the pip wheels.
- Tier 2 (`--kafka`, or `scripts/test --kafka`): tests using the `broker` fixture also run against a
  real Apache Kafka (KRaft) broker started from Maven Central jars (scripts/kafka_broker.py).

Every test gets a random topic prefix (so random topic names and consumer groups) and its own
Postgres database, so tests never share state. Tests that need them also get a migrated Postgres
pool (`pool`), a SlateDB journal in their tmp dir (`journal`) and a fresh bucket on a moto S3
server (`s3_bucket`, reached with `s3_settings` or `s3_client`).

ClickHouse (chdb, in-process): a process can have only one chdb data path open at a time (opening
another while a client is open raises), and another process cannot open a path this one holds. So
the session has ONE chdb path (`chdb_path`, held open by `chdb_client`), and each test gets its own
random database on it: `transcript_store` (a `ClickHouseTranscriptStore`, schema created) or
`transcript_settings` (`settings` with `clickhouse_dsn`/`clickhouse_database` set, for code that
builds its store from settings in this process). A node started as a subprocess must use its own
path (the default under its data dir), never `chdb_path`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pydantic import SecretStr

from core.config import S3Settings, Settings
from memstream.embedded import services
from memstream.embedded.process import ManagedProcess, free_port
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool
from sinks.slatedb.journal import SlateJournal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kafka",
        action="store_true",
        help="also run the broker-parametrised tests against a real Apache Kafka broker (tier 2)",
    )


ENGINE_FIXTURES = frozenset(
    {
        "embedded_stack",
        "tansu_bootstrap",
        "broker",
        "kafka_bootstrap",
        "s3_endpoint",
        "chdb_client",
        "chdb_path",
        "own_redis",
    }
)
"""Fixtures that start a server (or need one), directly or through the fixtures they use. `broker`
is listed itself: it asks for its tier with `request.getfixturevalue`, which `item.fixturenames`
does not show."""


@pytest.hookimpl(tryfirst=True)  # before `-m` selects: the `unit` mark must already be there
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the fast tier, then leaves out the real Apache Kafka tier unless `--kafka`.

    A test is `unit` (`pytest -m unit`) when none of the fixtures it uses starts a server and it is
    not marked `engine` (a test that starts servers in its body must be marked so by hand;
    `_unit_tests_start_no_server` catches one that is not).
    """
    for item in items:
        if item.get_closest_marker("engine") is None and ENGINE_FIXTURES.isdisjoint(
            getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.unit)
    if config.getoption("--kafka"):
        return
    kafka = [item for item in items if item.get_closest_marker("kafka")]
    if kafka:
        config.hook.pytest_deselected(items=kafka)
        items[:] = [item for item in items if not item.get_closest_marker("kafka")]
        config._memstream_kafka_deselected = len(kafka)  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    count = getattr(config, "_memstream_kafka_deselected", 0)
    if count:
        terminalreporter.write_line(
            f"{count} tests of the real Apache Kafka tier were not run: run them with `scripts/test --kafka`."
        )


@pytest.fixture(autouse=True)
def _unit_tests_start_no_server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `unit` test that starts a server in this process fails and says how to fix it."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(self: ManagedProcess) -> None:
        raise AssertionError(
            f"this test starts a server ({self.name}): mark it `@pytest.mark.engine` "
            "so it stays out of the fast tier (`pytest -m unit`)"
        )

    monkeypatch.setattr(ManagedProcess, "start", refuse)


@dataclass
class EmbeddedStack:
    data_dir: Path
    broker: str
    postgres_port: int
    redis_port: int

    def postgres_dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.postgres_port}/{database}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"


@pytest.fixture(scope="session")
def embedded_stack() -> Iterator[EmbeddedStack]:
    """The real embedded servers, started once per test session on free ports."""
    data_dir = Path(tempfile.mkdtemp(prefix="memstream-test-", dir="/tmp"))
    broker_port, pg_port, redis_port = free_port(), free_port(), free_port()
    procs: list[ManagedProcess] = [
        services.broker_process(data_dir, broker_port),
        services.postgres_process(data_dir, pg_port),
        services.redis_process(data_dir, redis_port),
    ]
    started: list[ManagedProcess] = []
    try:
        for proc in procs:
            proc.start()
            started.append(proc)
        yield EmbeddedStack(data_dir, f"127.0.0.1:{broker_port}", pg_port, redis_port)
    finally:
        for proc in reversed(started):
            proc.stop(sig=services.POSTGRES_STOP_SIGNAL if proc.name == "postgres" else 15)
        shutil.rmtree(data_dir, ignore_errors=True)  # every session's servers: ~60 MB each


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A real Apache Kafka broker (tier 2), started on first use."""
    from kafka_broker import KafkaBroker  # scripts/kafka_broker.py

    work = Path(tempfile.mkdtemp(prefix="memstream-kafka-", dir="/tmp"))
    broker = KafkaBroker(work)
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def tansu_bootstrap(embedded_stack: EmbeddedStack) -> str:
    return embedded_stack.broker


@pytest.fixture(params=["tansu", pytest.param("kafka", marks=pytest.mark.kafka)])
def broker(request: pytest.FixtureRequest) -> str:
    """Bootstrap servers of each broker tier: Tansu always, real Apache Kafka with --kafka."""
    if request.param == "tansu":
        return str(request.getfixturevalue("tansu_bootstrap"))
    return str(request.getfixturevalue("kafka_bootstrap"))


@pytest.fixture
def topic_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}."


@pytest.fixture
def pg_dsn(embedded_stack: EmbeddedStack) -> Iterator[str]:
    """A fresh, empty database on the embedded PostgreSQL server, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    psql = [
        str(services.postgres_bin_dir() / "psql"),
        "-h",
        "127.0.0.1",
        "-p",
        str(embedded_stack.postgres_port),
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-qc",
    ]
    subprocess.run([*psql, f'CREATE DATABASE "{name}"'], check=True, capture_output=True)
    try:
        yield embedded_stack.postgres_dsn(name)
    finally:
        subprocess.run([*psql, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], capture_output=True)


@pytest.fixture
def redis_url(embedded_stack: EmbeddedStack) -> str:
    return embedded_stack.redis_url


@pytest.fixture
def base_settings(tmp_path: Path, topic_prefix: str) -> Settings:
    """Settings with an isolated data dir and topic prefix that reach no server (for tests of
    configuration and of what happens when nothing answers)."""
    return Settings(data_dir=tmp_path / "data", environment="test", topic_prefix=topic_prefix)


@pytest.fixture
def settings(base_settings: Settings, tansu_bootstrap: str, pg_dsn: str, redis_url: str) -> Settings:
    """Settings pointing at the embedded test servers, with isolated data dir, database and topics."""
    return Settings(
        data_dir=base_settings.data_dir,
        environment=base_settings.environment,
        topic_prefix=base_settings.topic_prefix,
        broker_url=f"kafka://{tansu_bootstrap}",
        postgres_dsn=pg_dsn,
        redis_url=redis_url,
    )


@pytest.fixture
async def pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on the test's fresh database with the schema migrated."""
    pool = await create_pool(pg_dsn)
    await migrate(pool)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[SlateJournal]:
    """A real SlateDB journal in the test's tmp dir (`file://{tmp_path}/journal`), 1 ms WAL flushes."""
    journal = await SlateJournal.open(f"file://{tmp_path}/journal", flush_interval_ms=1)
    try:
        yield journal
    finally:
        await journal.close()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3 API on 127.0.0.1 (moto's server), started on first use."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_settings(s3_endpoint: str) -> S3Settings:
    """Settings to reach the moto server (test credentials, plain HTTP)."""
    return S3Settings(
        endpoint=s3_endpoint,
        region="us-east-1",
        access_key_id="test",
        secret_access_key=SecretStr("test"),
        allow_http=True,
    )


@pytest.fixture
def s3_client(s3_endpoint: str) -> Any:
    """A boto3 S3 client of the moto server, to prepare and inspect objects."""
    import boto3  # type: ignore[import-untyped]

    return boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


@pytest.fixture
def s3_bucket(s3_client: Any) -> str:
    """A fresh, empty bucket on the moto server."""
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture(scope="session")
def chdb_path() -> Path:
    """The session's single chdb data path (see the module doc)."""
    return Path(tempfile.mkdtemp(prefix="memstream-chdb-", dir="/tmp"))


@pytest.fixture(scope="session")
def chdb_client(chdb_path: Path) -> Iterator[Any]:
    """A clickhouse-connect client on `chdb_path`, open for the whole session (it pins the engine
    to that path; also handy to inspect tables)."""
    import clickhouse_connect

    client = clickhouse_connect.get_client(dsn=f"chdb://{chdb_path}")
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def clickhouse_database(chdb_client: Any) -> Iterator[str]:
    """A fresh database name on the session's chdb path, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        chdb_client.command(f"DROP DATABASE IF EXISTS {name} SYNC")


@pytest.fixture
def clickhouse_dsn(chdb_path: Path, chdb_client: Any) -> str:
    return f"chdb://{chdb_path}"


@pytest.fixture
async def transcript_store(
    clickhouse_dsn: str, clickhouse_database: str
) -> AsyncIterator[ClickHouseTranscriptStore]:
    """A transcript store on its own fresh database of the session's chdb path, schema created."""
    store = ClickHouseTranscriptStore(clickhouse_dsn, database=clickhouse_database)
    await store.ensure_schema()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def transcript_settings(settings: Settings, clickhouse_dsn: str, clickhouse_database: str) -> Settings:
    """`settings` whose transcript store is a fresh database on the session's chdb path (for code
    running in this process; a subprocess node must keep its own path)."""
    return settings.model_copy(
        update={"clickhouse_dsn": SecretStr(clickhouse_dsn), "clickhouse_database": clickhouse_database}
    )


@pytest.fixture(scope="session")
def embedder() -> OfflineMiniLM:
    """The offline MiniLM, loaded once for the session."""
    model = OfflineMiniLM()
    model.load()
    return model


@pytest.fixture(scope="session")
def sparse() -> Bm25Sparse:
    return Bm25Sparse()
