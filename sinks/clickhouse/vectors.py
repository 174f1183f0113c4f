"""`ClickHouseMessageVectors`: the `MessageVectorStore` in the transcript store's database.

The table is `message_vectors` (`sinks.clickhouse.schema.create_vectors_table`), created with the
transcript schema (`ClickHouseTranscriptStore.ensure_schema`). Calls run on the transcript
store's client (its worker thread; for chdb the process's one engine): this store opens no
connection of its own, and closes the transcript store's only when built with `close_store`.

`candidates` is the transcript search's BM25 query (`sinks.clickhouse.store.SEARCH_SQL`, its
scope and role rules unchanged) LEFT JOINed, in the same query, with the vectors of the scope
(`ANY LEFT JOIN`: one vector per hit, so an unmerged copy of a vector never doubles a hit; the
copies of one message's vector by one model are equal), and computes each hit's cosine to the query
vector there (a hit without a vector gets NULL): only the scores leave ClickHouse. The vectors
read are those of the caller's scope only (the same scope filter), of the asked model only.

Reads are dedup-safe (`ANY` join); `insert_vectors` is idempotent (the
`ReplacingMergeTree` keeps one row per message). `prune` is a lightweight DELETE of the vectors
inserted before a time whose message the live `messages` table no longer holds; `delete_thread`
a lightweight DELETE of a thread's vectors up to a seq (a thread deletion), like the transcript
store's `delete_thread`.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from clickhouse_connect.driver.client import Client

from core.stores.message_vectors import Candidate, MessageVector
from core.stores.transcripts import Period, TranscriptScope
from sinks.clickhouse.schema import (
    TABLE,
    VECTOR_COLUMNS,
    VECTORS_TABLE,
    create_vectors_table,
    upgrade_vectors_table,
)
from sinks.clickhouse.store import ClickHouseTranscriptStore, hit_of, search_sql

_THREAD_UP_TO = (
    "environment = {e:String} AND account_id = {a:String} AND thread_id = {t:String} AND seq <= {s:UInt64}"
)

_JOINED = """
WITH {{query_vector:Array(Float64)}} AS qv
SELECT s.thread_id, s.offset, s.score, s.created_at, s.message_id, s.role, s.content,
       if(length(v.vector) = length(qv) AND notEmpty(qv),
          if(L2Norm(v.vector) * L2Norm(qv) = 0, 0.,
             dotProduct(arrayResize(v.vector, length(qv)), qv) / (L2Norm(v.vector) * L2Norm(qv))),
          NULL) AS cosine
