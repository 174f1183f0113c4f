"""`POST /admin/v1/republish` of a node in the shard membership (unit: local shards over the
in-memory journal and a fake relay, the other node's answers from an httpx `MockTransport`): a
shard of this node is republished here, another's by its owner (its progress relayed, its report
the result, its refusal the same error); no known owner, an unreachable one or a shard asked of a
node that lost it answer 503 naming the shard; every shard from its start covers both nodes' shards
in shard order, each placed at its turn, and an owner's failure names the shards done before."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from memstream.api.errors import install_error_handlers
from memstream.api.forwarding import LOCAL, UNKNOWN, Placement, Remote
from memstream.api.owner_republish import OwnerRepublish
from memstream.api.proxy import FORWARDED_BY
from memstream.api.routes.admin import Exclusive
from memstream.api.routes.admin_republish import add_republish_route
from streams.journal_shards import LocalShard
from tests.memstream.ops.test_republish import shards_of

pytestmark = pytest.mark.unit

B = Remote("b-1", "http://node-b")
Handler = Callable[[httpx.Request], httpx.Response]


class Owners:
    def __init__(self, placements: dict[int, Placement]) -> None:
        self.placements = placements

    def shard(self, shard: int) -> Placement:
        return self.placements[shard]


def report(shard: int, last: int, from_seq: int = 1) -> dict[str, Any]:
    n = max(0, last - from_seq + 1)
    return {
        "from_seq": from_seq,
        "last_seq": last,
        "range_messages": n,
        "published": n,
        "rewound": True,
        "seconds": 0.1,
        "shard": shard,
    }


def owner_b(last: int, asked: list[dict[str, Any]]) -> Handler:
    """Node b republishing its shard 1 (of `last` messages) as asked."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        asked.append({**body, "forwarded_by": request.headers.get(FORWARDED_BY)})
        if body["from_seq"] > last:
            error = {"code": "invalid_input", "message": f"past {last}", "field": "from_seq"}
            return httpx.Response(422, json={"error": error})
        progress = {"phase": "republish", "done": 1, "total": 1, "detail": "relay cursor at seq 9 of 9"}
        lines = [{"progress": progress}, {"result": report(body["shard"], last, max(body["from_seq"], 1))}]
        return httpx.Response(200, content="".join(json.dumps(x) + "\n" for x in lines).encode())

    return handle


def node_a(shards: list[LocalShard], placements: dict[int, Placement], handler: Handler) -> httpx.AsyncClient:
    """Node a's admin API: its `shards`, the others placed by `placements` and asked through `handler`."""
    owners = OwnerRepublish(Owners(placements), 2, "a-1", "token", transport=httpx.MockTransport(handler))
    app = FastAPI()
    install_error_handlers(app)
    router = APIRouter(prefix="/admin/v1")
    exclusive = Exclusive()
    add_republish_route(router, shards, owners, exclusive.stream, exclusive.check)
    app.include_router(router)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node-a")


def lines(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


async def test_a_shard_of_another_node_is_republished_by_its_owner() -> None:
    (local, _) = await shards_of(5, 0)
    asked: list[dict[str, Any]] = []
    async with node_a([local], {0: LOCAL, 1: B}, owner_b(9, asked)) as api:
        out = lines(await api.post("/admin/v1/republish", json={"from_seq": 4, "shard": 1}))
        assert asked == [{"from_seq": 4, "shard": 1, "forwarded_by": "a-1"}]
        assert out[0]["progress"]["detail"] == "shard 1 on b-1: relay cursor at seq 9 of 9"
        assert out[-1] == {"result": report(1, 9, 4)}

        refused = await api.post("/admin/v1/republish", json={"from_seq": 20, "shard": 1})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["field"]) == ("invalid_input", "from_seq")
        assert error["message"] == "journal shard 1 (served by node 'b-1' at http://node-b) refused: past 9"

        here = lines(await api.post("/admin/v1/republish", json={"from_seq": 2, "shard": 0}))
        assert here[-1]["result"]["shard"] == 0 and here[-1]["result"]["range_messages"] == 4
        assert len(asked) == 2  # shard 0 stayed here

        beyond = await api.post("/admin/v1/republish", json={"from_seq": 2, "shard": 2})
        assert beyond.status_code == 422 and beyond.json()["error"]["field"] == "shard"
        assert "the journal has 2 shard(s), 0..1" in beyond.json()["error"]["message"]
        several = await api.post("/admin/v1/republish", json={"from_seq": 2})
        assert several.status_code == 422 and "add --shard K (0..1)" in several.json()["error"]["message"]


