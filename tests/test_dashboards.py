"""The compose stack's monitoring (deploy/): the Grafana dashboard asks only for series the node
exposes at /metrics, and Prometheus scrapes the node with the admin token the node is given."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from core.config import Settings
from core.metrics import REGISTRY
from memstream.metrics import Figures, NodeFigures

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "memstream-node.json"
METRIC_RE = re.compile(r"\bmemstream_[a-z_]+")


def exposed_series() -> set[str]:
    """Every series name /metrics can hold: the recorded metrics and the background figures."""
    names = {sample.name for metric in REGISTRY.collect() for sample in metric.samples}
    for metric in REGISTRY.collect():  # label sets not seen yet in this process: the family's suffixes
        kinds = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("_total",)}
        names.update(metric.name + suffix for suffix in kinds.get(metric.type, ("",)))

    async def nothing() -> Any:
        return 0

    figures = NodeFigures(Settings(), {}, relay_lag=nothing, totals=nothing)
    figures.figures = Figures(lag={"p": 0}, dead_letters={"p": 0}, summaries=0, in_flight=0, relay_lag=0)
    figures.figures.refreshed_at = 0.0
    names.update(sample.name for metric in figures.collect() for sample in metric.samples)
    return names


def test_the_dashboard_asks_only_for_series_the_node_exposes() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert exprs
    asked = {name for expr in exprs for name in METRIC_RE.findall(expr)}
    assert asked - exposed_series() == set()
    assert {"memstream_processor_lag_messages", "memstream_http_request_duration_seconds_bucket"} <= asked
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


def test_prometheus_scrapes_every_node_with_its_admin_token() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    token = compose["services"]["memstream-node"]["environment"]["MEMSTREAM_ADMIN_TOKEN"]
    assert (ROOT / "deploy" / "prometheus" / "admin-token").read_text().strip() == token
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["authorization"]["credentials_file"] == "/etc/prometheus/admin-token"
    nodes = [name for name, svc in compose["services"].items() if svc.get("command") == ["memstream", "node"]]
    assert job["static_configs"][0]["targets"] == [f"{name}:8080" for name in nodes]  # every node
    mounts = compose["services"]["prometheus"]["volumes"]
    assert "./deploy/prometheus/admin-token:/etc/prometheus/admin-token:ro" in mounts
