"""`memstream sql`: a query from the shell through the node's SQL endpoint (the same one data tools
use), with a data-access key. Output streams to stdout or to a file (written whole or not at all);
`memstream.cli` adds the command."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

import click

from core.sql.errors import SqlError
from core.sql.exception_block import ExceptionScanner
from memstream.cli.settings import load_settings

if TYPE_CHECKING:
    import httpx

KEY_ENV = "MEMSTREAM_DATA_KEY"
FORMATS = {
    "table": "PrettyCompactMonoBlock",
    "csv": "CSVWithNames",
    "tsv": "TabSeparatedWithNames",
    "json": "JSONEachRow",
    "parquet": "Parquet",
}
NO_NODE = 3


def _key(key_file: Path | None) -> str:
    if key_file is not None:
        try:
            key = key_file.read_text().strip()
        except OSError as exc:
            raise click.ClickException(f"cannot read the key file {key_file}: {exc.strerror}") from None
        if not key:
            raise click.ClickException(f"the key file {key_file} is empty")
        return key
    key = os.environ.get(KEY_ENV, "").strip()
    if not key:
        raise click.ClickException(
            f"no data-access key: pass --key-file FILE or set {KEY_ENV}. Create a key with `memstream "
            "keys create --data-access --account ACCOUNT` (or --all-accounts) and keep it in a file only "
            "you can read"
        )
    return key


class _Progress:
    """Bytes written so far on stderr, at most once a second, when stderr is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bytes = 0
        self.shown = time.monotonic()

    def add(self, count: int) -> None:
        self.bytes += count
        now = time.monotonic()
        if self.enabled and now - self.shown >= 1.0:
            self.shown = now
            click.echo(f"\r{self.bytes / 1e6:.1f} MB received", nl=False, err=True)

    def done(self) -> None:
        if self.enabled and self.bytes >= 1e6:
            click.echo("", err=True)


def _write(response: httpx.Response, sink: IO[bytes], progress: _Progress) -> None:
    scanner = ExceptionScanner(response.headers.get("x-clickhouse-exception-tag"))
    for chunk in response.iter_bytes():
        data = scanner.feed(chunk)
        if data:
            sink.write(data)
            progress.add(len(data))
    sink.write(scanner.finish())


@click.command("sql")
@click.argument("query")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(sorted(FORMATS)),
    default="table",
    show_default=True,
    help="Output format (a FORMAT clause in the query wins). json is one object per line.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The file to write (default: stdout). Streamed, and written whole or not at all.",
)
@click.option(
    "--node", "node_url", default=None, help="The node's SQL endpoint (default: MEMSTREAM_SQL__HOST/PORT)."
)
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"A file holding the data-access key (default: the environment variable {KEY_ENV}).",
)
def sql(query: str, fmt: str, output: Path | None, node_url: str | None, key_file: Path | None) -> None:
    """Run a read-only SQL QUERY on the node's transcript projection (ClickHouse; tables in the
    database memstream: messages, messages_dedup, message_vectors).

    The key decides what is visible: one account's rows, or every account's. Exit 0 done, 1 the
    query failed (the message says why), 3 no SQL endpoint answers.
    """
    import httpx

    key = _key(key_file)
    url = node_url or load_settings().sql_url
    if output is None and fmt == "parquet" and sys.stdout.isatty():
        raise click.UsageError("Parquet is binary: write it to a file with --output FILE")
    partial = output.with_name(output.name + ".partial") if output is not None else None
    progress = _Progress(enabled=output is not None and sys.stderr.isatty())
    try:
        with httpx.Client(timeout=httpx.Timeout(None, connect=5.0)) as client:
            with client.stream(
                "POST",
                url.rstrip("/") + "/",
                params={"default_format": FORMATS[fmt]},
                content=query.encode(),
                headers={"X-ClickHouse-User": "memstream", "X-ClickHouse-Key": key},
            ) as response:
                if response.status_code != 200:
                    message = SqlError.from_engine(response.read().decode(errors="replace")).message
                    raise click.ClickException(f"{message} (HTTP {response.status_code})")
                if partial is None:
                    _write(response, sys.stdout.buffer, progress)
                    sys.stdout.flush()
                else:
                    with partial.open("wb") as sink:
                        _write(response, sink, progress)
                    os.replace(partial, output)  # type: ignore[arg-type]
    except httpx.ConnectError:
        click.echo(
            f"error: no SQL endpoint answers at {url}: is the node running (`memstream up`)? Its port is "
            "MEMSTREAM_SQL__PORT (default 8123), or pass --node URL",
            err=True,
        )
        sys.exit(NO_NODE)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"the SQL endpoint at {url} failed: {exc}") from None
    except SqlError as exc:
        raise click.ClickException(f"the query failed on the way: {exc.message} ({exc.name})") from None
    finally:
        progress.done()
        if partial is not None:
            partial.unlink(missing_ok=True)
    if output is not None:
        click.echo(f"wrote {output} ({progress.bytes} bytes)", err=True)
