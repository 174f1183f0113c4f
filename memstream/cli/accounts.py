"""`memstream export` and `memstream import`: an account as JSON Lines (docs/export-format.md),
run inside the node over its admin API (`memstream.api.routes.admin_accounts`). Progress goes to
stderr. `memstream.cli` adds them to the group.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import IO, Any

import click

from memstream.cli.admin import NODE_OPTION, _admin_call, _node_client, _streamed

TYPES = ("agent", "thread", "message", "summary", "memory_entry")


def _counts(counts: dict[str, Any]) -> str:
    return ", ".join(f"{counts.get(kind, 0)} {kind.replace('_', ' ')}" for kind in TYPES)


@click.command("export")
@click.option("--account", "account_id", required=True, help="The account to export.")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The file to write (default: stdout). Written whole or not at all.",
)
@NODE_OPTION
def export_command(account_id: str, output: Path | None, node_url: str | None) -> None:
    """Export an account: its agents, threads with their messages, summaries and memory entries,
    as JSON Lines (format_version 1; see docs/export-format.md).

    The same account always gives the same bytes, and an import of the file into an empty account
    exports as the same file. Exit 0 done, 1 refused or failed, 3 no node answers.
    """
    partial = output.with_name(output.name + ".partial") if output is not None else None
    sink: IO[str] = partial.open("w", encoding="utf-8", newline="\n") if partial else sys.stdout

    def write(line: str) -> None:
        sink.write(line + "\n")

    try:
        with _node_client(node_url) as client:
            result = _admin_call(
                lambda: _streamed(client, "GET", f"/admin/v1/accounts/{account_id}/export", on_line=write)
            )
        if partial is not None and output is not None:
            sink.close()
            os.replace(partial, output)
    finally:
        if partial is not None:
            sink.close()
            partial.unlink(missing_ok=True)
    click.echo(f"exported account {account_id}: {_counts(result['counts'])}", err=True)


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--account", "account_id", required=True, help="The account to import into.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report on stdout.")
@NODE_OPTION
def import_command(file: Path, account_id: str, as_json: bool, node_url: str | None) -> None:
    """Import an account export (FILE) into an account of the node.

    The file is checked whole first: a bad file imports nothing. Records already there are left
    alone, so running it again adds nothing. Conflicting data (a message id with other content,
    a thread of another agent, ...) is reported and skipped; the rest is imported. Memory entries
    today's screening rejects are reported, not imported. Exit 0 done, 1 conflicts or refused,
    3 no node answers.
    """
    content = file.read_bytes()
    with _node_client(node_url) as client:
        report = _admin_call(
            lambda: _streamed(client, "POST", f"/admin/v1/accounts/{account_id}/import", content=content)
        )
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(f"imported into account {account_id} in {report['seconds']:.1f}s")
        click.echo(f"added: {_counts(report['added'])}")
        click.echo(f"already there: {_counts(report['unchanged'])}")
        for item in report["renumbered"]:
            click.echo(
                f"renumbered: memory entry {item['entry_id']} -> {item['as']} (its id is another tenant's)"
            )
        for item in report["screened"]:
            click.echo(
                f"not imported (screening): memory entry {item['entry_id']} ({item['agent_id']}, key "
                f"{item['key']!r}): {item['detail']}"
            )
        for item in report["conflicts"]:
            click.echo(f"CONFLICT {item['type']} {item['id']}: {item['detail']}")
    if not report["ok"]:
        sys.exit(1)