@pytest.mark.parametrize("placement", [UNKNOWN, LOCAL])  # LOCAL: claimed here, still opening
async def test_a_shard_without_a_known_owner_answers_503_saying_to_retry(placement: Placement) -> None:
    (local, _) = await shards_of(5, 0)
    asked: list[dict[str, Any]] = []
    async with node_a([local], {0: LOCAL, 1: placement}, owner_b(9, asked)) as api:
        response = await api.post("/admin/v1/republish", json={"from_seq": 0, "shard": 1})
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    error = response.json()["error"]
    assert error["code"] == "shard_not_local"
    assert "no node serves journal shard 1 right now" in error["message"] and "retry" in error["message"]
    assert asked == []


async def test_an_unreachable_owner_and_a_forwarded_request_for_a_lost_shard_answer_503() -> None:
    (local, _) = await shards_of(5, 0)

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with node_a([local], {0: LOCAL, 1: B}, unreachable) as api:
        response = await api.post("/admin/v1/republish", json={"from_seq": 0, "shard": 1})
        assert response.status_code == 503 and response.json()["error"]["code"] == "shard_not_local"
        assert "journal shard 1 (served by node 'b-1' at http://node-b) did not answer" in response.text
        # node c thought this node served shard 1: refused, never passed on
        forwarded = await api.post(
            "/admin/v1/republish", json={"from_seq": 0, "shard": 1}, headers={FORWARDED_BY: "c-1"}
        )
    assert forwarded.status_code == 503, forwarded.text
    assert "node 'c-1' asked this node ('a-1') to republish journal shard 1" in forwarded.text


async def test_every_shard_from_its_start_covers_the_shards_of_both_nodes() -> None:
    (local, _) = await shards_of(5, 0)
    asked: list[dict[str, Any]] = []
    async with node_a([local], {0: LOCAL, 1: B}, owner_b(9, asked)) as api:
        out = lines(await api.post("/admin/v1/republish", json={"from_seq": 1}))
    assert asked == [{"from_seq": 0, "shard": 1, "forwarded_by": "a-1"}]  # 0: an empty shard is no refusal
    details = [line["progress"]["detail"] for line in out if "progress" in line]
    assert details[0].startswith("shard 0: ") and details[-1] == "shard 1 on b-1: relay cursor at seq 9 of 9"
    result = out[-1]["result"]
    assert [(r["shard"], r["from_seq"], r["last_seq"], r["range_messages"]) for r in result["shards"]] == [
        (0, 1, 5, 5),
        (1, 1, 9, 9),
    ]


async def test_an_empty_shard_elsewhere_is_left_out_and_a_failure_names_the_shards_done() -> None:
    (local, _) = await shards_of(5, 0)
    asked: list[dict[str, Any]] = []
    async with node_a([local], {0: LOCAL, 1: B}, owner_b(0, asked)) as api:
        out = lines(await api.post("/admin/v1/republish", json={"from_seq": 0}))
    assert out[-1]["result"]["shard"] == 0 and out[-1]["result"]["last_seq"] == 5  # shard 1 is empty

    def moved(request: httpx.Request) -> httpx.Response:
        line = {"error": {"code": "shard_moved", "message": "journal shard 1 moved to another node"}}
        return httpx.Response(200, content=(json.dumps(line) + "\n").encode())

    async with node_a([local], {0: LOCAL, 1: B}, moved) as api:
        out = lines(await api.post("/admin/v1/republish", json={"from_seq": 0}))
    error = out[-1]["error"]
    assert error["code"] == "shard_moved"
    assert error["message"].endswith(
        "journal shard 1 moved to another node (republished before this: shard 0; republish the others "
        "with --shard K)"
    )
