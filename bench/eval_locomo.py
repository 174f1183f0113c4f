"""Retrieval quality on LoCoMo through a running node's HTTP API (issue 12; prints figures, not a test).

    .venv/bin/python bench/eval_locomo.py                       # starts `memstream up` in a temp dir
    .venv/bin/python bench/eval_locomo.py --conversations 0,1   # a quicker look
    .venv/bin/python bench/eval_locomo.py --url http://127.0.0.1:8080 --key-file .memstream/api-key \\
        --bootstrap 127.0.0.1:19092
    .venv/bin/python bench/eval_locomo.py --transcript-vectors  # the semantic re-rank switched on

The data (`locomo-dev.json`, CC BY-NC 4.0, Maharana et al., ACL 2024) is read at run time from
`--data` (default `../shared/evals/locomo-dev.json` beside the repository); it is never copied into
the repository. The protocol is the one of `../shared/evals/README.md`, exactly:
- conversation i: one thread per session `c{i}-s{N}` of agent `locomo-c{i}` and user `u{i}`;
  speaker A's turns are role `user`, speaker B's `assistant`; content `"{speaker}: {text}"` plus
  `" {blip_caption}"` when there is one; message id `c{i}-{dia_id}`; every session is appended in
  order over HTTP (one call per session);
- agent memory: each `session_N_observation` entry becomes `memory_store` (no user) with key
  `obs.s{N}.{j}` (j counts the session's observations from 0, speakers in file order), content
  `"{speaker}: {text}"`, category `observation`, scope `shared`, importance 0.5; the source dia_ids
  stay here;
- after the transcript and memory projections (and, with `--transcript-vectors`, the
  `transcript-vectors` one: `MEMSTREAM_TRANSCRIPT_VECTORS=true` is given to the node it starts; a
  node at `--url` must have it set itself) caught up (consumer lag 0 on the broker), each
  question of categories 1-4 with evidence is asked as `journal_message_search` (`scope`
  all_threads, `summarize` false, from thread `c{i}-s1`, user `u{i}`) and as `memory_recall` (same
  agent, no user), once per k in `--k` with `limit` k;
- hit@k: the share of questions with an evidence turn among the results (for memory: a returned
  entry whose source turns meet the evidence); evidence-recall@k: the share of all evidence turns
  returned. Both overall and per category, with the latency of each tool call.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedded_node import Node, node_for
from figures import pct
from server_group import server_group

from memstream.client import NO_RETRY, MemstreamClient
from memstream.ops.replay import GroupOffsets, total_lag
from processors import clickhouse_projection, qdrant_projection, transcript_vectors

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "evals" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
PROJECTIONS = {
    "clickhouse-projection": clickhouse_projection.SOURCE_TOPIC,
    "qdrant-projection": qdrant_projection.SOURCE_TOPIC,
}
_SESSION = re.compile(r"^session_(\d+)$")


@dataclass
class Question:
    conversation: int
    category: int
    text: str
    evidence: frozenset[str]


@dataclass
class Conversation:
    index: int
    sessions: list[tuple[int, list[dict[str, Any]]]]
    observations: list[tuple[int, int, str, frozenset[str]]]  # (session, j, content, dia_ids)
    questions: list[Question]
    speaker_a: str

    @property
    def agent(self) -> str:
        return f"locomo-c{self.index}"

    @property
    def user(self) -> str:
        return f"u{self.index}"


def _dia_ids(value: Any) -> frozenset[str]:
    items = value if isinstance(value, list) else [value]
    return frozenset(str(item) for item in items)


def load(path: Path, wanted: set[int] | None) -> list[Conversation]:
    """The conversations of the data file (all, or the `wanted` indexes), as the protocol reads them."""
    data = json.loads(path.read_text())
    out = []
    for index, item in enumerate(data):
        if wanted is not None and index not in wanted:
            continue
        conv = item["conversation"]
        numbers = sorted(int(m.group(1)) for key in conv if (m := _SESSION.match(key)))
        sessions = [(n, conv[f"session_{n}"]) for n in numbers]
        observations = []
        for n in numbers:
            facts = (item.get("observation") or {}).get(f"session_{n}_observation") or {}
            j = 0
            for speaker, entries in facts.items():
                for text, source in entries:
                    observations.append((n, j, f"{speaker}: {text}", _dia_ids(source)))
                    j += 1
        questions = [
            Question(index, qa["category"], qa["question"], _dia_ids(qa["evidence"]))
            for qa in item["qa"]
            if qa.get("category") in CATEGORIES and qa.get("evidence")
        ]
        out.append(Conversation(index, sessions, observations, questions, conv["speaker_a"]))
    return out


def turn_message(conv: Conversation, turn: dict[str, Any], speaker_a: str) -> dict[str, Any]:
    content = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        content += f" {turn['blip_caption']}"
    role = "user" if turn["speaker"] == speaker_a else "assistant"
    return {"message_id": f"c{conv.index}-{turn['dia_id']}", "role": role, "content": content}


def ingest(ms: MemstreamClient, conv: Conversation) -> int:
    """Append every session and store every observation; the number of calls made."""
    calls = 0
    for n, turns in conv.sessions:
        messages = [turn_message(conv, turn, conv.speaker_a) for turn in turns]
        ms.append(f"c{conv.index}-s{n}", messages, agent_id=conv.agent, user_id=conv.user)
        calls += 1
    ms.bind_agent(conv.agent, ["memory"])
    for n, j, content, _ in conv.observations:
        ms.memory_store(
            conv.agent,
            key=f"obs.s{n}.{j}",
            content=content,
            category="observation",
            scope="shared",
            importance=0.5,
        )
        calls += 1
    return calls


def wait_caught_up(
    offsets: GroupOffsets, prefix: str, projections: dict[str, str], timeout_s: float = 600.0
) -> None:
    """Until `projections` (name: source topic) have no lag (their committed offsets reached the
    ends of their topics)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lags = {
            name: total_lag(offsets.lag(f"{prefix}memstream.{name}", [prefix + topic]))
            for name, topic in projections.items()
        }
        if all(lag == 0 for lag in lags.values()):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"the projections did not catch up within {timeout_s:.0f} s: lags {lags}")
        print(f"  waiting for the projections: lags {lags}", flush=True)
        time.sleep(2.0)


