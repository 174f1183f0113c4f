"""Settings: embedded defaults, env vars, a TOML file, precedence, and secrets that never show."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from core.config import S3Settings, Settings, mask_url


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("MEMSTREAM_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_embedded_defaults_live_under_the_data_dir(tmp_path: Path) -> None:
    s = Settings(data_dir=tmp_path / "d")
    assert s.broker_bootstrap == "127.0.0.1:19092"
    assert s.postgres == "postgresql://postgres@127.0.0.1:15432/memstream"
    assert s.journal == f"file://{tmp_path / 'd' / 'journal'}"
    assert s.object_store.startswith(f"file://{tmp_path / 'd'}")
    assert all(s.uses_embedded_services.values())


def test_env_vars_and_nested_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTREAM_BROKER_URL", "kafka://k1:9092,k2:9092")
    monkeypatch.setenv("MEMSTREAM_S3__ENDPOINT", "http://minio:9000")
    monkeypatch.setenv("MEMSTREAM_PORTS__REDIS", "7000")
    monkeypatch.setenv("MEMSTREAM_TOPIC_PREFIX", "staging.")
    s = Settings()
    assert s.broker_bootstrap == "k1:9092,k2:9092"
    assert s.s3.endpoint == "http://minio:9000"
    assert s.redis == "redis://127.0.0.1:7000/0"
    assert s.topic("journal.messages") == "staging.journal.messages"
    assert s.uses_embedded_services == {"broker": False, "postgres": True, "redis": True}


def test_toml_file_below_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "conf.toml"
    config.write_text('environment = "staging"\napi_port = 9999\n[chat_model]\nprovider = "openai"\n')
    monkeypatch.setenv("MEMSTREAM_CONFIG", str(config))
    monkeypatch.setenv("MEMSTREAM_API_PORT", "8111")
    s = Settings()
    assert s.environment == "staging"
    assert s.chat_model.provider == "openai"
    assert s.api_port == 8111  # env wins over the file


def test_local_memstream_toml_is_read(tmp_path: Path) -> None:
    (tmp_path / "memstream.toml").write_text('environment = "local"\n')
    assert Settings().environment == "local"


def test_missing_config_file_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEMSTREAM_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(FileNotFoundError, match="MEMSTREAM_CONFIG points to"):
        Settings()


@pytest.mark.parametrize(
    ("field", "value"), [("environment", "Prod!"), ("environment", ""), ("topic_prefix", "a b")]
)
def test_invalid_values_are_rejected(field: str, value: str) -> None:
    with pytest.raises(ValidationError, match=field):
        Settings(**{field: value})


def test_unknown_settings_are_rejected() -> None:
    with pytest.raises(ValidationError, match="postgres_url"):
        Settings(postgres_url="postgresql://x")  # type: ignore[call-arg]


def test_secrets_never_show() -> None:
    s = Settings(
        postgres_dsn="postgresql://app:hunter2@db/memstream",
        redis_url="redis://:hunter3@cache:6379/0",
        clickhouse_dsn="http://ch:hunter4@ch:8123/db",
        s3={"secret_access_key": "hunter5"},
        chat_model={"provider": "openai", "api_key": "hunter6"},
    )
    shown = repr(s) + str(s.describe()) + s.model_dump_json()
    for secret in ("hunter2", "hunter3", "hunter4", "hunter5", "hunter6"):
        assert secret not in shown
    assert s.postgres == "postgresql://app:hunter2@db/memstream"  # still usable by the code


def test_mask_url() -> None:
    assert mask_url("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert mask_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert mask_url("file:///tmp/x") == "file:///tmp/x"


def test_s3_store_config_names_only_what_is_set() -> None:
    assert S3Settings().store_config() == {"region": "us-east-1"}
    full = S3Settings(
        endpoint="http://minio:9000",
        region="eu-west-1",
        access_key_id="AK",
        secret_access_key=SecretStr("SK"),
        allow_http=True,
    )
    assert full.store_config() == {
        "region": "eu-west-1",
        "endpoint": "http://minio:9000",
        "access_key_id": "AK",
        "secret_access_key": "SK",
    }


def test_topic_replication_factor_must_be_positive() -> None:
    assert Settings(topic_replication_factor=3).topic_replication_factor == 3
    with pytest.raises(ValidationError, match="topic_replication_factor"):
        Settings(topic_replication_factor=0)


def test_journal_shards_default_to_one_and_name_a_journal_each(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert settings.journal_shards == 1
    assert settings.shard_journal(0) == settings.journal
    with pytest.raises(ValueError, match="shard 1 is not one of the 1 journal shards"):
        settings.shard_journal(1)
    three = Settings(data_dir=tmp_path, journal_shards=3, journal_url="s3://bucket/journal")
    assert [three.shard_journal(k) for k in range(3)] == [
        "s3://bucket/journal",
        "s3://bucket/journal-shard-1",
        "s3://bucket/journal-shard-2",
    ]
    assert three.describe()["journal_shards"] == 3


@pytest.mark.parametrize("shards", [0, 257])
def test_journal_shards_out_of_range_are_refused(shards: int) -> None:
    with pytest.raises(ValidationError, match="journal_shards"):
        Settings(journal_shards=shards)


def test_several_shards_need_a_journal_url_with_room_for_siblings() -> None:
    with pytest.raises(ValidationError, match="no directory or prefix"):
        Settings(journal_shards=2, journal_url="s3://bucket")
    assert Settings(journal_shards=1, journal_url="s3://bucket").journal == "s3://bucket"


def test_membership_is_off_by_default_and_every_node_then_hosts_the_projections(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, api_host="0.0.0.0", api_port=9000)
    assert not settings.membership and settings.hosts_projections
    assert settings.describe()["membership"] == "off"
    assert settings.node_url == "http://127.0.0.1:9000"  # a wildcard host means loopback
    assert settings.projections_embedded  # chdb and Qdrant Edge by default


def test_with_membership_only_the_projections_node_hosts_embedded_projections(tmp_path: Path) -> None:
    other = Settings(
        data_dir=tmp_path, membership=True, advertised_url="http://node-2:8080/", admin_token=SecretStr("t")
    )
    assert not other.hosts_projections
    assert other.node_url == "http://node-2:8080"
    assert other.describe()["membership"] == "on (http://node-2:8080)"
    host = other.model_copy(update={"projections_node": True})
    assert host.hosts_projections
    assert host.describe()["membership"] == "on (http://node-2:8080, projections)"
    servers = other.model_copy(
        update={
            "clickhouse_dsn": SecretStr("http://clickhouse:8123"),
            "qdrant_url": "http://qdrant:6333",
        }
    )
    assert not servers.projections_embedded and servers.hosts_projections  # servers: every node


@pytest.mark.parametrize("url", ["node-2:8080", "http://node-2:8080/api", "ftp://node-2"])
def test_an_advertised_url_is_a_base_url(url: str) -> None:
    with pytest.raises(ValidationError, match="advertised_url"):
        Settings(advertised_url=url)


def test_membership_needs_the_nodes_shared_admin_token(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="MEMSTREAM_ADMIN_TOKEN"):
        Settings(data_dir=tmp_path, membership=True, admin_token=None)


def test_a_node_name_is_a_plain_name() -> None:
    with pytest.raises(ValidationError, match="node_name"):
        Settings(node_name="node one")
