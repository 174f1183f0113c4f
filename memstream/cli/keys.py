"""`memstream keys`: API keys for agents and MCP gateways, and data-access keys for the SQL
endpoint, straight in the configured Postgres (only a key's hash is stored). `memstream.cli` adds
the group."""

from __future__ import annotations

import asyncio

import click

from core.config import Settings
from memstream.cli.settings import load_settings


def _scope(account: str | None, all_accounts: bool) -> str | None:
    if all_accounts == (account is not None):
        raise click.UsageError("give either --account ACCOUNT or --all-accounts")
    return account


@click.group()
def keys() -> None:
    """API keys (agents, MCP gateways) and data-access keys (the SQL endpoint).

    Every API key belongs to one account; a data-access key to one account or to all of them."""


@keys.command("create")
@click.option("--account", default=None, help="Account id the key belongs to.")
@click.option(
    "--all-accounts",
    is_flag=True,
    help="A data-access key that reads every account of the environment (with --data-access).",
)
@click.option("--label", default="", help="A note to recognise the key by.")
@click.option(
    "--surface",
    type=click.Choice(["agent", "mcp"]),
    default="agent",
    show_default=True,
    help="Who uses an API key: an agent platform, or an MCP gateway (agent-only tools such as the "
    "journal tools are hidden from mcp keys).",
)
@click.option(
    "--data-access",
    is_flag=True,
    help="A key for the read-only SQL endpoint (data teams), not for the agent API.",
)
def keys_create(account: str | None, all_accounts: bool, label: str, surface: str, data_access: bool) -> None:
    """Create a key and print it once (only its hash is stored)."""
    from core.errors import InvalidInput
    from core.sql.access import issue_data_key
    from memstream.embedded.bootstrap import create_key, with_keys

    settings = load_settings()
    if not data_access:
        if all_accounts or account is None:
            raise click.UsageError("an API key belongs to one account: give --account ACCOUNT")
        key = asyncio.run(create_key(settings, account, label, surface=surface))
    else:
        if surface != "agent":
            raise click.UsageError(
                "--surface is for API keys; a data-access key works only on the SQL endpoint"
            )
        scope = _scope(account, all_accounts)
        try:
            key = asyncio.run(
                with_keys(settings, lambda store: issue_data_key(store, settings.environment, scope, label))
            )
        except InvalidInput as exc:
            raise click.ClickException(exc.message) from None
    click.echo(key)


@keys.command("list")
@click.option("--account", default=None, help="The account whose keys to list.")
@click.option("--all-accounts", is_flag=True, help="List the data-access keys that read every account.")
def keys_list(account: str | None, all_accounts: bool) -> None:
    """List keys: id, kind, visible prefix, label, created, revoked."""
    from core.sql.access import list_keys
    from memstream.embedded.bootstrap import with_keys

    settings: Settings = load_settings()
    scope = _scope(account, all_accounts)
    records = asyncio.run(with_keys(settings, lambda store: list_keys(store, settings.environment, scope)))
    if not records:
        click.echo("no keys")
    for record in records:
        kind = "data-access" if record.surface == "data" else f"api ({record.surface})"
        revoked = f"  revoked {record.revoked_at:%Y-%m-%d %H:%M}" if record.revoked_at else ""
        label = f"  {record.label!r}" if record.label else ""
        created = f"{record.created_at:%Y-%m-%d %H:%M}"
        click.echo(f"{record.key_id}  {kind:<11}  {record.prefix}...  created {created}{revoked}{label}")


@keys.command("revoke")
@click.argument("key_id")
@click.option("--account", default=None, help="The account the key belongs to.")
@click.option("--all-accounts", is_flag=True, help="The key is a data-access key of every account.")
def keys_revoke(key_id: str, account: str | None, all_accounts: bool) -> None:
    """Revoke a key (KEY_ID as `memstream keys list` shows it); refused at once on this node, and on
    every node within seconds."""
    from core.errors import InvalidInput, NotFound
    from core.sql.access import revoke_key
    from memstream.embedded.bootstrap import with_keys

    settings = load_settings()
    scope = _scope(account, all_accounts)
    try:
        asyncio.run(with_keys(settings, lambda store: revoke_key(store, settings.environment, scope, key_id)))
    except (InvalidInput, NotFound) as exc:
        raise click.ClickException(exc.message) from None
    click.echo(f"revoked {key_id}")
