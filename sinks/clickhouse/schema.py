"""The DDL of the transcript projection: one database, the `messages` table, a deduplicated view.

`messages` holds one row per journal message, written by `clickhouse-projection` and read by the
transcript tools and by data teams (README, "Transcript projection (ClickHouse) for data teams"):

- engine `ReplacingMergeTree(inserted_at)`, `ORDER BY (environment, account_id, agent_id,
  thread_id, offset)`: the sorting key is the identity of a message (a thread belongs to one
  agent, so it is (environment, account_id, thread_id, offset)); copies of a message inserted
  again (redelivery, replay) are merged away in the background, and every read of this package
  is dedup-safe before that (`LIMIT 1 BY` the key, `uniqExact` over it, or `FINAL`);
- `PARTITION BY toYYYYMM(created_at)`: time-range queries prune months;
- `seq` and `shard`: the message's journal shard (`core.sharding.shards`, 0 with one shard and for
  rows written before shards existed) and its seq within that shard;
- `terms`: the search terms of a user or assistant message (`core.transcripts.terms`), separated
  by single spaces (a term never holds whitespace; empty for the other roles, and for rows
  written before the column existed, until a rebuild), and `context_terms`, the `terms` of the
  user/assistant message before it in its thread (its search document is both:
  `splitByWhitespace`). Strings rather than `Array(String)`: an insert writes one value per row
  instead of one per term (~3x less insert CPU, measured), and search splits only the rows it
  scans. No index on either: search reads every message of its scope for the BM25
  statistics anyway (`sinks.clickhouse.store.SEARCH_SQL`), so an index would only cost inserts;
- a `text` index on `content` (tokens split on non-alphanumeric ASCII characters, lower-cased by
  the `lowerUTF8` preprocessor: search tokens must be lower-cased the same way, in SQL, e.g.
  `tokens(lowerUTF8(q), 'splitByNonAlpha')`) and a bloom filter on `tool_call_id`;
- `fsync_after_insert = 1`, `fsync_part_directory = 1`: an insert returns only once its part is
  on disk, so the processor commits offsets only for rows that survive a machine crash (the cost
  is small at the processor's batch sizes);
- `old_parts_lifetime = 60`: merged-away parts are removed after a minute (an embedded engine
  lives in short processes and would otherwise keep them for 8 minutes).

The view `messages_dedup` is `messages FINAL`: one row per message, for ad-hoc queries.
Database and table names are identifiers checked by `check_identifier` (they are formatted into
SQL; values never are).
"""

from __future__ import annotations

import re

TABLE = "messages"
VIEW = "messages_dedup"
REBUILD_PREFIX = "messages_rebuild_"

_IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

COLUMNS: tuple[str, ...] = (
    "environment",
    "account_id",
    "agent_id",
    "user_id",
    "thread_id",
    "message_id",
    "offset",
    "seq",
    "role",
    "content",
    "reasoning",
    "tool_call_id",
    "tool_name",
    "tool_arguments",
    "tool_result",
    "created_at",
    "token_count",
    "terms",
    "context_terms",
    "shard",
)
"""The columns an insert writes, in order (`inserted_at` takes its default)."""


def check_identifier(name: str) -> str:
    """`name` if it is a plain SQL identifier (letters, digits, `_`; 1-63 chars), else ValueError."""
    if not _IDENTIFIER_RE.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid ClickHouse identifier (A-Z a-z 0-9 _, at most 63)")
    return name


def create_database(database: str) -> str:
    # Atomic: supports EXCHANGE TABLES (chdb's own `default` database is an Overlay database)
    return f"CREATE DATABASE IF NOT EXISTS {check_identifier(database)} ENGINE = Atomic"


def upgrade_table(database: str, table: str = TABLE) -> list[str]:
    """The statements that bring a table created by an earlier version to this schema (idempotent:
    each adds only what is missing; rows written before keep empty `terms` until a rebuild)."""
    name = f"{check_identifier(database)}.{check_identifier(table)}"
    return [
        f"ALTER TABLE {name} ADD COLUMN IF NOT EXISTS terms String AFTER inserted_at",
        f"ALTER TABLE {name} ADD COLUMN IF NOT EXISTS context_terms String AFTER terms",
        f"ALTER TABLE {name} ADD COLUMN IF NOT EXISTS shard UInt16 DEFAULT 0 AFTER seq",
    ]


