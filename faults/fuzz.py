"""Hostile input: a bounded schemathesis run and a table of crafted requests, against a live node.

`run_schemathesis` runs the schemathesis CLI (`python -m schemathesis.cli run`) on the node's
`/openapi.json` with a real API key, every phase (examples, coverage, fuzzing, stateful), bounded
by `--max-time`, seeded, without shrinking, and reads every request and answer back from its HAR
report: the check is that none was a 5xx. `/admin` routes are left out (they need the admin token;
the API key only earns 401s there).

`PROBES` are requests schemathesis does not think of, each from a class of input that once broke
the API (issue 9): ids ending in a newline, JSON nested 10,000 deep, NUL and lone surrogates in
strings that reach PostgreSQL or chdb, integers past 2^64, invalid UTF-8, an API key in the query
string, two Authorization headers, an oversized body. A probe either must be refused (`refuse`: a
4xx) or must only not fail (`survive`: anything but a 5xx). `run_probes` also checks that the
API key sent in a query string never reaches the node's log.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from faults.checks import CheckResult
from faults.load import error_code


@dataclass(frozen=True)
class FuzzResult:
    requests: int
    statuses: dict[int, int]
    server_errors: tuple[str, ...]  # "POST /v1/... -> 500 internal_error"
    exit_code: int
    output_tail: str


def parse_har(path: Path) -> tuple[int, Counter[int], list[str]]:
    """(requests, answers by status, one line per 5xx) of a schemathesis HAR report."""
    entries = json.loads(path.read_text())["log"]["entries"]
    statuses: Counter[int] = Counter()
    errors = []
    for entry in entries:
        status = int(entry["response"]["status"])
        statuses[status] += 1
        if status >= 500:
            text = entry["response"].get("content", {}).get("text") or ""
            try:
                code = json.loads(text).get("error", {}).get("code")
            except (ValueError, AttributeError):
                code = None
            url = entry["request"]["url"]
            errors.append(f"{entry['request']['method']} {url} -> {status} {code}")
    return len(entries), statuses, errors


def run_schemathesis(url: str, api_key: str, *, max_time_s: float, seed: int, work: Path) -> FuzzResult:
    work.mkdir(parents=True, exist_ok=True)
    har = work / "schemathesis.har.json"
    argv = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{url}/openapi.json",
        "--header",
        f"Authorization: Bearer {api_key}",
        "--checks",
        "not_a_server_error",
        "--max-time",
        str(int(max_time_s)),
        "--seed",
        str(seed),
        "--no-shrink",
        "--workers",
        "2",
        "--request-timeout",
        "30",
        "--exclude-path-regex",
        "^/admin",
        # deleting the load's threads (or erasing its users, which deletes their threads) would make
        # its acknowledged appends "missing": both have tests of their own
        # (tests/memstream/api/routes/test_thread_deletion.py, test_users.py ...)
        "--exclude-name",
        "DELETE /v1/threads/{thread_id}",
        "--exclude-name",
        "DELETE /v1/users/{user_id}",
        "--report",
        "har",
        "--report-har-path",
        str(har),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=max_time_s + 300, cwd=work)
    output = (proc.stdout + proc.stderr).strip()
    (work / "schemathesis.out").write_text(output)
    if not har.is_file():
        return FuzzResult(
            0,
            {},
            (f"schemathesis wrote no report (exit {proc.returncode})",),
            proc.returncode,
            output[-2000:],
        )
    requests, statuses, errors = parse_har(har)
    return FuzzResult(
        requests, dict(statuses), tuple(errors), proc.returncode, "\n".join(output.splitlines()[-8:])
    )


def check_fuzz(result: FuzzResult) -> CheckResult:
    figures = {"requests": float(result.requests), "server_errors": float(len(result.server_errors))}
    if result.requests == 0:
        return CheckResult("schemathesis: no 5xx", False, f"no request made: {result.output_tail}", figures)
    by_status = ", ".join(f"{n}x {s}" for s, n in sorted(result.statuses.items()))
    if result.server_errors:
        distinct = sorted(set(result.server_errors))
        return CheckResult(
            "schemathesis: no 5xx",
            False,
            f"{len(result.server_errors)} 5xx of {result.requests} requests, e.g. {'; '.join(distinct[:3])}",
            figures,
        )
    return CheckResult("schemathesis: no 5xx", True, f"{result.requests} requests: {by_status}", figures)


# ---------------------------------------------------------------- crafted requests

Expect = Literal["refuse", "survive"]


@dataclass(frozen=True)
class Probe:
    name: str
    expect: Expect
    send: Callable[[httpx.Client, str, str], httpx.Response]  # (client, api_key, agent_id)


def _append(thread_id: str, body: dict[str, Any]) -> Callable[[httpx.Client, str, str], httpx.Response]:
    def send(client: httpx.Client, key: str, agent: str) -> httpx.Response:
        return client.post(f"/v1/threads/{thread_id}/messages", json={"agent_id": agent, **body})

    return send


def _user(message_id: str, content: str = "hello") -> dict[str, Any]:
    return {"message_id": message_id, "role": "user", "content": content}


_DEEP = '{"a": ' + "[" * 10_000 + "]" * 10_000 + "}"
_TOOL_DEEP = {
    "messages": [
        {
            "message_id": "fz-deep-1",
            "role": "assistant",
            "tool_call": {"id": "fz-call-1", "name": "lookup", "arguments": _DEEP},
        }
    ]
}


def _raw(
    method: str, path: str, content: bytes, headers: dict[str, str] | None = None
) -> Callable[[httpx.Client, str, str], httpx.Response]:
    def send(client: httpx.Client, key: str, agent: str) -> httpx.Response:
        return client.request(method, path.format(agent=agent), content=content, headers=headers)

    return send


def _get(path: str, params: dict[str, Any]) -> Callable[[httpx.Client, str, str], httpx.Response]:
    def send(client: httpx.Client, key: str, agent: str) -> httpx.Response:
        return client.get(path.format(agent=agent), params=params)

    return send


def _search(query: str) -> Callable[[httpx.Client, str, str], httpx.Response]:
    body = json.dumps({"thread_id": "fz-probe-home", "arguments": {"query": query, "summarize": False}})

    def send(client: httpx.Client, key: str, agent: str) -> httpx.Response:
        return client.post(
            f"/v1/agents/{agent}/tools/journal_message_search",
            content=body.encode(),
            headers={"content-type": "application/json"},
        )

    return send


def _key_in_query(client: httpx.Client, key: str, agent: str) -> httpx.Response:
    bare = httpx.Client(base_url=str(client.base_url), timeout=client.timeout)
    with bare:
        return bare.get("/v1/threads/fz-probe-home/context", params={"api_key": key})


def _two_authorizations(client: httpx.Client, key: str, agent: str) -> httpx.Response:
    bare = httpx.Client(base_url=str(client.base_url), timeout=client.timeout)
    with bare:
        headers = httpx.Headers([("Authorization", f"Bearer {key}"), ("Authorization", "Bearer msk_other")])
        return bare.get("/v1/threads/fz-probe-home/context", headers=headers)


PROBES: tuple[Probe, ...] = (
    Probe(
        "thread id ending in a newline (path %0A)",
        "refuse",
        _append("fz-nl%0A", {"messages": [_user("fz-nl-1")]}),
    ),
    Probe(
        "message id ending in a newline", "refuse", _append("fz-probe-mid", {"messages": [_user("fz-mid\n")]})
    ),
    Probe(
        "agent id ending in a newline",
        "refuse",
        _raw(
            "POST",
            "/v1/threads/fz-probe-agent/messages",
            json.dumps({"agent_id": "bot\n", "messages": [_user("fz-agent-1")]}).encode(),
            {"content-type": "application/json"},
        ),
    ),
    Probe("tool-call arguments nested 10,000 deep", "survive", _append("fz-probe-deep", _TOOL_DEEP)),
    Probe("NUL in key_prefix", "survive", _get("/v1/agents/{agent}/memory", {"key_prefix": "a\x00b"})),
    Probe("lone surrogate in a search query", "survive", _search("\ud800 refund")),
    Probe("after >= 2^64", "refuse", _get("/v1/threads/fz-probe-home/messages", {"after": 2**64})),
    Probe(
        "limit far past its maximum", "refuse", _get("/v1/threads/fz-probe-home/messages", {"limit": 10**30})
    ),
    Probe(
        "invalid UTF-8 body",
        "refuse",
        _raw(
            "POST",
            "/v1/threads/fz-probe-utf8/messages",
            b'{"agent_id": "bot", "messages": [\xff\xfe]}',
            {"content-type": "application/json"},
        ),
    ),
    Probe("API key in the query string", "refuse", _key_in_query),
    Probe("two Authorization headers", "refuse", _two_authorizations),
    Probe(
        "a 12 MB message",
        "survive",
        _append("fz-probe-big", {"messages": [_user("fz-big-1", "x" * 12_000_000)]}),
    ),
)


@dataclass(frozen=True)
class ProbeResult:
    name: str
    ok: bool
    detail: str  # "422 invalid_input", "201 (must be a 4xx)", "no answer: ReadTimeout", ...


def judge(probe: Probe, response: httpx.Response) -> ProbeResult:
    status = response.status_code
    answer = f"{status} {error_code(response) or ''}".strip()
    if status >= 500:
        return ProbeResult(probe.name, False, answer)
    if probe.expect == "refuse" and not 400 <= status < 500:
        return ProbeResult(probe.name, False, f"{answer} (must be a 4xx)")
    return ProbeResult(probe.name, True, answer)


def run_probes(url: str, api_key: str, agent_id: str, node_log: Path | None) -> list[ProbeResult]:
    """Send every probe (after creating the thread `fz-probe-home` of `agent_id` and binding Memory
    to it, so the probes reach the stores); with `node_log`, a last result tells whether the API key
    sent in a query string reached the node's log."""
    results = []
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        client.put(f"/v1/agents/{agent_id}", json={"capabilities": ["memory"]})
        client.post(
            "/v1/threads/fz-probe-home/messages",
            json={"agent_id": agent_id, "messages": [_user("fz-home-1", "my refund request")]},
        )
    for probe in PROBES:
        # one connection per probe: a server that drops a connection after one answer must not
        # make the next probe look unanswered
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            try:
                results.append(judge(probe, probe.send(client, api_key, agent_id)))
            except httpx.HTTPError as exc:
                results.append(ProbeResult(probe.name, False, f"no answer: {type(exc).__name__}"))
    if node_log is not None:
        leaked = node_log.is_file() and api_key in node_log.read_text(errors="replace")
        results.append(
            ProbeResult(
                "API key never logged", not leaked, f"the key is in {node_log}" if leaked else "not logged"
            )
        )
    return results


def check_probes(results: list[ProbeResult]) -> CheckResult:
    bad = [r for r in results if not r.ok]
    if not bad:
        return CheckResult("hostile requests", True, f"{len(results)} probes refused or survived")
    return CheckResult(
        "hostile requests",
        False,
        f"{len(bad)} of {len(results)}: " + "; ".join(f"{r.name}: {r.detail}" for r in bad),
    )
