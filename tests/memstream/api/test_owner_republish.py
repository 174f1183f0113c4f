"""`OwnerRepublish` (unit, the owner answered by an httpx `MockTransport`): the request carries the
shared admin token, this node's id as `X-Memstream-Forwarded-By` and `{"from_seq", "shard"}`; the
owner's progress is relayed with the shard and node named and its result is the report; a refusal
is the same error (status, code, field), an owner that cannot be reached or answers 5xx is
`ShardNotLocal` saying to retry, an error line is the owner's code, and a stream without a result
or cut off is `OwnerLost`."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from core.errors import Conflict, InvalidInput, ShardNotLocal
from memstream.api.errors import status_of
from memstream.api.forwarding import Placement, Remote
from memstream.api.owner_republish import OwnerLost, OwnerRefused, OwnerRepublish
from memstream.api.proxy import FORWARDED_BY
from memstream.ops.progress import Progress

pytestmark = pytest.mark.unit

OWNER = Remote("b-1234", "http://node-b:8000")
REPORT = {
    "from_seq": 3,
    "last_seq": 10,
    "range_messages": 8,
    "published": 8,
    "rewound": True,
    "seconds": 0.5,
    "shard": 1,
}


class NoOwners:
    def shard(self, shard: int) -> Placement:
        raise AssertionError("not asked here")


def ndjson(*items: dict[str, Any] | None) -> bytes:
    return b"".join(b"\n" if item is None else (json.dumps(item) + "\n").encode() for item in items)


def republisher(handler: Any) -> OwnerRepublish:
    return OwnerRepublish(NoOwners(), 2, "a-9876", "shared-token", transport=httpx.MockTransport(handler))


async def test_the_owner_is_asked_with_the_token_and_its_progress_and_report_are_relayed() -> None:
    asked: list[httpx.Request] = []

    def owner(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        progress = {"phase": "republish", "done": 4, "total": 8, "detail": "relay cursor at seq 6 of 10"}
        body = ndjson({"progress": progress}, None, {"result": REPORT})
        return httpx.Response(200, content=body, headers={"content-type": "application/x-ndjson"})

    seen: list[Progress] = []
    opened = await republisher(owner).start(OWNER, 1, 3)
    report = await opened.follow(seen.append)
    (request,) = asked
    assert str(request.url) == "http://node-b:8000/admin/v1/republish"
    assert request.headers["Authorization"] == "Bearer shared-token"
    assert request.headers[FORWARDED_BY] == "a-9876"
    assert json.loads(request.content) == {"from_seq": 3, "shard": 1}
    assert [(p.done, p.total, p.detail) for p in seen] == [
        (4, 8, "shard 1 on b-1234: relay cursor at seq 6 of 10")
    ]
    assert (report.shard, report.from_seq, report.last_seq, report.published, report.rewound) == (
        1,
        3,
        10,
        8,
        True,
    )


@pytest.mark.parametrize(
    ("status", "code", "field", "kind"),
    [(422, "invalid_input", "from_seq", InvalidInput), (409, "conflict", None, Conflict)],
)
async def test_a_refusal_is_the_same_error(status: int, code: str, field: str | None, kind: type) -> None:
    def owner(request: httpx.Request) -> httpx.Response:
        error = {"code": code, "message": "--from-seq 99 is past the journal's last seq 10"}
        return httpx.Response(status, json={"error": {**error, **({"field": field} if field else {})}})

    with pytest.raises(kind) as refused:
        await republisher(owner).start(OWNER, 1, 99)
    assert status_of(refused.value) == status and refused.value.code == code
    assert getattr(refused.value, "field", None) == field
    assert refused.value.message == (
        "journal shard 1 (served by node 'b-1234' at http://node-b:8000) refused: "
        "--from-seq 99 is past the journal's last seq 10"
    )


async def test_an_owner_unreachable_or_failing_is_shard_not_local_saying_to_retry() -> None:
    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def failing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            503, json={"error": {"code": "journal_unavailable", "message": "shard closing"}}
        )

    with pytest.raises(
        ShardNotLocal, match=r"journal shard 1 .* did not answer \(ConnectError\).*Retry"
    ) as lost:
        await republisher(unreachable).start(OWNER, 1, 0)
    assert lost.value.shard == 1
    with pytest.raises(ShardNotLocal, match=r"HTTP 503 journal_unavailable: shard closing\); retry"):
        await republisher(failing).start(OWNER, 1, 0)


async def test_an_error_line_is_the_owners_code_and_a_stream_without_result_is_lost() -> None:
    def moved(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=ndjson({"error": {"code": "shard_moved", "message": "it moved"}}))

    def cut(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=ndjson(None))

    opened = await republisher(moved).start(OWNER, 1, 0)
    with pytest.raises(
        OwnerRefused, match=r"journal shard 1 \(served by node 'b-1234'.*\): it moved"
    ) as failed:
        await opened.follow(lambda _: None)
    assert failed.value.code == "shard_moved"
    opened = await republisher(cut).start(OWNER, 1, 0)
    with pytest.raises(OwnerLost, match="ended its answer without a result"):
        await opened.follow(lambda _: None)
