"""`OwnerRepublish`: the republish of a journal shard another node serves, asked of its owner
(journal shards across nodes, `MEMSTREAM_MEMBERSHIP`; `memstream.api.routes.admin_republish` runs
the whole command).

`start(owner, shard, from_seq)` sends `POST {owner}/admin/v1/republish` `{"from_seq", "shard"}`
with the nodes' shared admin token and `X-Memstream-Forwarded-By: <this node>` (the owner answers
503 rather than pass it on when the shard is not its own any more), and waits for the answer's
status: a refusal (4xx) raises the same error (`refusal`: the typed error of its status, with the
owner's code, field and message, prefixed with the shard and the node); an owner that cannot be
reached, does not answer in time or answers 5xx raises `ShardNotLocal` (503 with `Retry-After`)
naming the shard and saying to retry.
`OwnerStream.follow(progress)` then relays the owner's progress lines (their detail prefixed with
the shard and node) and returns its report (`RepublishReport`); an `error` line raises
`OwnerRefused` with the owner's code, a stream that ends without a result or goes silent for
`read_timeout_s` (the owner sends an empty line every 10 s) raises `OwnerLost`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Protocol

import httpx

from core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    MemstreamError,
    NotFound,
    ShardNotLocal,
    Unauthorized,
)
from memstream.api.forwarding import Placement, Remote
from memstream.api.proxy import FORWARDED_BY
from memstream.ops.progress import Progress, ProgressCallback
from memstream.ops.republish import RepublishReport

REPUBLISH_PATH = "/admin/v1/republish"


class ShardOwners(Protocol):
    """Where each journal shard is served (`memstream.sharding.owners.LeaseOwners`)."""

    def shard(self, shard: int) -> Placement:
        """`LOCAL` (this node holds its lease), `Remote(node_id, url)` or `UNKNOWN`."""
        ...


class OwnerRefused(MemstreamError):
    """The owner's republish failed (an `error` line of its stream), with the owner's code; the
    message names the shard and the node."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


_REFUSALS: dict[int, type[MemstreamError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
}


def refusal(status: int, code: str, message: str, field: str | None = None) -> MemstreamError:
    """The owner's 4xx refusal as the typed error answering the same status (422 `InvalidInput`
    for the others), carrying the owner's code."""
    kind = _REFUSALS.get(status)
    error = InvalidInput(message, field=field) if kind is None else kind(message)
    error.code = code
    return error


class OwnerLost(MemstreamError):
    """The owner's stream broke off or went silent before its result (module doc)."""

    code = "owner_lost"


class OwnerStream:
    """An owner's republish in progress (`OwnerRepublish.start`): `follow` it once, then `aclose`."""

    def __init__(self, response: httpx.Response, owner: Remote, shard: int, read_timeout_s: float) -> None:
        self.response = response
        self.owner = owner
        self.shard = shard
        self.read_timeout_s = read_timeout_s

    @property
    def where(self) -> str:
        return f"journal shard {self.shard} (served by node {self.owner.node_id!r} at {self.owner.url})"

    async def follow(self, progress: ProgressCallback) -> RepublishReport:
        """Relay the owner's progress; its report (module doc)."""
        try:
            async for line in self.response.aiter_lines():
                if not line.strip():
                    continue  # the owner's heartbeat
                item = json.loads(line)
                if "progress" in item:
                    step = Progress(**item["progress"])
                    progress(
                        replace(step, detail=f"shard {self.shard} on {self.owner.node_id}: {step.detail}")
                    )
                elif "result" in item:
                    return _report(item["result"], self.shard)
                elif "error" in item:
                    error = item["error"]
                    raise OwnerRefused(
                        str(error.get("code", "error")), f"{self.where}: {error.get('message', error)}"
                    )
        except httpx.ReadTimeout:
            raise OwnerLost(
                f"{self.where} sent nothing for {self.read_timeout_s:g}s: it is stuck or gone. Its "
                "republish may still run there; run `memstream republish` again to see it finish"
            ) from None
        except httpx.TransportError as exc:
            raise OwnerLost(
                f"{self.where} broke off its answer ({type(exc).__name__}: {exc}): the node stopped or the "
                "shard moved. A rewind it made stays with the shard's journal (its relay goes on "
                "publishing from there); run `memstream republish` again to see it finish"
            ) from None
        finally:
            await self.aclose()
        raise OwnerLost(f"{self.where} ended its answer without a result (did it stop?); retry")

    async def aclose(self) -> None:
        await self.response.aclose()


class OwnerRepublish:
    """See the module doc. `owners` places the shards, `shards` is the journal's shard count,
    `node_id` this node's id, `admin_token` the nodes' shared one."""

    def __init__(
        self,
        owners: ShardOwners,
        shards: int,
        node_id: str,
        admin_token: str,
        *,
        connect_timeout_s: float = 2.0,
        timeout_s: float = 30.0,
        read_timeout_s: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.owners = owners
        self.shards = shards
        self.node_id = node_id
        self.read_timeout_s = read_timeout_s
        self._headers = {"Authorization": f"Bearer {admin_token}", FORWARDED_BY: node_id}
        self._timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s, read=read_timeout_s)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    async def start(self, owner: Remote, shard: int, from_seq: int) -> OwnerStream:
        """Ask `owner` to republish `shard` from `from_seq`; its stream once it accepted (module doc)."""
        where = f"journal shard {shard} (served by node {owner.node_id!r} at {owner.url})"
        request = self._http().build_request(
            "POST",
            owner.url + REPUBLISH_PATH,
            json={"from_seq": from_seq, "shard": shard},
            headers=self._headers,
        )
        try:
            response = await self._http().send(request, stream=True)
        except httpx.HTTPError as exc:
            raise ShardNotLocal(
                shard,
                f"{where} did not answer ({type(exc).__name__}); nothing was republished there. Retry in a "
                "few seconds (a node may be taking the shard over)",
            ) from exc
        if response.status_code == 200:
            return OwnerStream(response, owner, shard, self.read_timeout_s)
        try:
            await response.aread()
        finally:
            await response.aclose()
        code, message, field = _error_of(response)
        if response.status_code >= 500:
            raise ShardNotLocal(
                shard,
                f"{where} could not republish it now (HTTP {response.status_code} {code}: {message}); retry",
            )
        raise refusal(response.status_code, code, f"{where} refused: {message}", field)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            # trust_env=False: no proxy from the environment between two nodes
            self._client = httpx.AsyncClient(
                timeout=self._timeout, trust_env=False, follow_redirects=False, transport=self._transport
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _error_of(response: httpx.Response) -> tuple[str, str, str | None]:
    """The API error shape's code, message and field (or the status and body's start)."""
    try:
        error = response.json()["error"]
        field = error.get("field")
        return str(error["code"]), str(error["message"]), str(field) if field is not None else None
    except (ValueError, KeyError, TypeError):
        return "http_error", f"HTTP {response.status_code}: {response.text[:300]}", None


def _report(result: Any, shard: int) -> RepublishReport:
    """The owner's result line as the report of one shard."""
    try:
        return RepublishReport(
            from_seq=int(result["from_seq"]),
            last_seq=int(result["last_seq"]),
            range_messages=int(result["range_messages"]),
            published=int(result["published"]),
            rewound=bool(result["rewound"]),
            seconds=float(result["seconds"]),
            shard=int(result.get("shard", shard)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise OwnerLost(
            f"journal shard {shard}: the owner answered a result this node cannot read: {result!r}"
        ) from exc
