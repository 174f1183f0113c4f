"""Unit tests of the fuzz run's report reading and the probes' verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from faults.fuzz import PROBES, FuzzResult, Probe, check_fuzz, check_probes, judge, parse_har

INTERNAL = json.dumps({"error": {"code": "internal_error"}})


def _entry(method: str, url: str, status: int, body: str = "") -> dict[str, object]:
    return {
        "request": {"method": method, "url": url},
        "response": {"status": status, "content": {"text": body}},
    }


def test_parse_har_counts_every_answer_and_names_each_5xx(tmp_path: Path) -> None:
    har = tmp_path / "run.har.json"
    entries = [
        _entry("GET", "http://x/v1/threads/a/context", 200),
        _entry("POST", "http://x/v1/threads/a/messages", 422),
        _entry(
            "POST", "http://x/v1/threads/b/messages", 500, json.dumps({"error": {"code": "internal_error"}})
        ),
        _entry("GET", "http://x/v1/threads/b/messages", 503, "not json"),
    ]
    har.write_text(json.dumps({"log": {"entries": entries}}))
    requests, statuses, errors = parse_har(har)
    assert requests == 4
    assert statuses == {200: 1, 422: 1, 500: 1, 503: 1}
    assert errors == [
        "POST http://x/v1/threads/b/messages -> 500 internal_error",
        "GET http://x/v1/threads/b/messages -> 503 None",
    ]


def test_check_fuzz_fails_on_any_5xx_and_on_an_empty_run() -> None:
    assert check_fuzz(FuzzResult(10, {200: 10}, (), 0, "")).ok
    assert not check_fuzz(FuzzResult(10, {200: 9, 500: 1}, ("GET /x -> 500 internal_error",), 1, "")).ok
    assert not check_fuzz(FuzzResult(0, {}, (), 2, "schema not reachable")).ok


def _answer(status: int, code: str | None = None) -> httpx.Response:
    body = {"error": {"code": code, "message": "m"}} if code else {}
    return httpx.Response(status, json=body)


def test_a_refuse_probe_needs_a_4xx_and_a_survive_probe_anything_but_5xx() -> None:
    refuse = Probe("r", "refuse", lambda c, k, a: _answer(200))
    survive = Probe("s", "survive", lambda c, k, a: _answer(200))
    assert not judge(refuse, _answer(201)).ok
    assert judge(refuse, _answer(422, "invalid_input")).ok
    assert judge(survive, _answer(201)).ok
    assert not judge(survive, _answer(500, "internal_error")).ok
    assert not judge(refuse, _answer(503, "journal_unavailable")).ok
    assert judge(refuse, _answer(422, "invalid_input")).detail == "422 invalid_input"


def test_check_probes_names_each_failure() -> None:
    refuse = Probe("newline id", "refuse", lambda c, k, a: _answer(200))
    result = check_probes([judge(refuse, _answer(201)), judge(refuse, _answer(422))])
    assert not result.ok and "newline id: 201 (must be a 4xx)" in result.detail


def test_probe_names_are_unique() -> None:
    assert len({p.name for p in PROBES}) == len(PROBES)
