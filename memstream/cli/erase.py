"""`memstream erase-user`: erase a user of an account everywhere, run inside the node over its admin
API (`memstream.api.routes.admin_users`). Progress goes to stderr. `memstream.cli` adds it to the
group.
"""

from __future__ import annotations

import json
from typing import Any

import click

from memstream.cli.admin import NODE_OPTION, _admin_call, _node_client, _streamed


def report_lines(report: dict[str, Any]) -> list[str]:
    """The erasure report for people: one line per step."""
    erased = report["erased"]
    lines = [
        f"erased user {report['user_id']} of account {report['account_id']} (erasure {report['erasure_id']}, "
        f"completed {report['completed_at']})"
    ]
    threads = erased.get("threads", {})
    ids = sorted({d["thread_id"] for d in threads.get("deletions", [])})
    shown = ", ".join(ids[:20]) + (f", ... ({len(ids) - 20} more)" if len(ids) > 20 else "")
    counts = "; ".join(
        f"{step}: " + ", ".join(f"{n} {name}" for name, n in sorted(values.items()))
        for step, values in sorted(threads.get("deleted", {}).items())
    )
    lines.append(f"  threads: {threads.get('threads', 0)} deleted" + (f" ({shown})" if ids else ""))
    if counts:
        lines.append(f"    {counts}")
    for step, values in erased.items():
        if step != "threads":
            lines.append(
                f"  {step}: " + ", ".join(f"{name.replace('_', ' ')} {n}" for name, n in values.items())
            )
    return lines


@click.command("erase-user")
@click.option("--account", "account_id", required=True, help="The account of the user.")
@click.option("--user", "user_id", required=True, help="The user id, as the account's appends name it.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report on stdout.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@NODE_OPTION
def erase_user_command(account_id: str, user_id: str, as_json: bool, yes: bool, node_url: str | None) -> None:
    """Erase a user of an account everywhere: every thread of the user (messages, row, the
    transcript projection and message vectors, summaries, Redis state, the memory extracted from
    it), their private memory entries and quarantined entries; the shared entries they wrote keep
    their content and lose the author. Prints what was erased where.

    It cannot be undone. An erasure stopped midway is finished by the same command again (or
    when the node starts); once complete, the same command erases what the user wrote since.
    Exit 0 done, 1 refused or failed (unknown user, erasure incomplete), 3 no node answers.
    """
    from core.errors import InvalidInput
    from core.ids import require_id

    for value, option in ((account_id, "--account"), (user_id, "--user")):
        try:
            require_id(value, option.removeprefix("--"))
        except InvalidInput as exc:
            raise click.BadParameter(exc.message, param_hint=option) from None
    if not yes:
        click.confirm(
            f"Erase user {user_id!r} of account {account_id!r} everywhere? This cannot be undone", abort=True
        )
    with _node_client(node_url) as client:
        report = _admin_call(
            lambda: _streamed(client, "DELETE", f"/admin/v1/accounts/{account_id}/users/{user_id}")
        )
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        for line in report_lines(report):
            click.echo(line)
