"""`ClickHouseTranscriptStore`: the `TranscriptStore` on clickhouse-connect, for chdb and servers.

One class, one set of SQL statements for both DSN forms:
- `chdb:///DIR`: the embedded engine, in-process (one process owns a data path; while a client
  is open on one path, no other path can be opened in the process);
- `http(s)://user:password@host:port`: a ClickHouse server.

Every call runs through a `sinks.clickhouse.client.ClickHouseClient`: on a dedicated worker
thread (one per server store; one shared by every chdb store of the process), connecting on first
use and again after a connection failure, so a store built while ClickHouse is down starts
working when it comes back.

Values are always bound parameters (`{name:Type}` placeholders: sent to the server as query
parameters over HTTP, handed to chdb's own parameter binding in-process), never formatted into
SQL; only database and table names are, after `check_identifier`.

Search ranks by BM25 (`core.transcripts.bm25`) over `terms` + `context_terms` (a message and the
one before it), with statistics from the caller's scope only, in one query over the scope's
messages (`SEARCH_SQL`); the query's terms (`core.transcripts.terms.query_terms`) are bound as an
`Array(String)`.

Reads are dedup-safe: each message counts once although the table may still hold a copy that the
`ReplacingMergeTree` has not merged away yet (`LIMIT 1 BY` or `GROUP BY` the message key, or `uniqExact`
over it).
Errors: connection failures and transient server errors (timeouts, too many parts, memory limit,
...: `client.is_transient`) raise `TranscriptUnavailable`; other errors (a bug in a query, a
schema mismatch) propagate.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from clickhouse_connect.driver.client import Client

from core.stores.transcripts import (
    MessageHit,
    Period,
    Role,
    ThreadCount,
    ThreadKey,
    ToolCallInfo,
    ToolCallPart,
    TranscriptRow,
    TranscriptScope,
)
from core.transcripts.bm25 import K1, B
from core.transcripts.terms import query_terms
from core.transcripts.tool_calls import ToolCallMessage, group_calls
from sinks.clickhouse.client import ClickHouseClient
from sinks.clickhouse.schema import (
    COLUMNS,
    INSTANCE_TABLE,
    REBUILD_PREFIX,
    TABLE,
    check_identifier,
    create_database,
    create_instance_table,
    create_table,
    create_vectors_table,
    create_view,
    upgrade_table,
    upgrade_vectors_table,
)

log = logging.getLogger("memstream.clickhouse")

SEARCH_SQL = """
WITH {{terms:Array(String)}} AS q
SELECT hit.1 AS thread_id, hit.2 AS offset,
       arraySum(arrayMap((tf, df) -> if(
           tf = 0, 0.,
           log(1 + (n - df + 0.5) / (df + 0.5)) * tf * ({{k1:Float64}} + 1)
           / (tf + {{k1:Float64}} * (1 - {{b:Float64}} + {{b:Float64}} * hit.4 / avgdl))
       ), hit.5, dfs)) AS score,
       hit.3 AS created_at, hit.6 AS message_id, hit.7 AS role, hit.8 AS content
