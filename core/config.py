"""One typed settings object for every component.

Every store and the broker is named by a URL/DSN. When a URL is not set, the embedded default
is used: local servers on 127.0.0.1 (ports below) and engines whose data lives under `data_dir`.
Switching to production is only a matter of setting the URLs (see docker-compose.yml).

Sources, highest priority first: keyword arguments, environment variables (`MEMSTREAM_*`, nested
fields with `__`, e.g. `MEMSTREAM_CHAT_MODEL__BASE_URL`), a TOML file (`MEMSTREAM_CONFIG`, else
`./memstream.toml` when present), defaults.

Secrets (DSNs that may carry passwords, API keys) are `SecretStr`: they never appear in reprs or
logs; `Settings.describe()` gives a loggable view with credentials masked.
"""

from __future__ import annotations

import os
import re
from datetime import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from core.ids import ENVIRONMENT
from core.sharding.shards import MAX_SHARDS, check_shard, shard_journal_url
from core.sql.config import SqlSettings

_TOPIC_PREFIX_RE = re.compile(r"[A-Za-z0-9._-]{1,100}")


class S3Settings(BaseModel):
    """Credentials and endpoint for S3-compatible object storage (journal, summaries)."""

    endpoint: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    allow_http: bool = False

    def store_config(self) -> dict[str, str]:
        """The S3 options that SlateDB's and obstore's S3 builders both take under these names:
        `region`, plus `endpoint`, `access_key_id` and `secret_access_key` when set (unset ones
        fall back to the standard `AWS_*` environment variables). `allow_http` is not included:
        each builder takes it in its own way."""
        config = {"region": self.region}
        if self.endpoint:
            config["endpoint"] = self.endpoint
        if self.access_key_id:
            config["access_key_id"] = self.access_key_id
        if self.secret_access_key is not None:
            config["secret_access_key"] = self.secret_access_key.get_secret_value()
        return config


class ModelSettings(BaseModel):
    """A model endpoint. `provider="offline"` needs no network and no weights."""

    provider: Literal["offline", "openai"] = "offline"
    model: str = "offline"
    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = 30.0
    max_retries: int = 3


class EmbeddedPorts(BaseModel):
    """Ports of the embedded servers, all bound to 127.0.0.1."""

    broker: int = 19092
    postgres: int = 15432
    redis: int = 16379


