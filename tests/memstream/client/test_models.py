"""The client's result models mirror the API's response bodies field for field."""

from __future__ import annotations

from pydantic import BaseModel

from memstream.api import schemas
from memstream.client import models


def _fields(model: type[BaseModel]) -> dict[str, object]:
    return {name: field.annotation for name, field in model.model_fields.items()}


def test_every_mirror_has_the_fields_and_types_of_the_api_schema() -> None:
    pairs: list[tuple[type[BaseModel], type[BaseModel]]] = [
        (models.Thread, schemas.ThreadResponse),
        (models.AppendResult, schemas.AppendResponse),
        (models.MessagesPage, schemas.MessagesPage),
        (models.Agent, schemas.AgentResponse),
        (models.ToolResult, schemas.InvokeToolResponse),
        (models.MemoryPage, schemas.MemoryPage),
        (models.EditResult, schemas.EditResponse),
    ]
    for mirror, schema in pairs:
        mine = _fields(mirror)
        mine.pop("created", None)  # client only
        assert mine == _fields(schema), mirror.__name__


def test_unknown_fields_of_a_newer_server_are_ignored() -> None:
    agent = models.Agent.model_validate({"agent_id": "a", "capabilities": [], "tools": [], "new_field": 1})
    assert agent.agent_id == "a"