FROM (
    SELECT count() AS n, avg(length(doc)) AS avgdl,
           sumForEach(arrayMap(t -> toUInt64(has(doc, t)), q)) AS dfs,
           groupArrayIf(
               (thread_id, offset, created_at, length(doc), arrayMap(t -> countEqual(doc, t), q),
                hit_message_id, hit_role, hit_content),
               hasAny(doc, q)
           ) AS hits
    FROM (
        SELECT thread_id, offset, any(created_at) AS created_at, any(message_id) AS hit_message_id,
               any(role) AS hit_role, any(content) AS hit_content,
               splitByWhitespace(concat(any(context_terms), ' ', any(terms))) AS doc
        FROM {table} AS m
        WHERE {where} AND role IN ('user', 'assistant')
        GROUP BY thread_id, offset
    )
)
ARRAY JOIN hits AS hit
ORDER BY score DESC, created_at DESC, thread_id, offset
LIMIT {{limit:UInt32}}
"""
"""BM25 (`core.transcripts.bm25`) of the messages of one scope (`where`), in one scan of its
messages (each counted once: grouped by its key, copies being identical; ~20% less CPU than
`LIMIT 1 BY` on small scopes, measured): N, avgdl and df(t) over all of them, and the rows having
a query term with |d| and tf per query term; a message's document is `context_terms` + `terms`
(split at their spaces). Returns (thread_id, offset, score, created_at, message_id, role,
content) of the best `limit`. Carrying the content of the hits costs less than a second query
for their rows (measured: p50 CPU -12% on thread and agent scopes, equal on a 43k-message agent,
p90 -25 to -40%), and the answer comes from one snapshot of the table."""

INSERT_SETTINGS = {"max_partitions_per_insert_block": 0}
"""A batch of imported history (`created_at` given by the caller) may touch more months, the
table's partitions, than ClickHouse's default limit of 100 per insert: no limit."""

_HAS_TERMS = (
    "SELECT count() FROM system.columns "
    "WHERE database = {db:String} AND table = {table:String} AND name = 'terms'"
)
"""1 when the live table has the `terms` column (0 for a table of an earlier version)."""


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _row_values(row: TranscriptRow) -> list[Any]:
    return [
        row.environment,
        row.account_id,
        row.agent_id,
        row.user_id,
        row.thread_id,
        row.message_id,
        row.offset,
        row.seq,
        row.role,
        row.content,
        row.reasoning,
        row.tool_call_id,
        row.tool_name,
        row.tool_arguments,
        row.tool_result,
        _utc(row.created_at),
        row.token_count,
        " ".join(row.terms),
        " ".join(row.context_terms),
        row.shard,
    ]


def _scope_filter(scope: TranscriptScope, params: dict[str, Any]) -> str:
    """The WHERE conditions of `scope` (its values added to `params`): always one user, and
    `user_id IS NULL` (the threads without a user) when the scope has none."""
    params.update(environment=scope.environment, account_id=scope.account_id, agent_id=scope.agent_id)
    conditions = [
        "environment = {environment:String}",
        "account_id = {account_id:String}",
        "agent_id = {agent_id:String}",
    ]
    if scope.user_id is None:
        conditions.append("user_id IS NULL")
    else:
        params["user_id"] = scope.user_id
        conditions.append("user_id = {user_id:String}")
    return " AND ".join(conditions)


def search_sql(
    table: str,
    scope: TranscriptScope,
    query: str,
    *,
    thread_id: str | None,
    limit: int,
    period: Period | None = None,
) -> tuple[str, dict[str, Any], str] | None:
    """`SEARCH_SQL` over `table` for `scope` (and `thread_id`, and the messages of `period`), its
    parameters and its scope's WHERE conditions without the period (for another table with the
    scope columns); None when the query has no search term or `limit` < 1 (nothing to search for)."""
    terms = query_terms(query)
    if not terms or limit < 1:
        return None
    params: dict[str, Any] = {"terms": terms, "limit": limit, "k1": K1, "b": B}
    where = _scope_filter(scope, params)
    if thread_id is not None:
        params["thread_id"] = thread_id
        where += " AND thread_id = {thread_id:String}"
    return SEARCH_SQL.format(table=table, where=where + _period_filter(period, params)), params, where


def _period_filter(period: Period | None, params: dict[str, Any]) -> str:
    """The `created_at` conditions of `period` (microseconds since the epoch, bound), or "": on
    the table's column (`m.`, not the grouped alias), so a period also prunes monthly partitions."""
    if period is None:
        return ""
    sql = ""
    if period.since is not None:
        params["since_us"] = _epoch_us(period.since)
        sql += " AND m.created_at >= fromUnixTimestamp64Micro({since_us:Int64}, 'UTC')"
    if period.until is not None:
        params["until_us"] = _epoch_us(period.until)
        sql += " AND m.created_at < fromUnixTimestamp64Micro({until_us:Int64}, 'UTC')"
    return sql


