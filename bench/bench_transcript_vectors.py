"""CPU cost of the opt-in `transcript-vectors` projection per message (prints figures).

    .venv/bin/python bench/bench_transcript_vectors.py                         # 2,000 corpus messages
    .venv/bin/python bench/bench_transcript_vectors.py --data ../shared/evals/locomo-dev.json

A backlog of `--messages` journal records (`streams.codecs.journal_messages.encode`) is handed to
the real processor (`TranscriptVectors.process`, the offline MiniLM the node builds, a chdb
`message_vectors` table in a fresh temp directory) in batches of its own size (`BATCH_SIZE`), as
the runtime would after reading them from `journal.messages` (the broker's share is the one
`bench_transcripts` measures for `clickhouse-projection`). Texts: `transcript_corpus.Corpus`
conversations (20-60 made-up words per turn: many word pieces, a pessimistic case), or with
`--data` the LoCoMo turns (real English, as the protocol of `eval_locomo.py` writes them).
Figures: backlog rows/s (wall) and `time.process_time()` per row (every thread of this process:
the embedder's workers and the chdb thread included), per embedded message and per record, split
into the embedding and the insert. The model is loaded (and the int8 model derived) before timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench_transcripts import message_of
from transcript_corpus import Corpus

from core.journal.models import Message
from processors.transcript_vectors import BATCH_SIZE, TranscriptVectors, selected, vector_of
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.clickhouse.vectors import ClickHouseMessageVectors
from sinks.embeddings.minilm import OfflineMiniLM
from streams.codecs import journal_messages
from streams.runtime.processor import Record


def corpus_messages(n: int) -> list[Message]:
    out: list[Message] = []
    for rows in Corpus().threads(n):
        out.extend(message_of(row) for row in rows)
    return out[:n]


def locomo_messages(path: Path, n: int) -> list[Message]:
    template = corpus_messages(1)[0]
    out: list[Message] = []
    for c, item in enumerate(json.loads(path.read_text())):
        conv = item["conversation"]
        for key, turns in conv.items():
            if not key.startswith("session_") or not isinstance(turns, list):
                continue
            for o, turn in enumerate(turns):
                text = f"{turn['speaker']}: {turn['text']}" + (
                    f" {turn['blip_caption']}" if turn.get("blip_caption") else ""
                )
                role = "user" if turn["speaker"] == conv["speaker_a"] else "assistant"
                out.append(
                    template.model_copy(
                        update={
                            "message_id": f"c{c}-{turn['dia_id']}",
                            "thread_id": f"c{c}-{key}",
                            "offset": o,
                            "seq": len(out) + 1,
                            "role": role,
                            "content": text,
                        }
                    )
                )
                if len(out) == n:
                    return out
    return out


def records(messages: list[Message]) -> list[Record]:
    out = []
    for i, message in enumerate(messages):
        encoded = journal_messages.encode(message)
        out.append(
            Record(
                topic="journal.messages",
                partition=0,
                offset=i,
                key=encoded.key,
                value=encoded.value,
                headers=(),
                timestamp_ms=None,
            )
        )
    return out


class Timed(TranscriptVectors):
    """Splits each batch's CPU and wall time into the embedding and the insert."""

    embed_cpu = embed_wall = insert_cpu = insert_wall = 0.0

    async def process(self, batch: Sequence[Record]) -> None:
        messages = selected(batch)
        if not messages:
            return
        await self._ensure_schema()
        cpu, wall = time.process_time(), time.perf_counter()
        vectors = await self.embedder.embed([m.content for m in messages])
        self.embed_cpu += time.process_time() - cpu
        self.embed_wall += time.perf_counter() - wall
        cpu, wall = time.process_time(), time.perf_counter()
        await self.store.insert_vectors(
            [vector_of(m, self.embedder.model_id, v) for m, v in zip(messages, vectors, strict=True)]
        )
        self.insert_cpu += time.process_time() - cpu
        self.insert_wall += time.perf_counter() - wall


async def main(args: argparse.Namespace) -> None:
    messages = locomo_messages(args.data, args.messages) if args.data else corpus_messages(args.messages)
    batch = records(messages)
    embedded = len(selected(batch))
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-vectors-"))
    store = ClickHouseTranscriptStore(f"chdb://{work}/clickhouse")
    await store.ensure_schema()
    embedder = OfflineMiniLM()
    embedder.load()
    await embedder.embed(["warm up"])
    processor = Timed(ClickHouseMessageVectors(store), embedder)
    await processor.start()
    cpu, wall = time.process_time(), time.perf_counter()
    for start in range(0, len(batch), BATCH_SIZE):
        await processor.process(batch[start : start + BATCH_SIZE])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    words = sum(len(m.content.split()) for m in messages if m.content) / max(1, embedded)
    print(f"{len(batch)} records, {embedded} embedded (mean {words:.0f} words), {embedder.workers} workers")
    print(f"backlog: {len(batch) / wall:.0f} records/s, {embedded / wall:.0f} embedded messages/s (wall)")
    print(
        f"CPU: {cpu / embedded * 1000:.2f} ms per embedded message "
        f"({cpu / len(batch) * 1000:.2f} per record): "
        f"embedding {processor.embed_cpu / embedded * 1000:.2f} ms, insert "
        f"{processor.insert_cpu / embedded * 1000:.3f} ms"
    )
    print(f"wall: embedding {processor.embed_wall:.1f} s, insert {processor.insert_wall:.2f} s")
    await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--data", type=Path, default=None, help="LoCoMo JSON: embed its turns instead")
    asyncio.run(main(parser.parse_args()))
