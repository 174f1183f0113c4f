"""The transcript dashboard of the compose stack (deploy/grafana/dashboards/memstream-transcripts.json):
provisioned with the official ClickHouse data source as a read-only ClickHouse user, and every
query, expanded the way Grafana and the plugin expand it (tests/grafana_sql.py), gives the right
figures on the real embedded engine from a table holding every message twice (a redelivery)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.stores.transcripts import Role, TranscriptRow
from sinks.clickhouse.store import ClickHouseTranscriptStore
from tests.grafana_sql import ALL, TimeRange, expand, macro_calls
from tests.sinks.clickhouse.rows import row

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "memstream-transcripts.json"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "clickhouse.yml"
CLICKHOUSE_USERS = ROOT / "deploy" / "clickhouse" / "users.d" / "grafana.xml"
CLICKHOUSE_CONFIG = ROOT / "deploy" / "clickhouse" / "config.d" / "access-control.xml"
PLUGIN = "grafana-clickhouse-datasource"

NOV = TimeRange(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 4, tzinfo=UTC))
DAY2, DAY3 = datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 11, 3, tzinfo=UTC)


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panel_sql(title: str) -> str:
    (panel,) = [panel for panel in dashboard()["panels"] if panel["title"] == title]
    (target,) = panel["targets"]
    sql: str = target["rawSql"]
    return sql


def variable_sql(name: str) -> str:
    (variable,) = [v for v in dashboard()["templating"]["list"] if v["name"] == name]
    sql: str = variable["query"]
    return sql


def at(day: datetime, hour: int, minute: int = 0) -> datetime:
    return day.replace(hour=hour, minute=minute)


def message(
    thread: str,
    offset: int,
    when: datetime,
    content: str = "",
    *,
    role: Role = "user",
    agent: str = "support-bot",
    account: str = "acme",
    environment: str = "prod",
    call: tuple[str, str] | None = None,
    result: tuple[str, int] | None = None,
) -> TranscriptRow:
    """A message; `call` = (call id, tool name) for an assistant call, `result` = (call id, bytes)."""
    if call is not None:
        role = "assistant"
    if result is not None:
        role = "tool"
    return row(
        thread,
        offset,
        content,
        role=role,
        environment=environment,
        account_id=account,
        agent_id=agent,
        created_at=when,
        tool_call_id=call[0] if call else result[0] if result else None,
        tool_name=call[1] if call else None,
        tool_result="r" * result[1] if result else None,
    )


ROWS = [
    # acme / support-bot: day 2, threads s1 and s2 (5 messages, 4 + 2 + 2 tokens), one tool call
    message("s1", 0, at(DAY2, 10), "where is my order"),
    message("s1", 1, at(DAY2, 10, 1), call=("c1", "lookup_order")),
    message("s1", 2, at(DAY2, 10, 2), result=("c1", 40)),
    message("s2", 0, at(DAY2, 11), "refund please"),
    message("s2", 1, at(DAY2, 11, 1), "sure thing", role="assistant"),
    # day 3, thread s1 again (3 messages, 1 token), another call
    message("s1", 3, at(DAY3, 9), call=("c2", "lookup_order")),
    message("s1", 4, at(DAY3, 9, 1), result=("c2", 10)),
    message("s1", 5, at(DAY3, 9, 2), "thanks"),
    # acme / sales-bot: day 3, threads p1 and p2 (4 messages, 4 tokens); p2's result comes after the range
    message("p1", 0, at(DAY3, 14), "price of the plan", agent="sales-bot"),
    message("p1", 1, at(DAY3, 14, 1), agent="sales-bot", call=("c3", "quote")),
    message("p1", 2, at(DAY3, 14, 2), agent="sales-bot", result=("c3", 25)),
    message("p2", 0, at(DAY3, 23), agent="sales-bot", call=("c4", "quote")),
    message("p2", 1, datetime(2026, 11, 4, 0, 0, 30, tzinfo=UTC), agent="sales-bot", result=("c4", 70)),
    # outside the selection: before the range, another account, another environment
    message("s0", 0, datetime(2026, 10, 20, 8, tzinfo=UTC), "old question"),
    message("s0", 1, datetime(2026, 10, 20, 8, 1, tzinfo=UTC), call=("c0", "lookup_order")),
    message("s0", 2, datetime(2026, 10, 20, 8, 2, tzinfo=UTC), result=("c0", 500)),
    message("g1", 0, at(DAY2, 10), "hello from another tenant", account="globex"),
    message("g1", 1, at(DAY2, 10, 1), account="globex", call=("c1", "lookup_order")),
    message("g1", 2, at(DAY2, 10, 2), account="globex", result=("c1", 99)),
    message("s1", 0, at(DAY2, 10), "a b c d e", environment="dev"),
]


@pytest.fixture
async def projection(transcript_store: ClickHouseTranscriptStore, chdb_client: Any) -> AsyncIterator[str]:
    """The database of a projection holding ROWS twice (merges stopped: the copies stay)."""
    database = transcript_store.database
    chdb_client.command(f"SYSTEM STOP MERGES {database}.messages")
    await transcript_store.insert(ROWS)
    await transcript_store.insert(ROWS)
    assert chdb_client.query(f"SELECT count() FROM {database}.messages").result_rows == [(2 * len(ROWS),)]
    yield database


def run(
    chdb_client: Any, database: str, sql: str, agents: Sequence[str] = (ALL,), time_range: TimeRange = NOV
) -> list[tuple[Any, ...]]:
    variables = {"environment": "prod", "account": "acme", "agent": list(agents)}
    sent = expand(sql, variables, time_range)
    assert re.findall(r"\bmemstream\.(\w+)", sent)  # the compose stack's database, here the test's own
    rows: list[tuple[Any, ...]] = chdb_client.query(
        re.sub(r"\bmemstream\.", f"{database}.", sent)
    ).result_rows
    return rows


def per_day(rows: list[tuple[Any, ...]]) -> list[tuple[str, str, int]]:
    """(day, agent, value) rows of a time series panel, which Grafana needs in time order."""
    days = [time.replace(tzinfo=None) for time, _, _ in rows]
    assert days == sorted(days)
    return [(f"{time:%m-%d}", agent, value) for time, agent, value in rows]


async def test_daily_panels_count_messages_tokens_and_active_threads_per_agent(
    projection: str, chdb_client: Any
) -> None:
    def daily(title: str) -> list[tuple[str, str, int]]:
        return per_day(run(chdb_client, projection, panel_sql(title)))

    assert daily("Messages per agent per day") == [
        ("11-02", "support-bot", 5),
        ("11-03", "sales-bot", 4),
        ("11-03", "support-bot", 3),
    ]
    assert daily("Tokens per agent per day") == [
        ("11-02", "support-bot", 8),
        ("11-03", "sales-bot", 4),
        ("11-03", "support-bot", 1),
    ]
    assert daily("Active threads per agent per day") == [
        ("11-02", "support-bot", 2),
        ("11-03", "sales-bot", 2),
        ("11-03", "support-bot", 1),
    ]


async def test_agents_table_and_tool_usage_over_the_range(projection: str, chdb_client: Any) -> None:
    agents = run(chdb_client, projection, panel_sql("Agents in the time range"))
    assert [(agent, threads, messages, tokens) for agent, threads, messages, tokens, _ in agents] == [
        ("support-bot", 2, 8, 9),
        ("sales-bot", 2, 4, 4),
    ]
    assert [last.replace(tzinfo=None) for *_, last in agents] == [
        datetime(2026, 11, 3, 9, 2),
        datetime(2026, 11, 3, 23, 0),
    ]
    # lookup_order: c1 (40 bytes) and c2 (10); quote: c3 (25) and c4, whose result is after the range
    assert run(chdb_client, projection, panel_sql("Tool usage")) == [
        ("lookup_order", 2, 2, 25.0, 50),
        ("quote", 2, 1, 25.0, 25),
    ]


async def test_selected_agents_and_time_range_narrow_every_panel(projection: str, chdb_client: Any) -> None:
    messages = panel_sql("Messages per agent per day")
    assert per_day(run(chdb_client, projection, messages, ["sales-bot"])) == [("11-03", "sales-bot", 4)]
    assert run(chdb_client, projection, panel_sql("Tool usage"), ["sales-bot"]) == [("quote", 2, 1, 25.0, 25)]
    both = run(chdb_client, projection, panel_sql("Tool usage"), ["sales-bot", "support-bot"])
    assert both == run(chdb_client, projection, panel_sql("Tool usage"))
    day3 = TimeRange(DAY3, NOV.end)
    assert [
        a for a, *_ in run(chdb_client, projection, panel_sql("Agents in the time range"), time_range=day3)
    ] == [
        "sales-bot",
        "support-bot",
    ]
    assert run(chdb_client, projection, panel_sql("Tool usage"), ["support-bot"], day3) == [
        ("lookup_order", 1, 1, 10.0, 10)
    ]
    october = TimeRange(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC))
    assert run(chdb_client, projection, panel_sql("Tool usage"), time_range=october) == [
        ("lookup_order", 1, 1, 500.0, 500)
    ]


async def test_variables_list_environments_accounts_and_agents_of_the_range(
    projection: str, chdb_client: Any
) -> None:
    assert run(chdb_client, projection, variable_sql("environment")) == [("dev",), ("prod",)]
    assert run(chdb_client, projection, variable_sql("account")) == [("acme",), ("globex",)]
    assert run(chdb_client, projection, variable_sql("agent")) == [("sales-bot",), ("support-bot",)]
    day3 = TimeRange(DAY3, NOV.end)
    assert run(chdb_client, projection, variable_sql("environment"), time_range=day3) == [("prod",)]


def test_every_query_reads_deduplicated_rows_with_quoted_variables() -> None:
    loaded = dashboard()
    variables = {v["name"]: v for v in loaded["templating"]["list"]}
    assert list(variables) == ["environment", "account", "agent"]
    assert not variables["environment"]["multi"] and not variables["account"]["multi"]
    assert variables["agent"]["multi"] and variables["agent"]["includeAll"]
    queries = [v["query"] for v in variables.values()]
    for panel in loaded["panels"]:
        (target,) = panel["targets"]
        series = panel["type"] == "timeseries"
        assert (target["format"], target["queryType"]) == ((0, "timeSeries") if series else (1, "table"))
        assert target["editorType"] == "sql"
        queries.append(target["rawSql"])
    for sql in queries:
        assert set(re.findall(r"\b(\w+)\.messages\w*", sql)) == {"memstream"}
        assert set(re.findall(r"\bmemstream\.(\w+)", sql)) == {"messages_dedup"}
        for start, end, args in reversed(macro_calls(sql, "conditionalAll")):
            sql = sql[:start] + args[0] + sql[end:]  # the second argument names the variable
        assert re.findall(r"\$\{(\w+):sqlstring\}", sql) == re.findall(r"\$\{?(?!__)(\w+)", sql), sql
    assert len({panel["id"] for panel in loaded["panels"]}) == len(loaded["panels"])


def test_grafana_reads_clickhouse_as_a_read_only_user_of_the_memstream_database() -> None:
    (datasource,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert datasource["type"] == PLUGIN
    loaded = dashboard()
    used = [panel["datasource"] for panel in loaded["panels"]]
    used += [target["datasource"] for panel in loaded["panels"] for target in panel["targets"]]
    used += [variable["datasource"] for variable in loaded["templating"]["list"]]
    assert all(ds == {"type": PLUGIN, "uid": datasource["uid"]} for ds in used)

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    settings = datasource["jsonData"]
    assert (settings["host"], settings["port"], settings["protocol"]) == ("clickhouse", 8123, "http")
    assert (
        settings["defaultDatabase"] == services["clickhouse"]["environment"]["CLICKHOUSE_DB"] == "memstream"
    )
    assert PLUGIN in services["grafana"]["environment"]["GF_INSTALL_PLUGINS"].split(",")
    assert "clickhouse" in services["grafana"]["depends_on"]
    mounts = services["clickhouse"]["volumes"]
    assert f"./{CLICKHOUSE_USERS.relative_to(ROOT)}:/etc/clickhouse-server/users.d/grafana.xml:ro" in mounts
    assert (
        f"./{CLICKHOUSE_CONFIG.relative_to(ROOT)}:/etc/clickhouse-server/config.d/access-control.xml:ro"
        in (mounts)
    )

    users = ElementTree.parse(CLICKHOUSE_USERS).getroot()
    user = users.find(f"users/{settings['username']}")
    assert user is not None
    assert user.findtext("password") == datasource["secureJsonData"]["password"]
    assert [grant.text for grant in user.iterfind("grants/query")] == ["GRANT SELECT ON memstream.*"]
    profile = users.find(f"profiles/{user.findtext('profile')}")
    assert profile is not None and profile.findtext("readonly") == "1"
    assert profile.findtext("max_memory_usage") and profile.findtext("max_execution_time")
    # the plugin sets max_execution_time on every query: changeable in readonly mode, bounded
    assert profile.find("constraints/max_execution_time/changeable_in_readonly") is not None
    assert profile.findtext("constraints/max_execution_time/max")
    config = ElementTree.parse(CLICKHOUSE_CONFIG).getroot()
    assert config.findtext("access_control_improvements/settings_constraints_replace_previous") == "true"