def _epoch_us(moment: datetime) -> int:
    return (_utc(moment) - _EPOCH) // timedelta(microseconds=1)


def hit_of(row: Sequence[Any]) -> MessageHit:
    """The hit of a `SEARCH_SQL` result row."""
    return MessageHit(
        thread_id=row[0],
        message_id=row[4],
        offset=int(row[1]),
        role=cast(Role, row[5]),
        content=row[6],
        created_at=_utc(row[3]),
        score=float(row[2]),
    )


class ClickHouseTranscriptStore:
    """The transcript store on `dsn` (`chdb:///DIR` or `http(s)://...`), in `database` (module doc).

    Construction does no I/O; call `ensure_schema()` before the first write. `close()` closes the
    client (the store must not be used after).
    """

    def __init__(
        self,
        dsn: str,
        *,
        database: str = "memstream",
        connect_timeout_s: float = 5.0,
        query_timeout_s: float = 60.0,
    ) -> None:
        self._client = ClickHouseClient(
            dsn, connect_timeout_s=connect_timeout_s, query_timeout_s=query_timeout_s
        )
        self.dsn = dsn
        self.database = check_identifier(database)
        self.embedded = self._client.embedded
        self._instance_id: str | None = None

    def _table(self, table: str | None) -> str:
        return f"{self.database}.{check_identifier(table or TABLE)}"

    @property
    def client(self) -> ClickHouseClient:
        """The client this store runs its calls on (shared by `sinks.clickhouse.vectors`)."""
        return self._client

    # ------------------------------------------------------------------ schema

    async def ensure_schema(self) -> None:
        db = self.database

        def call(client: Client) -> int:
            client.command(create_database(db))
            client.command(create_table(db))
            unsearchable = 0
            if not client.query(_HAS_TERMS, parameters={"db": db, "table": TABLE}).result_rows[0][0]:
                unsearchable = int(client.query(f"SELECT count() FROM {self._table(None)}").result_rows[0][0])
            for statement in upgrade_table(db):
                client.command(statement)
            client.command(create_view(db))
            client.command(create_vectors_table(db))
            for statement in upgrade_vectors_table(db):
                client.command(statement)
            return unsearchable

        unsearchable = await self._client.run("schema creation", call)
        if unsearchable:
            log.warning(
                "transcript search: %s.%s was made by an earlier version: its %d rows have no search "
                "terms, so journal_message_search does not find them until you run `memstream rebuild "
                "clickhouse` (README, 'Upgrading')",
                db,
                TABLE,
                unsearchable,
            )

    async def instance_id(self) -> str:
        if self._instance_id is None:
            db = self.database
            table = f"{db}.{INSTANCE_TABLE}"
            first = f"SELECT id FROM {table} ORDER BY created, id LIMIT 1"

            def call(client: Client) -> str:
                client.command(create_database(db))
                client.command(create_instance_table(db))
                rows = client.query(first).result_rows
                if not rows:  # racing first users each insert one; all then read the earliest
                    client.command(f"INSERT INTO {table} (id) VALUES ('{uuid.uuid4().hex}')")
                    rows = client.query(first).result_rows
                return str(rows[0][0])

            self._instance_id = await self._client.run("instance id", call)
        return self._instance_id

    async def create_rebuild_table(self) -> str:
        name = f"{REBUILD_PREFIX}{uuid.uuid4().hex[:12]}"
        await self._client.run("create table", lambda c: c.command(create_table(self.database, name)))
        return name

    async def swap_in(self, table: str) -> None:
        new, live = self._table(table), self._table(None)
        if new == live:
            raise ValueError("swap_in needs a rebuild table, not the live table")

        def call(client: Client) -> None:
            client.command(f"EXCHANGE TABLES {live} AND {new}")
            client.command(f"DROP TABLE IF EXISTS {new} SYNC")

        await self._client.run("table swap", call)

    async def drop_table(self, table: str) -> None:
        name = self._table(table)
        if name == self._table(None):
            raise ValueError("drop_table refuses to drop the live table")
        await self._client.run("drop table", lambda c: c.command(f"DROP TABLE IF EXISTS {name} SYNC"))

    async def ping(self) -> None:
        def call(client: Client) -> None:
            client.command("SELECT 1")

        await self._client.run("ping", call)

    async def close(self) -> None:
        await self._client.close()

    # ------------------------------------------------------------------ writes

    async def insert(self, rows: Sequence[TranscriptRow], *, table: str | None = None) -> None:
        if not rows:
            return
        name = self._table(table)
        data = [_row_values(row) for row in rows]

        def call(client: Client) -> None:
            # imported history may span more months (partitions) than the default limit of 100
            client.insert(name, data, column_names=list(COLUMNS), settings=INSERT_SETTINGS)

        await self._client.run("insert", call)

    async def delete_thread(
        self, environment: str, account_id: str, thread_id: str, up_to_seq: int, *, table: str | None = None
    ) -> int:
        params = {"e": environment, "a": account_id, "t": thread_id, "s": up_to_seq}
        where = (
            "environment = {e:String} AND account_id = {a:String} AND thread_id = {t:String} "
            "AND seq <= {s:UInt64}"
        )
        name = self._table(table)

        def call(client: Client) -> int:  # a lightweight DELETE, waited for (lightweight_deletes_sync)
            found = int(
                client.query(f"SELECT count() FROM {name} WHERE {where}", parameters=params).result_rows[0][0]
            )
            if found:
                client.command(f"DELETE FROM {name} WHERE {where}", parameters=params)
            return found

        return await self._client.run("delete", call)

    async def count_thread_rows(
        self, environment: str, account_id: str, thread_id: str, up_to_seq: int
    ) -> int:
        params = {"e": environment, "a": account_id, "t": thread_id, "s": up_to_seq}
        sql = (
            f"SELECT count() FROM {self._table(None)} WHERE environment = {{e:String}} AND account_id = "
            "{a:String} AND thread_id = {t:String} AND seq <= {s:UInt64}"
        )
        rows = await self._client.run("count", lambda c: c.query(sql, parameters=params).result_rows)
        return int(rows[0][0])

    # ------------------------------------------------------------------ reads

    async def previous_terms(
        self, before: Mapping[ThreadKey, int], *, table: str | None = None
    ) -> dict[ThreadKey, tuple[str, ...]]:
        if not before:
            return {}
        keys = list(before)
        params: dict[str, Any] = {"keys": keys, "befores": [before[key] for key in keys]}
        # the IN set narrows by the sorting key's prefix; transform looks a thread's bound up in a hash
        # table (indexOf scanned the keys for every row); argMax over copies of one offset is either
        keys_type = "Array(Tuple(String, String, String, String))"
        sql = f"""
WITH (environment, account_id, agent_id, thread_id) AS thread
SELECT environment, account_id, agent_id, thread_id, argMax(terms, offset)
FROM {self._table(table)}
WHERE thread IN {{keys:{keys_type}}}
  AND role IN ('user', 'assistant') AND notEmpty(terms)
  AND offset < transform(thread, {{keys:{keys_type}}}, {{befores:Array(UInt64)}}, toUInt64(0))
GROUP BY environment, account_id, agent_id, thread_id
"""
        rows = await self._client.run("previous terms", lambda c: c.query(sql, parameters=params).result_rows)
        return {(r[0], r[1], r[2], r[3]): tuple(r[4].split()) for r in rows}

    async def search(
        self,
        scope: TranscriptScope,
        query: str,
        *,
        thread_id: str | None = None,
        limit: int = 10,
        period: Period | None = None,
    ) -> list[MessageHit]:
        table = self._table(None)
        found = search_sql(table, scope, query, thread_id=thread_id, limit=limit, period=period)
        if found is None:
            return []  # only stop words (or no word): nothing says what to look for
        sql, params, _ = found

        def ranked_hits(client: Client) -> list[MessageHit]:
            return [hit_of(row) for row in client.query(sql, parameters=params).result_rows]

        return await self._client.run("search", ranked_hits)

    async def tool_call(
        self, scope: TranscriptScope, tool_call_id: str, *, thread_id: str | None = None
    ) -> list[ToolCallInfo]:
        params: dict[str, Any] = {"tool_call_id": tool_call_id}
        where = _scope_filter(scope, params)
        if thread_id is not None:
            params["thread_id"] = thread_id
            where += " AND thread_id = {thread_id:String}"
        # only positions and sizes leave the store; `group_calls` pairs calls with results
        sql = f"""
SELECT thread_id, offset, role, tool_name,
       length(ifNull(tool_arguments, '')), length(ifNull(tool_result, '')), created_at
FROM {self._table(None)}
WHERE {where} AND tool_call_id = {{tool_call_id:String}} AND role IN ('assistant', 'tool')
ORDER BY thread_id, offset
LIMIT 1 BY thread_id, offset
"""
        result = await self._client.run(
            "tool call lookup", lambda c: c.query(sql, parameters=params).result_rows
        )
        return group_calls(
            tool_call_id,
            (
                ToolCallMessage(
                    thread_id=row[0],
                    offset=int(row[1]),
                    role=str(row[2]),
                    tool_name=row[3],
                    arguments_bytes=int(row[4]),
                    result_bytes=int(row[5]),
                    created_at=_utc(row[6]),
                )
                for row in result
            ),
        )

    async def tool_call_bytes(
        self,
        scope: TranscriptScope,
        call: ToolCallInfo,
        part: ToolCallPart,
        offset: int,
        length: int,
    ) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError("offset and length must be >= 0")
        if part not in ("arguments", "result"):
            raise ValueError(f"part must be 'arguments' or 'result', not {part!r}")
        column, role, message_offset = (
            ("tool_arguments", "assistant", call.call_offset)
            if part == "arguments"
            else ("tool_result", "tool", call.result_offset)
        )
        if message_offset is None:
            raise ValueError(f"tool call {call.tool_call_id!r} has no message holding its {part}")
        if length == 0:
            return b""
        params: dict[str, Any] = {
            "thread_id": call.thread_id,
            "message_offset": message_offset,
            "tool_call_id": call.tool_call_id,
            "role": role,
            "start": offset + 1,
            "length": length,
        }
        where = _scope_filter(scope, params)
        # the one message the size was measured on; substring() counts bytes: only the page leaves
        sql = f"""
SELECT substring(ifNull({column}, ''), {{start:UInt64}}, {{length:UInt64}})
FROM {self._table(None)}
WHERE {where} AND thread_id = {{thread_id:String}} AND offset = {{message_offset:UInt64}}
  AND tool_call_id = {{tool_call_id:String}} AND role = {{role:String}}
LIMIT 1
"""
        rows = await self._client.run(
            "tool call read",
            lambda c: c.query(sql, parameters=params, query_formats={"String": "bytes"}).result_rows,
        )
        return bytes(rows[0][0]) if rows else b""

    async def thread_counts(self, environment: str, *, table: str | None = None) -> list[ThreadCount]:
        sql = f"""
SELECT account_id, thread_id, uniqExact(offset), max(offset)
FROM {self._table(table)}
WHERE environment = {{environment:String}}
GROUP BY account_id, thread_id
ORDER BY account_id, thread_id
"""
        rows = await self._client.run(
            "thread counts", lambda c: c.query(sql, parameters={"environment": environment}).result_rows
        )
        return [
            ThreadCount(
                environment=environment,
                account_id=row[0],
                thread_id=row[1],
                messages=int(row[2]),
                max_offset=int(row[3]),
            )
            for row in rows
        ]

    async def row_count(self, *, table: str | None = None) -> int:
        sql = f"SELECT uniqExact(environment, account_id, thread_id, offset) FROM {self._table(table)}"
        rows = await self._client.run("row count", lambda c: c.query(sql).result_rows)
        return int(rows[0][0])
