"""docker-compose.yml is the production stack: every component the config names must be in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from core.config import Settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
MEMSTREAM_SERVICES = [name for name, svc in SERVICES.items() if svc.get("image", "").startswith("memstream")]


def _settings(service: str) -> Settings:
    env = {k: str(v) for k, v in SERVICES[service]["environment"].items()}
    fields: dict[str, Any] = {}
    for key, value in env.items():
        assert key.startswith("MEMSTREAM_"), key
        path = key.removeprefix("MEMSTREAM_").lower().split("__")
        target = fields
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    return Settings(**fields)


def _host(url: str) -> str:
    host = urlparse(url).hostname
    assert host, url
    return host


def test_memstream_services_exist() -> None:
    assert {"memstream-init", "memstream-node"} <= set(MEMSTREAM_SERVICES)


@pytest.mark.parametrize("service", MEMSTREAM_SERVICES)
def test_every_configured_component_is_a_compose_service(service: str) -> None:
    settings = _settings(service)
    assert not any(settings.uses_embedded_services.values()), "production must not start embedded servers"
    hosts = {
        "broker": settings.broker_bootstrap.split(":")[0],
        "postgres": _host(settings.postgres),
        "redis": _host(settings.redis),
        "qdrant": _host(settings.qdrant),
        "clickhouse": _host(settings.clickhouse),
        "s3": _host(settings.s3.endpoint or ""),
    }
    depends = SERVICES[service]["depends_on"]
    for component, host in hosts.items():
        assert host in SERVICES, f"{service}: {component} points at {host!r}, which is not a compose service"
        if host in depends:
            assert depends[host]["condition"] in ("service_healthy", "service_completed_successfully")
    for url in (settings.journal, settings.object_store):
        assert urlparse(url).scheme == "s3", f"{service}: {url} must use the S3 store in production"


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_long_running_services_have_healthchecks(service: str) -> None:
    spec = SERVICES[service]
    one_shot = service.endswith("-init")
    assert one_shot or "healthcheck" in spec, f"{service} has no healthcheck"


def test_kafka_runs_kraft_without_auto_topic_creation() -> None:
    env = SERVICES["kafka"]["environment"]
    assert "controller" in env["KAFKA_PROCESS_ROLES"]
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false", "topics come from topics.yaml only"


NODES = [name for name in MEMSTREAM_SERVICES if SERVICES[name]["command"] == ["memstream", "node"]]


def test_three_nodes_share_the_journal_shards() -> None:
    """Membership on every node, the same deployment (journal, shard count, admin token), each node
    with its own name, advertised URL (its service, its API port), host port and data volume, and
    every node serving the projections (ClickHouse and Qdrant servers)."""
    assert len(NODES) == 3, NODES
    nodes = {name: _settings(name) for name in NODES}
    for name, settings in nodes.items():
        assert settings.membership and settings.hosts_projections and not settings.projections_embedded
        assert settings.node_name == name
        assert settings.node_url == f"http://{name}:{settings.api_port}"
        assert settings.journal_shards >= len(NODES)
    shared = {(s.journal, s.journal_shards, s.environment, s.postgres, s.admin_token) for s in nodes.values()}
    assert len(shared) == 1, "every node must be of the same deployment"
    ports = [SERVICES[name]["ports"][0].split(":")[0] for name in NODES]
    volumes = [SERVICES[name]["volumes"][0].split(":")[0] for name in NODES]
    assert len(set(ports)) == len(NODES) and len(set(volumes)) == len(NODES)
    assert all(
        set(SERVICES[name]["depends_on"]) >= {"memstream-init", "postgres", "kafka", "minio-init"}
        for name in NODES
    )
