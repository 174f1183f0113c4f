"""The statements other than SELECT, checked on the printed text (SELECT trees are checked on the
real engine's parse in test_service.py)."""

from __future__ import annotations

import pytest

from core.sql.errors import ACCESS_DENIED, NOT_IMPLEMENTED, READONLY, SqlError
from core.sql.policy import check_select, check_statement, denied_function, is_select


@pytest.mark.parametrize(
    ("printed", "fmt"),
    [
        ("DESCRIBE TABLE memstream.messages", None),
        ("DESCRIBE TABLE `messages` FORMAT JSON", "JSON"),
        ("SHOW TABLES", None),
        ("SHOW TABLES FROM memstream LIKE 'mess%'", None),
        ("SHOW DATABASES FORMAT CSV", "CSV"),
        ("EXISTS TABLE memstream.message_vectors", None),
    ],
)
def test_describe_show_and_exists_pass(printed: str, fmt: str | None) -> None:
    assert check_statement(printed, "memstream").format == fmt


@pytest.mark.parametrize(
    ("printed", "code"),
    [
        ("DESCRIBE TABLE system.processes", ACCESS_DENIED),
        ("DESCRIBE TABLE other.t", ACCESS_DENIED),
        ("SHOW TABLES FROM other", ACCESS_DENIED),
        ("DESCRIBE TABLE file('/etc/passwd', 'CSV')", NOT_IMPLEMENTED),
        ("SHOW CREATE TABLE memstream.messages", NOT_IMPLEMENTED),
        ("EXPLAIN SYNTAX SELECT 1", NOT_IMPLEMENTED),
        ("INSERT INTO memstream.messages FORMAT Values", READONLY),
        ("DROP TABLE memstream.messages", READONLY),
        ("SET readonly = 0", READONLY),
    ],
)
def test_other_statements_are_refused(printed: str, code: int) -> None:
    with pytest.raises(SqlError) as caught:
        check_statement(printed, "memstream")
    assert caught.value.code == code


def test_select_kinds_and_denied_names() -> None:
    assert is_select("SELECT 1") and is_select("WITH 1 AS x SELECT x") and not is_select("DESCRIBE TABLE t")
    assert denied_function("FILE") and denied_function("dictGetOrDefault") and denied_function("AIGenerate")
    assert not denied_function("hasAnyTokens") and not denied_function("version")
    with pytest.raises(SqlError) as caught:
        check_select({"type": "ExplainQuery"}, "memstream")
    assert caught.value.code == NOT_IMPLEMENTED
