"""Parameters shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from core.journal.models import ID_PATTERN, Id

ThreadIdPath = Annotated[
    Id,
    Path(
        description="Your id of the thread (1-128 of A-Z a-z 0-9 . _ : @ -). Ids are per account: "
        "two accounts using the same id have two separate threads.",
        examples=["conv-2026-001"],
        json_schema_extra={"pattern": ID_PATTERN},
    ),
]

UserIdPath = Annotated[
    Id,
    Path(
        description="Your id of the user (1-128 of A-Z a-z 0-9 . _ : @ -), as your appends and tool calls "
        "name it. Ids are per account: two accounts using the same id have two separate users.",
        examples=["u-42"],
        json_schema_extra={"pattern": ID_PATTERN},
    ),
]
