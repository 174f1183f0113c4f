"""The one id validator (`core.ids`): full matches only, and errors that say what is wrong."""

from __future__ import annotations

import re

import asyncpg
import pytest
from pydantic import BaseModel, ValidationError

from core.auth import issue_key, revoke_key
from core.config import Settings
from core.errors import InvalidInput
from core.ids import (
    ENVIRONMENT,
    ID,
    ID_PATTERN,
    Id,
    check_id,
    require_api_key_id,
    require_id,
    shown_id,
)
from sinks.clickhouse.schema import check_identifier
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.slatedb import keys
from streams.topics import TOPIC_NAME_RE

VALID = ["t1", "a", "A.b_c:d@e-f", "9" * 128, "conv-2026-001", "user@example.com"]
# Every way an id can smuggle a line break or a character no key/path/SQL name may hold.
INVALID = [
    ("t1\n", "'\\n' (U+000A) at position 2"),
    ("t1\r", "'\\r' (U+000D) at position 2"),
    ("t1\r\n", "'\\r' (U+000D) at position 2"),
    ("\nt1", "starts with '\\n' (U+000A)"),
    ("t\n1", "'\\n' (U+000A) at position 1"),
    ("t1\x00", "'\\x00' (U+0000) at position 2"),
    ("t1\u2028", "U+2028"),  # line separator
    ("t1\u2029", "U+2029"),  # paragraph separator
    ("t1\x85", "U+0085"),  # next line
    ("t1\x0b", "U+000B"),  # vertical tab
    ("t1\t", "U+0009"),
    ("t 1", "' ' (U+0020) at position 1"),
    ("t/1", "'/' (U+002F) at position 1"),
    ("tü", "U+00FC"),
    ("t\u200b1", "U+200B"),  # zero-width space
    ("-t1", "starts with '-'"),
    ("", "it is empty"),
    ("t" * 129, "it is 129 characters"),
]


@pytest.mark.parametrize("value", VALID)
def test_valid_ids(value: str) -> None:
    assert check_id(value) == value
    assert require_id(value, "thread_id") == value
    assert ID.matches(value)


@pytest.mark.parametrize(("value", "reason"), INVALID)
def test_invalid_ids_say_which_character(value: str, reason: str) -> None:
    assert not ID.matches(value)
    with pytest.raises(ValueError, match="must be 1-128 characters") as raised:
        check_id(value)
    assert reason in str(raised.value)
    with pytest.raises(InvalidInput) as info:
        require_id(value, "user_id")
    assert info.value.field == "user_id"
    assert reason in info.value.message


@pytest.mark.parametrize(("value", "_reason"), INVALID)
def test_reports_show_them_escaped_on_one_line(value: str, _reason: str) -> None:
    shown = shown_id(value)
    assert shown == repr(value) and shown.isprintable()
    assert [shown_id(valid) for valid in VALID] == VALID


@pytest.mark.parametrize(("value", "_reason"), INVALID)
def test_journal_keys_refuse_them_too(value: str, _reason: str) -> None:
    with pytest.raises(InvalidInput) as info:
        keys.check_key_part(value, "thread_id")
    assert info.value.field == "thread_id"
    with pytest.raises(InvalidInput):
        keys.cursor_key(value)


def test_pydantic_id_field_is_a_full_match_with_its_pattern_in_the_schema() -> None:
    class Model(BaseModel):
        thread_id: Id

    assert Model(thread_id="t1").thread_id == "t1"
    with pytest.raises(ValidationError, match="U\\+000A"):
        Model(thread_id="t1\n")
    assert Model.model_json_schema()["properties"]["thread_id"]["pattern"] == ID_PATTERN
    # The JSON Schema pattern (ECMA-262: `$` is the very end) accepts exactly what the validator does.
    assert re.fullmatch(ID.body, "t1") and not re.fullmatch(ID.body, "t1\n")


@pytest.mark.parametrize("value", ["dev", "prod-eu_1", "a" * 32])
def test_valid_environments(value: str) -> None:
    assert ENVIRONMENT.require(value, "environment") == value


@pytest.mark.parametrize("value", ["dev\n", "Dev", "dev.x", "", "a" * 33, "dev\u2028"])
def test_invalid_environments(value: str) -> None:
    with pytest.raises(InvalidInput) as info:
        ENVIRONMENT.require(value, "environment")
    assert info.value.field == "environment"


def test_api_key_ids() -> None:
    assert require_api_key_id("key_0123456789abcdef") == "key_0123456789abcdef"
    for bad in ["key_0123456789abcdef\n", "key_0123", "msk_0123456789abcdef", "key_0123456789ABCDEF"]:
        with pytest.raises(InvalidInput, match="not an API key id"):
            require_api_key_id(bad)


def test_other_names_are_full_matches_too() -> None:
    """Every other `$`-anchored name check is a full match: a trailing newline never passes."""
    with pytest.raises(ValueError):
        check_identifier("memstream\n")
    assert TOPIC_NAME_RE.fullmatch("journal.messages") and not TOPIC_NAME_RE.fullmatch("journal.messages\n")


async def test_cli_inputs_go_through_it(pool: asyncpg.Pool) -> None:
    """`memstream keys create --account ...` and the settings use the same validator."""
    for account, environment, field in [("acme\n", "test", "account_id"), ("acme", "test\n", "environment")]:
        with pytest.raises(InvalidInput) as info:
            await issue_key(PostgresApiKeys(pool), account, environment)
        assert info.value.field == field
    with pytest.raises(InvalidInput, match="not an API key id"):
        await revoke_key(PostgresApiKeys(pool), "acme", "test", "key_0123456789abcdef\n")
    assert await pool.fetchval("SELECT count(*) FROM api_keys") == 0
    with pytest.raises(ValidationError, match="U\\+000A"):
        Settings(environment="prod\n")