@dataclass
class Tally:
    """hit@k and evidence-recall@k counts, per category and overall, and call latencies."""

    hits: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))
    asked: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))
    found: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))
    evidence: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))
    latency_ms: list[float] = field(default_factory=list)

    def add(self, k: int, question: Question, returned: set[str]) -> None:
        for category in (0, question.category):
            self.asked[k, category] += 1
            self.hits[k, category] += bool(returned & question.evidence)
            self.found[k, category] += len(returned & question.evidence)
            self.evidence[k, category] += len(question.evidence)

    def hit(self, k: int, category: int = 0) -> float:
        return self.hits[k, category] / max(1, self.asked[k, category])

    def recall(self, k: int, category: int = 0) -> float:
        return self.found[k, category] / max(1, self.evidence[k, category])


def timed(
    ms: MemstreamClient, latencies: list[float], agent: str, tool: str, arguments: dict[str, Any], **who: str
) -> dict[str, Any]:
    """Call `tool` of `agent`, noting the latency; the tool's result."""
    started = time.perf_counter()
    result = ms.call_tool(agent, tool, arguments, **who).result
    latencies.append((time.perf_counter() - started) * 1000)
    return result


def ask(ms: MemstreamClient, convs: list[Conversation], ks: list[int]) -> tuple[Tally, Tally, dict[str, int]]:
    transcripts, memory = Tally(), Tally()
    paths: defaultdict[str, int] = defaultdict(int)
    sources = {(conv.index, f"obs.s{n}.{j}"): dia for conv in convs for n, j, _, dia in conv.observations}
    for conv in convs:
        for question in conv.questions:
            for k in ks:
                arguments = {"query": question.text, "scope": "all_threads", "limit": k, "summarize": False}
                who = {"thread_id": f"c{conv.index}-s1", "user_id": conv.user}
                search = "journal_message_search"
                result = timed(ms, transcripts.latency_ms, conv.agent, search, arguments, **who)
                prefix = f"c{conv.index}-"
                turns = {m["message_id"].removeprefix(prefix) for m in result["messages"]}
                transcripts.add(k, question, turns)
                recall = {"query": question.text, "limit": k}
                result = timed(ms, memory.latency_ms, conv.agent, "memory_recall", recall)
                paths[result.get("path", "?")] += 1
                returned: set[str] = set()
                for entry in result["results"]:
                    returned |= sources.get((conv.index, entry["key"]), frozenset())
                memory.add(k, question, returned)
    return transcripts, memory, dict(paths)


