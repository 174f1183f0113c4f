"""The operator commands (`replay`, `republish`, `verify`, `rebuild`): they run inside the node (it
owns the engines), driven over its admin API (`memstream.ops.node_client`). Exit 3 when no node
answers. `memstream.cli` adds them to the `memstream` group.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from memstream.cli.settings import load_settings

if TYPE_CHECKING:
    from memstream.ops.node_client import NodeClient
    from memstream.ops.render import ProgressLine

T = TypeVar("T")

NODE_OPTION = click.option(
    "--node",
    "node_url",
    default=None,
    metavar="URL",
    help="The node's API (default: http://API_HOST:API_PORT of the configuration).",
)
EXIT_NODE_UNREACHABLE = 3


def _node_client(node_url: str | None) -> NodeClient:
    from memstream.ops.admin_token import AdminTokenMissing, read_admin_token
    from memstream.ops.node_client import NodeClient

    settings = load_settings()
    try:
        token = read_admin_token(settings)
    except AdminTokenMissing as exc:
        raise click.ClickException(exc.message) from None
    return NodeClient(node_url or settings.api_url, token)


def _progress_line() -> ProgressLine:
    from memstream.ops.render import ProgressLine

    return ProgressLine(lambda text: click.echo(text, nl=False, err=True), tty=sys.stderr.isatty())


def _admin_call(action: Callable[[], T]) -> T:
    """Run `action` against the node; its typed failures become messages and exit codes."""
    from memstream.ops.node_client import NodeRefused, NodeUnreachable

    try:
        return action()
    except NodeUnreachable as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(EXIT_NODE_UNREACHABLE)
    except NodeRefused as exc:
        field = f" [{exc.field}]" if exc.field else ""
        click.echo(f"error ({exc.code}){field}: {exc.message}", err=True)
        sys.exit(1)


def _streamed(client: NodeClient, method: str, path: str, **kwargs: Any) -> Any:
    from memstream.ops.node_client import run_stream

    line = _progress_line()
    try:
        return run_stream(client.stream(method, path, **kwargs), line)
    finally:
        line.finish()


@click.command()
@click.argument("processor")
@click.option(
    "--from",
    "start",
    required=True,
    metavar="earliest|OFFSETS|TIMESTAMP",
    help="earliest; PARTITION:OFFSET[,...] (or TOPIC:PARTITION:OFFSET); or an ISO-8601 time "
    "(not on the embedded Tansu broker, which answers time lookups wrongly).",
)
@click.option("--coordinate", is_flag=True, help="Have the node pause the processor, reset, then resume it.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--no-follow", is_flag=True, help="Return after the reset instead of showing lag until caught up."
)
@click.option(
    "--follow-timeout",
    "follow_timeout_s",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Stop showing the lag after this long (the processor keeps catching up in the node).",
)
@NODE_OPTION
def replay(
    processor: str,
    start: str,
    coordinate: bool,
    yes: bool,
    no_follow: bool,
    follow_timeout_s: float,
    node_url: str | None,
) -> None:
    """Reset PROCESSOR's consumer group so it reprocesses from --from.

    Refused while the group is active (the node runs the processor, or the broker reports members)
    unless --coordinate. Then shows the lag and the processor's state until the lag is 0, for at
    most --follow-timeout (the reset stands either way). Exit 0 done, 1 refused or failed (also when
    the processor crashes while catching up), 3 no node answers.
    """
    from core.errors import InvalidInput
    from memstream.ops.replay_from import parse_replay_from

    try:
        parse_replay_from(start)
    except InvalidInput as exc:
        raise click.BadParameter(exc.message, param_hint="--from") from None
    with _node_client(node_url) as client:
        names = [p["name"] for p in _admin_call(lambda: client.get("/admin/v1/processors"))]
        if processor not in names:
            raise click.ClickException(
                f"unknown processor {processor!r}; the node runs: {', '.join(names) or 'none'}"
            )
        body = {"processor": processor, "from": start, "coordinate": coordinate, "dry_run": True}
        plan = _admin_call(lambda: _streamed(client, "POST", "/admin/v1/replay", body=body))
        for line in _plan_lines(plan["plan"]):
            click.echo(line)
        active = plan["active"]
        if active and not coordinate:
            click.echo(
                f"error: group {plan['plan']['group_id']} is active ({'; '.join(active)}); nothing was "
                "changed. Use --coordinate to have the node pause the processor, reset and resume it.",
                err=True,
            )
            sys.exit(1)
        if not yes:
            click.confirm(f"Reset group {plan['plan']['group_id']} to these offsets?", abort=True)
        body["dry_run"] = False
        outcome = _admin_call(lambda: _streamed(client, "POST", "/admin/v1/replay", body=body))
        paused = " (the node paused and resumed it)" if outcome["paused"] else ""
        click.echo(f"group {outcome['plan']['group_id']} reset{paused}")
        if not no_follow:
            _admin_call(lambda: _follow_lag(client, processor, follow_timeout_s))


def _plan_lines(plan: dict[str, Any]) -> list[str]:
    lines = [f"processor {plan['processor']}, group {plan['group_id']}, from {plan['start']}:"]
    for p in plan["partitions"]:
        committed = "none" if p["committed"] is None else p["committed"]
        lines.append(f"  {p['topic']}[{p['partition']}]: committed {committed} -> {p['target']}")
    if not plan["partitions"]:
        lines.append("  (no partition to change)")
    return lines


def _follow_lag(client: NodeClient, processor: str, timeout_s: float, interval_s: float = 1.0) -> None:
    """Show PROCESSOR's lag and state until the lag is 0 while it runs, or for `timeout_s`; exit 1
    when the processor crashed (or the node stopped it)."""
    import time

    from memstream.ops.progress import Progress

    line = _progress_line()
    first: int | None = None
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            states = {p["name"]: p["state"] for p in client.get("/admin/v1/processors")}
            state = states.get(processor, "unknown")
            if state in ("crashed", "stopped", "unknown"):
                line.finish()
                click.echo(
                    f"error: processor {processor} is {state} in the node: it stopped catching up (the "
                    "reset stands; see the node's log for why, then restart the node)",
                    err=True,
                )
                sys.exit(1)
            report = client.get(f"/admin/v1/processors/{processor}/lag")
            lag = int(report["total_lag"])
            first = lag if first is None else max(first, lag)
            parts = ", ".join(f"p{p['partition']} {p['lag']}" for p in report["partitions"] if p["lag"])
            detail = f"lag {lag}" + (f" ({parts})" if parts else "") + f", {state}"
            line(Progress("catch-up", first - lag, first, detail))
            if lag == 0 and state == "running":
                break
            if time.monotonic() >= deadline:
                line.finish()
                click.echo(
                    f"stopped following after {timeout_s:g}s: processor {processor} is {state} with lag "
                    f"{lag}; it keeps catching up in the node (GET /admin/v1/processors/{processor}/lag)"
                )
                return
            time.sleep(interval_s)
    finally:
        line.finish()
    click.echo(f"processor {processor} caught up")


@click.command()
@click.option(
    "--from-seq", "from_seq", type=int, required=True, help="First seq to publish again (inclusive)."
)
@click.option(
    "--shard",
    type=int,
    default=None,
    help="The journal shard whose seqs --from-seq counts (needed with several shards, unless "
    "--from-seq is 0 or 1: every shard from its start).",
)
@NODE_OPTION
def republish(from_seq: int, shard: int | None, node_url: str | None) -> None:
    """Publish journal appends with seq >= --from-seq to journal.messages again, from the journal.

    For a broker that lost its data; consumers are idempotent. 0 or 1 republishes the whole journal
    (with several journal shards: every shard, unless --shard names one). The count is what the
    relay published meanwhile (appends made during the republish included). Fails when the relay
    makes no progress for a minute (its last error is shown).
    Exit 0 done, 1 refused or failed, 3 no node answers.
    """
    with _node_client(node_url) as client:
        body: dict[str, Any] = {"from_seq": from_seq}
        if shard is not None:
            body["shard"] = shard
        report = _admin_call(lambda: _streamed(client, "POST", "/admin/v1/republish", body=body))
    for part in report["shards"] if "shards" in report else [report]:
        named = f"shard {part['shard']}: " if "shards" in report or shard is not None else ""
        click.echo(
            f"{named}republished seq {part['from_seq']}..{part['last_seq']} "
            f"({part['range_messages']} message(s)): the relay published {part['published']} "
            f"message(s) in {part['seconds']:.1f}s"
            + ("" if part["rewound"] else " (it had not published that far yet: nothing was rewound)")
        )


@click.command()
@click.option("--wait", "settle_s", type=float, default=10.0, show_default=True, help="Longest wait for lag.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
@NODE_OPTION
def verify(settle_s: float, as_json: bool, node_url: str | None) -> None:
    """Compare per-thread message counts of the journal and the ClickHouse projection.

    Messages the relay has not published yet are reported apart (not a defect). Exit 0 when the
    projection matches, 1 when a thread differs (or on failure), 3 when no node answers.
    """
    from memstream.ops.verify import ThreadDiff, render_differences

    with _node_client(node_url) as client:
        report = _admin_call(
            lambda: _streamed(client, "GET", "/admin/v1/verify", params={"settle_s": settle_s})
        )
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(
            f"journal: {report['journal_messages']} messages in {report['journal_threads']} threads; "
            f"projection: {report['projection_messages']} messages in {report['projection_threads']} threads"
        )
        if report["pending_messages"]:
            click.echo(
                f"pending: {report['pending_messages']} message(s) of {report['pending_threads']} thread(s) "
                "not yet published by the relay (not a projection defect)"
            )
        if report.get("invalid_id_count"):
            names = ", ".join(report["invalid_id_threads"])
            click.echo(
                f"{report['invalid_id_count']} thread(s) have ids no longer accepted (stored before ids "
                f"were checked in full; readable, never appended to): {names}"
            )
        diffs = [ThreadDiff(**d) for d in report["differences"]]
        if diffs:
            click.echo(f"{len(diffs)} thread(s) differ:")
            for line in render_differences(diffs):
                click.echo(line)
        else:
            click.echo("the projection matches the journal")
        for name in report.get("incomplete_deletions", []):
            click.echo(f"thread deletion {name} is not complete (the node finishes it at start)")
        for left in report.get("deletion_leftovers", []):
            click.echo(
                f"deleted thread {left['account_id']}/{left['thread_id']} (up to seq {left['up_to_seq']}) "
                f"still has {left['journal']} journal message(s), {left['projection']} projection row(s) "
                f"and {left.get('vectors', 0)} message vector(s)"
            )
        for name in report.get("incomplete_erasures", []):
            click.echo(f"user erasure {name} is not complete (the node finishes it at start)")
        for left in report.get("erasure_leftovers", []):
            who = f"{left['account_id']}/{left['user_id']} (erasure {left['erasure_id']})"
            click.echo(
                f"erased user {who} still has {left['threads']} thread(s), {left['private_entries']} "
                f"private and {left['authored_entries']} authored memory entries, {left['quarantined']} "
                f"quarantine row(s), {left['journal']} journal message(s) and {left['projection']} "
                "projection row(s) of its deleted threads"
            )
    sys.exit(0 if report["ok"] else 1)


@click.command()
@click.argument("target", type=click.Choice(["clickhouse", "qdrant"]))
@NODE_OPTION
def rebuild(target: str, node_url: str | None) -> None:
    """Build a fresh TARGET projection from the topics and swap it in.

    Exit 0 done, 1 refused or failed, 3 no node answers.
    """
    with _node_client(node_url) as client:
        report = _admin_call(lambda: _streamed(client, "POST", f"/admin/v1/rebuild/{target}"))
    details = ", ".join(f"{k} {v}" for k, v in (report.get("details") or {}).items())
    click.echo(
        f"rebuilt {report.get('target', target)}: {report.get('rows')} rows "
        f"in {report.get('seconds', 0):.1f}s" + (f" ({details})" if details else "")
    )
