"""Deterministic synthetic conversations for the transcript benchmark (`bench_transcripts.py`).

`Corpus(seed, vocabulary)` builds a vocabulary of about `vocabulary` distinct alphabetic words:
~170 common English and support-desk words first, then generated pseudo-words (syllable
combinations), drawn with Zipf weights (rank**-1.05). `Corpus.threads(n_messages, ...)` yields
conversations until `n_messages` messages were produced, each as a list of `TranscriptRow`:

- tenancy: `accounts` accounts (account k gets a share ~ 1/k of the threads, so a few accounts are
  large and most are small), `agents` agents each, up to `users` users per agent (10% of the
  threads have no user);
- a thread has 10-90 messages (mean ~50): a system prompt at offset 0, then alternating user and
  assistant messages of 20-60 words; about 8% of the assistant turns are a tool call (empty
  content) followed by a `tool` row carrying a JSON result;
- each thread has three topic words from the middle and rare part of the vocabulary that recur in
  its messages (70% of the messages carry one or two), as real conversations repeat their subject;
- `created_at`: the thread starts at a random time in the 90 days before `epoch`, messages 30 s apart.

The same seed and arguments give the same rows (ids, text, times), in the same order.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

from core.stores.transcripts import Role, TranscriptRow
from core.transcripts.terms import message_terms
from processors.transcript_context import with_context

COMMON = (
    "the to and a i you it of is that in for we this be on can with have not my your are do will "
    "it's at so but if was me what just as they there please get need from an our by can't all one "
    "about would like now when check out up know there's help order account see time thanks "
    "thank could should make sure how which also been more any some here then them let issue "
    "problem update email payment invoice refund shipping delivery password login error page "
    "report data file customer support ticket team plan price billing subscription card number "
    "address date week today tomorrow yesterday morning message reply question answer again still "
    "working change new old first last next back call link app settings access server deploy build "
    "test release version bug fix feature request meeting schedule calendar document share upload "
    "download export import database query table dashboard chart metric alert log warning"
).split()
_ONSETS = ("b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")
_CODAS = ("", "", "n", "r", "s", "l", "x", "nd", "rt")
SYSTEM_PROMPT = "You are the {agent} assistant of {account}. Be brief, cite the ticket number, never guess."
TOOL_NAMES = ("lookup_order", "search_docs", "create_ticket", "get_invoice", "run_query")


@dataclass(frozen=True)
class Tenant:
    account_id: str
    agent_id: str
    users: int


class Corpus:
    """Vocabulary and Zipf weights (module doc); `words(k)` draws k words."""

    def __init__(self, seed: int = 7, vocabulary: int = 4000) -> None:
        self.seed = seed
        rng = random.Random(seed)
        words = list(dict.fromkeys(COMMON))
        seen = set(words)
        while len(words) < vocabulary:
            word = "".join(
                rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                for _ in range(rng.randint(2, 3))
            )
            if word not in seen:
                seen.add(word)
                words.append(word)
        self.vocabulary = words
        self.cum_weights = list(itertools.accumulate(1.0 / (rank**1.05) for rank in range(1, len(words) + 1)))
        self.rng = random.Random(seed + 1)

    def rank_band(self, low: int, high: int) -> list[str]:
        """The words of ranks [low, high) (rank 0 is the most frequent)."""
        return self.vocabulary[low : min(high, len(self.vocabulary))]

    def words(self, k: int) -> list[str]:
        return self.rng.choices(self.vocabulary, cum_weights=self.cum_weights, k=k)

    def tenants(self, accounts: int, agents: int, users: int) -> tuple[list[Tenant], list[float]]:
        """Every (account, agent) and its weight (account k: 1/k, split evenly among its agents)."""
        tenants = [
            Tenant(f"acct-{a:03d}", f"agent-{g}", users) for a in range(accounts) for g in range(agents)
        ]
        weights = [1.0 / (a + 1) for a in range(accounts) for _ in range(agents)]
        return tenants, weights

    def threads(
        self,
        n_messages: int,
        *,
        environment: str = "bench",
        accounts: int = 100,
        agents: int = 5,
        users: int = 50,
        epoch: datetime | None = None,
        thread_prefix: str = "th",
    ) -> Iterator[list[TranscriptRow]]:
        """Conversations (lists of rows, offsets 0..n-1) until `n_messages` rows were yielded."""
        rng = self.rng
        tenants, weights = self.tenants(accounts, agents, users)
        cum_tenants = list(itertools.accumulate(weights))
        end = epoch or datetime(2026, 11, 1, tzinfo=UTC)
        topical = self.rank_band(150, len(self.vocabulary))
        produced = 0
        for t in itertools.count():
            if produced >= n_messages:
                return
            [tenant] = rng.choices(tenants, cum_weights=cum_tenants)
            length = min(rng.randint(10, 90), n_messages - produced)
            user = None if rng.random() < 0.1 else f"user-{rng.randrange(tenant.users):03d}"
            topics = rng.sample(topical, 3)
            start = end - timedelta(seconds=rng.uniform(0, 90 * 86400))
            thread_id = f"{thread_prefix}-{t:07d}"
            rows: list[TranscriptRow] = []
            pending_call: str | None = None
            for offset in range(length):
                created = start + timedelta(seconds=30 * offset)
                row = partial(
                    make_row, environment, tenant, user, thread_id, offset, produced + offset + 1, created
                )
                if offset == 0:
                    text = SYSTEM_PROMPT.format(agent=tenant.agent_id, account=tenant.account_id)
                    rows.append(row("system", text))
                    continue
                if pending_call is not None:
                    result = json.dumps({"status": "ok", "items": self.words(rng.randint(8, 30))})
                    rows.append(row("tool", "", call=(pending_call, None, None, result)))
                    pending_call = None
                    continue
                role: Role = "user" if offset % 2 == 1 else "assistant"
                if role == "assistant" and rng.random() < 0.08 and offset < length - 1:
                    pending_call = f"call-{thread_id}-{offset}"
                    name = rng.choice(TOOL_NAMES)
                    arguments = json.dumps({"query": " ".join(self.words(4))})
                    rows.append(row("assistant", "", call=(pending_call, name, arguments, None)))
                    continue
                words = self.words(rng.randint(20, 60))
                if rng.random() < 0.7:
                    for topic in rng.sample(topics, rng.randint(1, 2)):
                        words[rng.randrange(len(words))] = topic
                text = " ".join(words)
                rows.append(row(role, text[0].upper() + text[1:] + "."))
            produced += length
            yield with_context(rows, {})  # as the projection writes them


Call = tuple[str, str | None, str | None, str | None]
"""A tool call: (id, name, arguments, result)."""


def make_row(
    environment: str,
    tenant: Tenant,
    user: str | None,
    thread_id: str,
    offset: int,
    seq: int,
    created: datetime,
    role: Role,
    content: str,
    call: Call | None = None,
) -> TranscriptRow:
    size = len(content) + sum(len(part or "") for part in (call or ()))
    return TranscriptRow(
        environment=environment,
        account_id=tenant.account_id,
        agent_id=tenant.agent_id,
        user_id=user,
        thread_id=thread_id,
        message_id=f"{thread_id}-{offset}",
        offset=offset,
        seq=seq,
        role=role,
        content=content,
        reasoning=None,
        tool_call_id=call[0] if call else None,
        tool_name=call[1] if call else None,
        tool_arguments=call[2] if call else None,
        tool_result=call[3] if call else None,
        created_at=created,
        token_count=max(1, size // 4),
        terms=message_terms(role, content),
    )