FROM ({search}) AS s
ANY LEFT JOIN (
    SELECT thread_id, offset, message_id, vector
    FROM {vectors}
    WHERE {where} AND model = {{model:String}}
) AS v ON s.thread_id = v.thread_id AND s.offset = v.offset AND s.message_id = v.message_id
ORDER BY s.score DESC, s.created_at DESC, s.thread_id, s.offset
SETTINGS join_use_nulls = 0
"""
"""The search's hits in its order, each with the cosine of its vector to the query vector
(`core.transcripts.fusion.cosine`, in SQL); NULL without a vector (an empty array: `join_use_nulls
= 0`) or of another dimension count (`if` evaluates both branches: `arrayResize` keeps the
unused one from failing). Computed for the joined hits only."""


class ClickHouseMessageVectors:
    """The message vectors beside `store`'s `messages` table, on its client (module doc)."""

    def __init__(self, store: ClickHouseTranscriptStore, *, close_store: bool = False) -> None:
        self._store = store
        self._close_store = close_store
        self._client = store.client
        self.database = store.database
        self._vectors = f"{self.database}.{VECTORS_TABLE}"

    async def ensure_schema(self) -> None:
        def call(client: Client) -> None:
            client.command(create_vectors_table(self.database))
            for statement in upgrade_vectors_table(self.database):
                client.command(statement)

        await self._client.run("vectors schema", call)

    async def instance_id(self) -> str:
        return await self._store.instance_id()

    async def close(self) -> None:
        """Close the transcript store's client when built with `close_store` (a processor's own)."""
        if self._close_store:
            await self._store.close()

    async def insert_vectors(self, vectors: Sequence[MessageVector]) -> None:
        if not vectors:
            return
        data = [
            [
                v.environment,
                v.account_id,
                v.agent_id,
                v.user_id,
                v.thread_id,
                v.offset,
                v.seq,
                v.message_id,
                v.model,
                array("b", v.vector).tolist(),
                v.shard,
            ]
            for v in vectors
        ]

        def call(client: Client) -> None:
            client.insert(self._vectors, data, column_names=list(VECTOR_COLUMNS))

        await self._client.run("vectors insert", call)

    async def delete_thread(self, environment: str, account_id: str, thread_id: str, up_to_seq: int) -> int:
        params = {"e": environment, "a": account_id, "t": thread_id, "s": up_to_seq}
        count = f"SELECT count() FROM {self._vectors} WHERE {_THREAD_UP_TO}"

        def call(client: Client) -> int:  # a lightweight DELETE, waited for (lightweight_deletes_sync)
            found = int(client.query(count, parameters=params).result_rows[0][0])
            if found:
                client.command(f"DELETE FROM {self._vectors} WHERE {_THREAD_UP_TO}", parameters=params)
            return found

        return await self._client.run("vectors delete", call)

    async def count_thread_rows(
        self, environment: str, account_id: str, thread_id: str, up_to_seq: int
    ) -> int:
        params = {"e": environment, "a": account_id, "t": thread_id, "s": up_to_seq}
        sql = f"SELECT count() FROM {self._vectors} WHERE {_THREAD_UP_TO}"
        rows = await self._client.run("vectors count", lambda c: c.query(sql, parameters=params).result_rows)
        return int(rows[0][0])

    async def candidates(
        self,
        scope: TranscriptScope,
        query: str,
        *,
        model: str,
        query_vector: Sequence[float] | None,
        thread_id: str | None = None,
        limit: int,
        period: Period | None = None,
    ) -> list[Candidate]:
        table = f"{self.database}.{TABLE}"
        found = search_sql(table, scope, query, thread_id=thread_id, limit=limit, period=period)
        if found is None:
            return []
        search, params, where = found
        params["model"] = model
        params["query_vector"] = list(query_vector) if query_vector is not None else []
        sql = _JOINED.format(search=search, vectors=self._vectors, where=where)

        def call(client: Client) -> list[Candidate]:
            rows = client.query(sql, parameters=params).result_rows
            return [
                Candidate(hit=hit_of(row), cosine=None if row[7] is None else float(row[7])) for row in rows
            ]

        return await self._client.run("search with vectors", call)

    async def clock(self) -> datetime:
        rows = await self._client.run("clock", lambda c: c.query("SELECT now64(6, 'UTC')").result_rows)
        stamp: datetime = rows[0][0]
        return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)

    async def prune(self, inserted_before: datetime) -> None:
        before = (
            inserted_before.astimezone(UTC) if inserted_before.tzinfo else inserted_before.replace(tzinfo=UTC)
        )
        params: dict[str, Any] = {"before": before}
        key = "(environment, account_id, thread_id, offset, message_id)"
        older = f"SELECT count() FROM {self._vectors} WHERE inserted_at < {{before:DateTime64(6, 'UTC')}}"
        sql = (
            f"DELETE FROM {self._vectors} WHERE inserted_at < {{before:DateTime64(6, 'UTC')}} "
            f"AND {key} NOT IN (SELECT {key} FROM {self.database}.{TABLE})"
        )

        def call(client: Client) -> None:
            if client.query(older, parameters=params).result_rows[0][0]:  # none: no scan of messages
                client.command(sql, parameters=params)

        await self._client.run("vectors prune", call)
