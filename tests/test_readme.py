"""README's table of tool arguments says what the tool definitions say: every argument of every
tool, which are required, and each default."""

from __future__ import annotations

import json
import re
from pathlib import Path

from core.memory.tools import FORGET_SPEC, RECALL_SPEC, STORE_SPEC
from core.transcripts.tools import SEARCH_SPEC, VIEW_SPEC

README = Path(__file__).resolve().parents[1] / "README.md"
ROW_RE = re.compile(
    r"^\| `(?P<tool>[a-z_]+)` \| `(?P<arg>[a-z_]+)` \| (?P<values>[^|]+) \| (?P<default>[^|]+) \|$"
)


def _shown(value: object) -> str:
    """How the table writes a default: code for strings and booleans, 32,768 for numbers."""
    if isinstance(value, bool | str):
        return f"`{json.dumps(value).strip(chr(34))}`"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def test_the_tool_argument_table_matches_the_tool_definitions() -> None:
    rows = {
        (m["tool"], m["arg"]): m["default"].strip()
        for m in map(ROW_RE.match, README.read_text().splitlines())
        if m is not None
    }
    expected: dict[tuple[str, str], object] = {}
    for spec in (STORE_SPEC, RECALL_SPEC, FORGET_SPEC, SEARCH_SPEC, VIEW_SPEC):
        params = spec.function.parameters
        for name, schema in params["properties"].items():
            if name in params.get("required", []):
                expected[(spec.function.name, name)] = "required"
            elif "default" in schema:
                expected[(spec.function.name, name)] = _shown(schema["default"])
            else:
                expected[(spec.function.name, name)] = None  # no default in the schema: described
    assert set(rows) == set(expected)
    for key, default in expected.items():
        if default is None:
            assert rows[key] != "required", key
        else:
            assert rows[key] == default, key
