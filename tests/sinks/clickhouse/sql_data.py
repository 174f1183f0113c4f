"""Rows of two accounts (and of another environment) in a test database of the transcript store,
for the SQL endpoint's tenancy tests: what `acme` may see and what it must never see."""

from __future__ import annotations

from sinks.clickhouse.store import ClickHouseTranscriptStore
from tests.sinks.clickhouse.rows import row

VISIBLE = "acme"
HIDDEN = "globex"
SECRET = "globex-secret"
"""Text only the hidden rows hold (content, thread and user ids): it must never come out for `acme`."""


async def fill(store: ClickHouseTranscriptStore, environment: str = "test") -> None:
    """Two threads of `acme` (one with a duplicate copy), one of `globex`, and one of `acme` in
    another environment; a vector per message of each; the `instance` table (no tenancy columns)."""
    await store.instance_id()
    await store.insert(
        [
            row("th-a", 0, "refund please", environment=environment, account_id=VISIBLE, user_id="u-1"),
            row("th-a", 1, "refund done", role="assistant", environment=environment, account_id=VISIBLE),
            row("th-b", 0, "hello there", environment=environment, account_id=VISIBLE, user_id="u-2"),
            row(
                f"th-{SECRET}",
                0,
                f"{SECRET} text",
                environment=environment,
                account_id=HIDDEN,
                user_id=SECRET,
            ),
            row(f"th-{SECRET}-env", 0, f"{SECRET} other env", environment="other", account_id=VISIBLE),
        ]
    )
    await store.insert(
        [row("th-a", 0, "refund please", environment=environment, account_id=VISIBLE, user_id="u-1")]
    )
    db = store.database
    await store.client.run(
        "vectors",
        lambda client: client.command(
            f"INSERT INTO {db}.message_vectors (environment, account_id, agent_id, user_id, thread_id, "
            "offset, seq, message_id, model, vector) SELECT environment, account_id, agent_id, user_id, "
            f"thread_id, offset, seq, message_id, 'm', [1, 2] FROM {db}.messages"
        ),
    )
