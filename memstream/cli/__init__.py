"""The `memstream` command line (entry point `memstream.cli:main`): the stack and node commands
here, the operator commands driven over the node's admin API in `memstream.cli.admin`. Heavy
imports happen inside the commands."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path

import click

from memstream.cli.accounts import export_command, import_command
from memstream.cli.admin import rebuild, replay, republish, verify
from memstream.cli.erase import erase_user_command
from memstream.cli.keys import keys
from memstream.cli.mcp import mcp
from memstream.cli.rescreen import rescreen
from memstream.cli.settings import load_settings
from memstream.cli.sql import sql


@click.group()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Data directory (default ./.memstream, or MEMSTREAM_DATA_DIR).",
)
@click.version_option(package_name="memstream")
def main(data_dir: Path | None) -> None:
    """memstream: memory for AI agents as a Kafka stream-processing pipeline."""
    if data_dir is not None:
        os.environ["MEMSTREAM_DATA_DIR"] = str(data_dir.expanduser().resolve())


@main.command()
def up() -> None:
    """Start the embedded stack (broker, PostgreSQL, Redis) and the node, in the foreground.

    Restarts whatever dies (within a bounded rate). Exit 0 stopped on request, 1 failed, 4 another
    writer took the journal (the node was not restarted).
    """
    from memstream.embedded.process import ServiceError
    from memstream.embedded.supervisor import up as run_up

    settings = load_settings()
    try:
        code = run_up(settings, say=lambda line: click.echo(line, err=False))
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(code)


@main.command()
def node() -> None:
    """Run the node alone (API, journal writer, relay, processors) against configured services.

    Exit 0 stopped on request, 1 failed (or its stop outlived the deadline after SIGINT/SIGTERM),
    4 another writer took the journal: do not restart it before deciding which node owns it.
    """
    from memstream.node import serve
    from memstream.shutdown import exit_process

    settings = load_settings()
    exit_process(serve(settings))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Show whether the stack is running and healthy (exit 0 healthy, 1 unhealthy, 3 not running)."""
    from memstream.embedded.health import status_checks

    settings = load_settings()
    state, checks = status_checks(settings)
    if as_json:
        click.echo(
            json.dumps({"state": state, "checks": [c.__dict__ for c in checks]}, indent=2, default=str)
        )
    else:
        if state is None:
            click.echo(f"no stack started by `memstream up` on {settings.data_path}")
        else:
            click.echo(f"memstream on {state['data_dir']} - API {state['api']}")
        for check in checks:
            click.echo(check.render())
    if state is None and not any(c.ok for c in checks):
        sys.exit(3)
    sys.exit(0 if all(c.ok for c in checks) else 1)


@main.command()
def doctor() -> None:
    """Check everything memstream needs and say what to fix."""
    from memstream.embedded.health import doctor_checks

    settings = load_settings()
    checks = doctor_checks(settings)
    for check in checks:
        click.echo(check.render())
    failed = [c for c in checks if not c.ok]
    click.echo(f"\n{len(checks) - len(failed)} ok, {len(failed)} to fix" if failed else "\nall checks passed")
    sys.exit(1 if failed else 0)


@main.command()
def init() -> None:
    """Prepare configured services: Postgres schema and the declared topics (idempotent)."""
    from memstream.embedded.bootstrap import migrate_schema
    from streams.admin import apply_topics
    from streams.topics import load_topics

    settings = load_settings()
    applied = asyncio.run(migrate_schema(settings))
    click.echo(f"postgres schema: {applied} migration(s) applied")
    click.echo(apply_topics(settings, load_topics()).render())


@main.command()
def hygiene() -> None:
    """Run one agent-memory hygiene pass now: expire due entries, decay idle ones."""
    from memstream.hygiene import hygiene_once

    report = asyncio.run(hygiene_once(load_settings()))
    click.echo(f"expired {report.expired} entries, decayed {report.decayed} entries")


@main.command("config")
def show_config() -> None:
    """Print the resolved configuration (credentials masked)."""
    click.echo(json.dumps(load_settings().describe(), indent=2))


@main.group()
def topics() -> None:
    """Topics declared in topics.yaml."""


@topics.command("apply")
def topics_apply() -> None:
    """Create or update every declared topic on the broker (idempotent)."""
    from streams.admin import apply_topics
    from streams.topics import load_topics

    settings = load_settings()
    report = apply_topics(settings, load_topics())
    click.echo(report.render())


@topics.command("list")
def topics_list() -> None:
    """List the declared topics."""
    from streams.topics import load_topics

    settings = load_settings()
    for spec in load_topics():
        click.echo(f"{settings.topic(spec.name):<40} partitions={spec.partitions}  {spec.description}")


@main.command()
@click.argument("names", nargs=-1)
@click.option(
    "--group", "group", help="Run a named set of processors (thread-memory: thresholds, flush, summarizer)."
)
@click.option("--list", "list_only", is_flag=True, help="List the processors and groups that can run.")
def worker(names: tuple[str, ...], group: str | None, list_only: bool) -> None:
    """Run processors outside the node (their own consumer groups) until Ctrl-C."""
    from memstream.wiring.processors import GROUPS, processor_names
    from memstream.worker import WorkerCannotStart, run_worker

    registered = processor_names()
    if list_only or (not names and group is None):
        click.echo("\n".join(registered) if registered else "no processors are registered yet")
        for name, members in sorted(GROUPS.items()):
            click.echo(f"--group {name}: {' '.join(members)}")
        return
    if group is not None and group not in GROUPS:
        raise click.ClickException(f"unknown group {group!r}; groups: {', '.join(sorted(GROUPS))}")
    from memstream.shutdown import exit_process
    from streams.runtime.errors import ProcessorCrashed, UnknownProcessor

    settings = load_settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        run_worker([*names, *(GROUPS[group] if group is not None else ())], settings)
    except UnknownProcessor as exc:
        raise click.ClickException(str(exc)) from None
    except (ProcessorCrashed, WorkerCannotStart) as exc:
        click.echo(f"error: {exc}", err=True)
        exit_process(1)
    exit_process(0)  # stopped in order: native libraries' teardown must not hold the exit


for _command in (
    replay,
    republish,
    verify,
    rebuild,
    mcp,
    rescreen,
    export_command,
    import_command,
    erase_user_command,
    keys,
    sql,
):
    main.add_command(_command)