def _config_file() -> Path | None:
    explicit = os.environ.get("MEMSTREAM_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise FileNotFoundError(
                f"MEMSTREAM_CONFIG points to {path}, which does not exist: create it or unset the variable"
            )
        return path
    local = Path("memstream.toml")
    return local if local.is_file() else None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MEMSTREAM_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    data_dir: Path = Path(".memstream")
    environment: str = "dev"
    topic_prefix: str = ""
    topic_replication_factor: int | None = Field(
        default=None,
        ge=1,
        description="replication factor of topics created by `topics apply`; "
        "default: the one declared in topics.yaml (1, for the embedded single broker)",
    )

    broker_url: str | None = Field(default=None, description="kafka://host:port[,host:port]")
    postgres_dsn: SecretStr | None = None
    redis_url: SecretStr | None = None
    qdrant_url: str | None = Field(default=None, description="edge://DIR (embedded) or http(s)://host:port")
    qdrant_api_key: SecretStr | None = Field(default=None, description="API key of a Qdrant server")
    clickhouse_dsn: SecretStr | None = Field(default=None, description="chdb:///DIR or http(s)://...")
    clickhouse_database: str = Field(
        default="memstream",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$",
        description="ClickHouse database of the transcript projection (created if missing)",
    )
    object_store_url: str | None = Field(default=None, description="file:///DIR or s3://bucket/prefix")
    journal_url: str | None = Field(default=None, description="file:///DIR or s3://bucket/prefix")
    s3: S3Settings = S3Settings()

    api_host: str = "127.0.0.1"
    api_port: int = 8080
    access_log: bool = Field(
        default=True,
        description="one log line per API request (uvicorn's access log, credentials redacted)",
    )
    admin_token: SecretStr | None = Field(
        default=None,
        description="bearer token of the node's admin API (/admin/v1); when unset the node generates "
        "one in {data_dir}/admin.token (mode 0600), which the CLI on the same data dir reads",
    )
    ports: EmbeddedPorts = EmbeddedPorts()
    sql: SqlSettings = Field(
        default=SqlSettings(),
        description="the read-only SQL endpoint for data teams (ClickHouse's HTTP interface, data-access "
        "keys only): `MEMSTREAM_SQL__PORT`, `MEMSTREAM_SQL__MAX_EXECUTION_TIME_S`, ...",
    )

    chat_model: ModelSettings = ModelSettings()
    embedding_model: ModelSettings = ModelSettings(model="all-MiniLM-L6-v2-q8")

    hygiene_at: time = Field(default=time(3, 0), description="UTC time of the daily memory hygiene pass")
    stop_deadline_s: float = Field(
        default=8.0,
        gt=0,
        description="after SIGINT/SIGTERM the node stops in order, or exits anyway after this long "
        "(acknowledged appends are durable either way)",
    )

    # process layout
    node_processors: list[str] | None = Field(
        default=None,
        description="the processors the node process hosts (default: every registered one); the "
        "others run in `memstream worker` processes. `memstream up` sets it to the processors "
        "that must stay in the node and runs the thread-memory ones in one worker",
    )
    transcript_vectors: bool = Field(
        default=False,
        description="the semantic signal of transcript search (opt-in): the `transcript-vectors` "
        "processor embeds every user/assistant message with the embedding model (~6.5 ms of CPU "
        "per message offline) and `journal_message_search` re-orders its BM25 top 50 by BM25 and cosine "
        "to the query; off: nothing is embedded and search ranks by BM25 alone",
    )
    metrics_refresh_s: float = Field(
        default=15.0,
        gt=0,
        description="how often the node reads the figures of /metrics that live outside it (every "
        "processor's consumer lag, dead letters, summaries written, relay lag)",
    )
    worker_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="CPU niceness `memstream up` gives its worker (the thread-memory processors): on a "
        "machine it shares with the node, appends and contexts are served first and the worker uses "
        "the CPU they leave, catching up after bursts (0: same priority as the node)",
    )
    journal_reader_poll_ms: int = Field(
        default=100,
        ge=1,
        description="how often a worker's read-only view of the journal looks for new durable writes",
    )
    api_key_cache_ttl_s: float = Field(
        default=5.0,
        ge=0,
        description="how long a node may answer API key lookups from memory (0: never); a revoked key "
        "is refused on every node once Postgres announces it, and after this long at the latest",
    )
    thread_cache_ttl_s: float = Field(
        default=5.0,
        ge=0,
        description="how long a node may answer thread lookups (metadata: the context window) from "
        "memory (0: never); a change shows on every node once Postgres announces it, and after this "
        "long at the latest",
    )
    agent_cache_ttl_s: float = Field(
        default=5.0,
        ge=0,
        description="how long a node may answer an agent's capability bindings from memory (0: never); "
        "a change made on the node shows at once, one made elsewhere once Postgres announces it, and "
        "after this long at the latest",
    )
    summary_cache_ttl_s: float = Field(
        default=5.0,
        ge=0,
        description="how long a node may answer a thread's summary from its own memory (0: never; the "
        "Redis cache stays in front of the object store either way); a new summary shows on every "
        "node once Postgres announces it, and after this long at the latest",
    )
    pinned_cache_ttl_s: float = Field(
        default=5.0,
        ge=0,
        description="how long a node may answer a user's pinned facts from memory (0: never); a change "
        "made on the node shows at once, one made elsewhere once Postgres announces it, and after "
        "this long at the latest",
    )

    journal_shards: int = Field(
        default=1,
        ge=1,
        le=MAX_SHARDS,
        description="how many journals (shards) the threads are spread over, each with its own "
        "writer and relay (`core.sharding.shards`); recorded in the journal on first start and "
        "fixed from then on: resharding is not supported",
    )

    membership: bool = Field(
        default=False,
        description="spread the journal shards over several nodes (issue 15): each node claims a "
        "share of them through leases in Postgres and forwards a thread's requests to its shard's "
        "owner; off: this node opens every shard (`memstream.sharding`)",
    )
    node_name: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._-]{1,100}$",
        description="with `membership`: this node's name (its id is the name and a random suffix per "
        "start); default: the host name",
    )
    advertised_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^/?#]+/?$",
        description="with `membership`: the base URL at which the other nodes reach this node's API "
        "(they forward requests there); default: http://api_host:api_port (loopback for a wildcard "
        "host, enough only when every node runs on one machine)",
    )
    projections_node: bool = Field(
        default=False,
        description="with `membership` and embedded projections (chdb, Qdrant Edge): this node hosts "
        "them (the projection processors, transcript search, memory recall, the agent tools, the "
        "SQL endpoint); the other nodes forward the agent surfaces to it. Exactly one node should "
        "have it. With ClickHouse and Qdrant servers every node hosts them and this is ignored",
    )

    # journal tuning
    journal_flush_interval_ms: int = 2
    journal_max_message_bytes: int = 1_000_000

    @field_validator("environment")
    @classmethod
    def _check_environment(cls, value: str) -> str:
        problem = ENVIRONMENT.problem(value)
        if problem is not None:
            raise ValueError(f"environment {problem}")
        return value

    @field_validator("topic_prefix")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        if value and not _TOPIC_PREFIX_RE.fullmatch(value):
            raise ValueError("topic_prefix may only contain A-Z, a-z, 0-9, '.', '_' and '-'")
        return value

    @model_validator(mode="after")
    def _check_shard_journals(self) -> Settings:
        if self.journal_shards > 1:
            shard_journal_url(self.journal, 1)  # a URL with no room for siblings: ValueError
        if self.membership and self.admin_token is None:
            raise ValueError(
                "membership needs the same admin token on every node (the nodes call each other's "
                "admin API): set MEMSTREAM_ADMIN_TOKEN"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = _config_file()
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    # ---- resolved component addresses (embedded defaults when unset) ----

    @property
    def data_path(self) -> Path:
        return self.data_dir.expanduser().resolve()

    @property
    def admin_token_path(self) -> Path:
        """Where the node keeps its generated admin token when `admin_token` is unset."""
        return self.data_path / "admin.token"

    @property
    def api_url(self) -> str:
        """The node's API as a client on this machine reaches it (a wildcard host means loopback)."""
        host = "127.0.0.1" if self.api_host in ("0.0.0.0", "", "::") else self.api_host
        return f"http://{host}:{self.api_port}"

    @property
    def sql_url(self) -> str:
        """The SQL endpoint as a client on this machine reaches it (a wildcard host means loopback)."""
        host = "127.0.0.1" if self.sql.host in ("0.0.0.0", "", "::") else self.sql.host
        return f"http://{host}:{self.sql.port}"

    @property
    def broker_bootstrap(self) -> str:
        """Bootstrap servers for Kafka clients, e.g. `127.0.0.1:19092`."""
        url = self.broker_url or f"kafka://127.0.0.1:{self.ports.broker}"
        return url.removeprefix("kafka://")

    @property
    def postgres(self) -> str:
        if self.postgres_dsn is not None:
            return self.postgres_dsn.get_secret_value()
        return f"postgresql://postgres@127.0.0.1:{self.ports.postgres}/memstream"

    @property
    def redis(self) -> str:
        if self.redis_url is not None:
            return self.redis_url.get_secret_value()
        return f"redis://127.0.0.1:{self.ports.redis}/0"

    @property
    def qdrant(self) -> str:
        return self.qdrant_url or f"edge://{self.data_path / 'qdrant'}"

    @property
    def clickhouse(self) -> str:
        if self.clickhouse_dsn is not None:
            return self.clickhouse_dsn.get_secret_value()
        return f"chdb://{self.data_path / 'clickhouse'}"

    @property
    def object_store(self) -> str:
        return self.object_store_url or f"file://{self.data_path / 'objects'}"

    @property
    def journal(self) -> str:
        """The journal URL of shard 0 (the whole journal when `journal_shards` is 1)."""
        return self.journal_url or f"file://{self.data_path / 'journal'}"

    def shard_journal(self, shard: int) -> str:
        """The journal URL of `shard` (`core.sharding.shards.shard_journal_url`)."""
        return shard_journal_url(self.journal, check_shard(shard, self.journal_shards))

    @property
    def projections_embedded(self) -> bool:
        """Whether ClickHouse or Qdrant is embedded (chdb, Qdrant Edge: open in one process only)."""
        return self.clickhouse.startswith("chdb://") or self.qdrant.startswith("edge://")

    @property
    def hosts_projections(self) -> bool:
        """Whether this node runs the projections and serves what reads them: always without
        `membership` or with servers only; with membership and embedded engines, the
        `projections_node` only."""
        return not self.membership or not self.projections_embedded or self.projections_node

    @property
    def node_url(self) -> str:
        """Where the other nodes reach this node's API (`advertised_url`, else `api_url`)."""
        return (self.advertised_url or self.api_url).rstrip("/")

    def topic(self, name: str) -> str:
        """The broker-side name of a topic declared in topics.yaml."""
        return f"{self.topic_prefix}{name}"

    @property
    def uses_embedded_services(self) -> dict[str, bool]:
        """Which of the local servers `memstream up` must start."""
        return {
            "broker": self.broker_url is None,
            "postgres": self.postgres_dsn is None,
            "redis": self.redis_url is None,
        }

    def describe(self) -> dict[str, Any]:
        """A loggable view of the configuration: credentials in URLs are masked."""
        return {
            "data_dir": str(self.data_path),
            "environment": self.environment,
            "topic_prefix": self.topic_prefix,
            "broker": self.broker_bootstrap,
            "postgres": mask_url(self.postgres),
            "redis": mask_url(self.redis),
            "qdrant": mask_url(self.qdrant),
            "clickhouse": mask_url(self.clickhouse),
            "object_store": mask_url(self.object_store),
            "journal": mask_url(self.journal),
            "journal_shards": self.journal_shards,
            "membership": (
                f"on ({self.node_url}{', projections' if self.projections_node else ''})"
                if self.membership
                else "off"
            ),
            "chat_model": f"{self.chat_model.provider}:{self.chat_model.model}",
            "embedding_model": f"{self.embedding_model.provider}:{self.embedding_model.model}",
            "api": f"http://{self.api_host}:{self.api_port}",
            "sql": f"http://{self.sql.host}:{self.sql.port}" if self.sql.enabled else "off",
        }


_CREDENTIALS_RE = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:@/]*):[^@/]*@")


def mask_url(url: str) -> str:
    """`postgresql://u:secret@h/db` -> `postgresql://u:***@h/db`; URLs without credentials unchanged."""
    return _CREDENTIALS_RE.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
