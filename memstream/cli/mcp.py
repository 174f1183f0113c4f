"""`memstream mcp --agent ID`: one agent's tools as an MCP server over stdio, for MCP clients that
start their servers as commands (Claude Desktop, Cursor, ...). It relays to a running node's API
(`memstream.mcp_server.stdio`); `memstream.cli` adds it to the `memstream` group.

The API key comes from, first to last: `--key-file PATH`, the environment variable
`MEMSTREAM_API_KEY`, the key `memstream up` wrote to `{data_dir}/api-key`. Never from the command
line itself (a process list shows it). stdout carries the protocol: messages go to stderr. Exit 1
when the node refuses the key or the agent, or does not answer (the node's message says why).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import click

from memstream.cli.admin import NODE_OPTION
from memstream.cli.settings import load_settings

KEY_ENV = "MEMSTREAM_API_KEY"


def _api_key(key_file: Path | None, default_file: Path) -> str:
    if key_file is None:
        from_env = os.environ.get(KEY_ENV, "").strip()
        if from_env:
            return from_env
    path = key_file or default_file
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise click.ClickException(
            f"no API key: set {KEY_ENV}, give --key-file, or run `memstream up` (it writes {default_file}); "
            f"reading {path} failed: {exc.strerror or exc}"
        ) from None
    if not key:
        raise click.ClickException(f"the API key file {path} is empty")
    return key


@click.command("mcp")
@click.option("--agent", "agent_id", required=True, help="The agent whose tools are served.")
@click.option("--user", "user_id", default=None, help="The user the agent acts for (their private memory).")
@click.option(
    "--thread",
    "thread_id",
    default=None,
    help="The conversation (a thread of the agent); calls then act for its user.",
)
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"File holding the API key (default: ${KEY_ENV}, else DATA_DIR/api-key).",
)
@NODE_OPTION
def mcp(
    agent_id: str, user_id: str | None, thread_id: str | None, key_file: Path | None, node_url: str | None
) -> None:
    """Serve one agent's tools (memory when bound, journal search and tool-call view) to an MCP
    client over stdio, through a running node's API."""
    from core.errors import InvalidInput
    from memstream.mcp_server.stdio import serve_stdio
    from memstream.mcp_server.tools import ToolFailed

    settings = load_settings()
    key = _api_key(key_file, settings.data_path / "api-key")
    try:
        asyncio.run(
            serve_stdio(node_url or settings.api_url, key, agent_id, user_id=user_id, thread_id=thread_id)
        )
    except InvalidInput as exc:
        raise click.BadParameter(exc.message) from None
    except ToolFailed as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from None