def table(name: str, tally: Tally, ks: list[int]) -> Iterator[str]:
    p50, p99 = pct(tally.latency_ms, 0.5), pct(tally.latency_ms, 0.99)
    yield f"\n{name}: latency p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    head = " | ".join(f"hit@{k} | ev-recall@{k}" for k in ks)
    yield f"| category (questions) | {head} |"
    yield "|---|" + "---|" * (2 * len(ks))
    for category in (0, *CATEGORIES):
        label = "all" if category == 0 else f"{category} {CATEGORIES[category]}"
        cells = " | ".join(f"{tally.hit(k, category):.3f} | {tally.recall(k, category):.3f}" for k in ks)
        yield f"| {label} ({tally.asked[ks[0], category]}) | {cells} |"


def run(node: Node, args: argparse.Namespace, convs: list[Conversation]) -> None:
    ks = sorted({int(k) for k in args.k.split(",")})
    # NO_RETRY: as before, the first failed call ends the run (a retry would hide it in the latency)
    with MemstreamClient(node.url, node.key, timeout=60.0, retry=NO_RETRY) as ms:
        started = time.perf_counter()
        for conv in convs:
            calls = ingest(ms, conv)
            print(
                f"conversation {conv.index}: {sum(len(t) for _, t in conv.sessions)} turns in "
                f"{len(conv.sessions)} sessions, {len(conv.observations)} observations, "
                f"{len(conv.questions)} questions ({calls} calls)",
                flush=True,
            )
        projections = dict(PROJECTIONS)
        if args.transcript_vectors:
            projections[transcript_vectors.NAME] = transcript_vectors.SOURCE_TOPIC
        wait_caught_up(GroupOffsets(args.bootstrap), args.topic_prefix, projections)
        print(f"ingested and projected in {time.perf_counter() - started:.1f} s", flush=True)
        transcripts, memory, paths = ask(ms, convs, ks)
    asked = sum(len(c.questions) for c in convs)
    print(f"\n{asked} questions, conversations {[c.index for c in convs]} of {args.data.name}")
    print(f"transcript vectors (semantic re-rank): {'on' if args.transcript_vectors else 'off'}")
    for line in table("journal_message_search", transcripts, ks):
        print(line)
    for line in table(f"memory_recall (answered by {paths})", memory, ks):
        print(line)


def parse_indexes(text: str | None) -> set[int] | None:
    return None if not text else {int(part) for part in text.split(",")}


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the LoCoMo JSON file")
    parser.add_argument("--conversations", default=None, help="indexes to use, e.g. 0,1 (default: all)")
    parser.add_argument("--k", default="5,10,20", help="cut-offs, comma-separated (limit of each call)")
    parser.add_argument("--url", default=None, help="a running node (default: start `memstream up`)")
    parser.add_argument("--key-file", type=Path, default=None, help="API key file (with --url)")
    parser.add_argument("--bootstrap", default=None, help="the broker (with --url)")
    parser.add_argument("--topic-prefix", default="", help="the node's MEMSTREAM_TOPIC_PREFIX")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    parser.add_argument(
        "--transcript-vectors",
        action="store_true",
        help="switch the semantic re-rank of transcript search on (MEMSTREAM_TRANSCRIPT_VECTORS) and "
        "wait for the transcript-vectors projection too",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    if not args.data.is_file():
        raise SystemExit(f"{args.data} not found: pass --data PATH to the LoCoMo JSON file")
    if args.url and (args.key_file is None or args.bootstrap is None):
        raise SystemExit("--url needs --key-file and --bootstrap (the lag of the projections is read there)")
    convs = load(args.data, parse_indexes(args.conversations))
    if args.transcript_vectors:  # inherited by `memstream up`
        os.environ["MEMSTREAM_TRANSCRIPT_VECTORS"] = "true"
    else:
        os.environ.pop("MEMSTREAM_TRANSCRIPT_VECTORS", None)
    work = Path(tempfile.mkdtemp(prefix="memstream-eval-locomo-"))
    with server_group(work, keep=args.keep) as group:
        node = node_for(args, group, work)
        run(node, args, convs)


if __name__ == "__main__":
    main()
