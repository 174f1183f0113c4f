"""`memstream rescreen`: today's screening rules over every stored memory entry
(`memstream.ops.rescreen`), against the configured Postgres. `memstream.cli` adds it to the group."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import uuid

import click

from memstream.cli.settings import load_settings


def _entry_id(_ctx: click.Context, _param: click.Parameter, value: str | None) -> uuid.UUID | None:
    if value is None:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an entry id") from None


@click.command()
@click.option("--account", "account_id", default=None, help="Only this account's entries.")
@click.option("--dry-run", is_flag=True, help="Report what would change; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
@click.option(
    "--after",
    default=None,
    metavar="ENTRY_ID",
    callback=_entry_id,
    help="Resume after this entry id (the last one an interrupted run reported).",
)
@click.option(
    "--batch-size", type=click.IntRange(1, 10_000), default=500, show_default=True, help="Entries per batch."
)
@click.option(
    "--release",
    "release_ids",
    multiple=True,
    metavar="ENTRY_ID",
    help="Move a quarantined entry back into memory instead of rescreening (repeatable).",
)
def rescreen(
    account_id: str | None,
    dry_run: bool,
    as_json: bool,
    after: uuid.UUID | None,
    batch_size: int,
    release_ids: tuple[str, ...],
) -> None:
    """Run every stored memory entry through today's screening rules.

    Entries now rejected are quarantined: kept in Postgres with the reason and the rule, but out of
    every read (recall, pinned facts, browse, the index) until released with --release. Shared
    entries now found sensitive are made private to their author (quarantined when they have
    none). Nothing is deleted; a second run changes nothing. Progress goes to stderr.
    Exit 0 done, 1 failed (a release that is not quarantined, or whose key was taken meanwhile).
    """
    from core.errors import MemstreamError
    from memstream.ops.render import ProgressLine
    from memstream.ops.rescreen import release_entries, render_report, rescreen_once

    settings = load_settings()
    if release_ids:
        try:
            released = asyncio.run(release_entries(settings, release_ids, account_id=account_id))
        except MemstreamError as exc:
            click.echo(f"error ({exc.code}): {exc.message}", err=True)
            sys.exit(1)
        for entry in released:
            click.echo(
                f"released {entry.entry_id} ({entry.account_id}/{entry.agent_id}, key {entry.key!r}): "
                "back in memory; later rescreens keep it while its key and content stay the same"
            )
        return
    line = ProgressLine(lambda text: click.echo(text, nl=False, err=True), tty=sys.stderr.isatty())
    try:
        report = asyncio.run(
            rescreen_once(
                settings,
                account_id=account_id,
                dry_run=dry_run,
                after=after,
                batch_size=batch_size,
                progress=line,
            )
        )
    finally:
        line.finish()
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(report), indent=2))
    else:
        for text in render_report(report):
            click.echo(text)