def create_table(database: str, table: str = TABLE) -> str:
    return f"""
CREATE TABLE IF NOT EXISTS {check_identifier(database)}.{check_identifier(table)}
(
    environment LowCardinality(String),
    account_id String,
    agent_id String,
    user_id Nullable(String),
    thread_id String,
    message_id String,
    offset UInt64,
    seq UInt64,
    shard UInt16 DEFAULT 0,
    role Enum8('system' = 1, 'user' = 2, 'assistant' = 3, 'tool' = 4),
    content String,
    reasoning Nullable(String),
    tool_call_id Nullable(String),
    tool_name Nullable(String),
    tool_arguments Nullable(String),
    tool_result Nullable(String),
    created_at DateTime64(6, 'UTC'),
    token_count UInt32,
    inserted_at DateTime64(6, 'UTC') DEFAULT now64(6),
    terms String,
    context_terms String,
    INDEX content_text content TYPE text(tokenizer = splitByNonAlpha, preprocessor = lowerUTF8(content)),
    INDEX tool_call_bloom tool_call_id TYPE bloom_filter GRANULARITY 1
)
ENGINE = ReplacingMergeTree(inserted_at)
PARTITION BY toYYYYMM(created_at)
ORDER BY (environment, account_id, agent_id, thread_id, offset)
SETTINGS old_parts_lifetime = 60, fsync_after_insert = 1, fsync_part_directory = 1
"""


INSTANCE_TABLE = "instance"
"""One row naming this store: a random id written when the database is first used, so that a
store created anew (another server, a wiped embedded directory) is told apart from the one a
consumer group's stored progress was made on (`TranscriptStore.instance_id`)."""


def create_instance_table(database: str) -> str:
    db = check_identifier(database)
    return (
        f"CREATE TABLE IF NOT EXISTS {db}.{INSTANCE_TABLE} "
        "(id String, created DateTime64(6, 'UTC') DEFAULT now64(6)) ENGINE = MergeTree ORDER BY (created, id)"
    )


def create_view(database: str) -> str:
    db = check_identifier(database)
    return f"CREATE VIEW IF NOT EXISTS {db}.{VIEW} AS SELECT * FROM {db}.{TABLE} FINAL"


VECTORS_TABLE = "message_vectors"
"""The dense vectors of messages (`core.stores.message_vectors`), written by `transcript-vectors`."""

VECTOR_COLUMNS: tuple[str, ...] = (
    "environment",
    "account_id",
    "agent_id",
    "user_id",
    "thread_id",
    "offset",
    "seq",
    "message_id",
    "model",
    "vector",
    "shard",
)
"""The columns an insert into `message_vectors` writes, in order (`inserted_at` takes its default)."""


def create_vectors_table(database: str) -> str:
    """`message_vectors`: one row per (message, model), keyed and deduplicated like `messages`
    (`ReplacingMergeTree(inserted_at)` on the message's identity; reads take one copy), durable on
    return like `messages` (fsync); `vector` holds the int8 components
    (`core.transcripts.fusion.quantize`), so that the cosine to a query is computed in SQL; `seq`,
    the message's journal seq (within its journal `shard`), bounds a thread deletion
    (`upgrade_vectors_table`)."""
    return f"""
CREATE TABLE IF NOT EXISTS {check_identifier(database)}.{VECTORS_TABLE}
(
    environment LowCardinality(String),
    account_id String,
    agent_id String,
    user_id Nullable(String),
    thread_id String,
    offset UInt64,
    seq UInt64,
    shard UInt16 DEFAULT 0,
    message_id String,
    model LowCardinality(String),
    vector Array(Int8),
    inserted_at DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree(inserted_at)
ORDER BY (environment, account_id, agent_id, thread_id, offset)
SETTINGS old_parts_lifetime = 60, fsync_after_insert = 1, fsync_part_directory = 1
"""


def upgrade_vectors_table(database: str) -> list[str]:
    """The statements that bring a `message_vectors` made by an earlier version to this schema
    (idempotent). Its rows keep `seq` 0, so a deletion of their thread deletes them all (a vector
    of a thread id used again after its deletion is made again by a replay)."""
    name = f"{check_identifier(database)}.{VECTORS_TABLE}"
    return [
        f"ALTER TABLE {name} ADD COLUMN IF NOT EXISTS seq UInt64 AFTER offset",
        f"ALTER TABLE {name} ADD COLUMN IF NOT EXISTS shard UInt16 DEFAULT 0 AFTER seq",
    ]
