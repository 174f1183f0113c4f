"""`journal_message_search`: search the caller's past conversations (user and assistant messages).

Arguments (`parse_search_arguments`; each problem is an `InvalidInput` naming the argument):
- `query` (required): 1..MAX_QUERY_CHARS characters, not blank, with at least one word
  (a letter or digit); passed to the store as a bound parameter;
- `scope`: `all_threads` (default) or `current_thread` (needs the thread the call came from);
- `limit`: 1..MAX_LIMIT (default DEFAULT_LIMIT); outside is an error, never capped;
- `summarize`: true (default) or false;
- `after` / `before`: only messages whose `created_at` is at or after / before this time (an ISO
  8601 date, its start in UTC, or date and time; without an offset: UTC); `after` must be earlier
  than `before`.

Scope: always the caller's environment, account and agent, and the user the call acts for
(`TranscriptScope.user_id`): that user's threads only, or, for a call without a user (e.g. from
a thread that has none), only the threads without a user; the store never crosses it. Only
`user` and `assistant` messages are searched and returned (the store filters; hits of other
roles are dropped here too).

Results (plain JSON for the model):
- `summarize=false`: `messages`, best first: thread_id, message_id, offset, role, content,
  created_at (ISO 8601);
- `summarize=true`: `threads`, ordered by their best hit: thread_id, `summary` (one chat-model
  call per thread, run with bounded concurrency) and `matches` (message_id, offset, role, best
  first). When the model fails for a thread, that thread comes back with `summary: null`, a
  `note` saying why, and its matching messages in full; the other threads are unaffected.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from core.chat.base import ChatModel, ModelError
from core.errors import InvalidInput
from core.stores.transcripts import MessageHit, Period, TranscriptStore
from core.transcripts.arguments import (
    arguments_object,
    boolean,
    choice,
    integer,
    optional_time,
    required_string,
)
from core.transcripts.caller import JournalContext
from core.transcripts.hit_summaries import DEFAULT_SUMMARY_TOKENS, MatchSummarizer, hits_as_messages
from core.transcripts.rerank import DenseRerank

log = logging.getLogger("memstream.transcripts.search")

SEARCH = "journal_message_search"
MAX_QUERY_CHARS = 1_000
DEFAULT_LIMIT = 10
MAX_LIMIT = 50
SEARCHED_ROLES = ("user", "assistant")
SearchScope = Literal["current_thread", "all_threads"]
CURRENT_THREAD: SearchScope = "current_thread"
ALL_THREADS: SearchScope = "all_threads"
SCOPES: tuple[SearchScope, ...] = (CURRENT_THREAD, ALL_THREADS)
SEARCH_ARGUMENTS = ("query", "scope", "limit", "summarize", "after", "before")
_WORD = re.compile(r"[^\W_]", re.UNICODE)


@dataclass(frozen=True)
class SearchArgs:
    query: str
    scope: SearchScope = ALL_THREADS
    limit: int = DEFAULT_LIMIT
    summarize: bool = True
    period: Period | None = None


def parse_search_arguments(arguments: str | Mapping[str, Any]) -> SearchArgs:
    """The validated arguments (module doc); InvalidInput naming the first bad one."""
    args = arguments_object(SEARCH, arguments, SEARCH_ARGUMENTS)
    query = required_string(SEARCH, args, "query", max_chars=MAX_QUERY_CHARS)
    if not _WORD.search(query):
        raise InvalidInput(
            "arguments.query: must contain at least one word (a letter or digit) to search for",
            field="arguments.query",
        )
    after, before = optional_time(args, "after"), optional_time(args, "before")
    if after is not None and before is not None and after >= before:
        raise InvalidInput(
            f"arguments.after ({after.isoformat()}) must be earlier than arguments.before "
            f"({before.isoformat()})",
            field="arguments.after",
        )
    return SearchArgs(
        query=query,
        scope=choice(args, "scope", SCOPES, ALL_THREADS),
        limit=integer(args, "limit", default=DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT),
        summarize=boolean(args, "summarize", default=True),
        period=Period(after, before) if after is not None or before is not None else None,
    )


def message_view(hit: MessageHit) -> dict[str, Any]:
    """A matching message as the model sees it."""
    return {
        "thread_id": hit.thread_id,
        "message_id": hit.message_id,
        "offset": hit.offset,
        "role": hit.role,
        "content": hit.content,
        "created_at": hit.created_at.isoformat(),
    }


def reference_view(hit: MessageHit) -> dict[str, Any]:
    return {"message_id": hit.message_id, "offset": hit.offset, "role": hit.role}


def group_by_thread(hits: Sequence[MessageHit]) -> list[list[MessageHit]]:
    """Hits grouped per thread; threads in the order of their best hit, hits best first
    (`hits` is best first)."""
    groups: dict[str, list[MessageHit]] = {}
    for hit in hits:
        groups.setdefault(hit.thread_id, []).append(hit)
    return list(groups.values())


class TranscriptSearch:
    """Runs `journal_message_search` over a transcript store and a chat model (module doc). With
    `rerank` (`settings.transcript_vectors` on), the hits are the store's BM25 top candidates
    re-ordered with the dense signal (`core.transcripts.rerank`); without, the store's BM25 order."""

    def __init__(
        self,
        store: TranscriptStore,
        model: ChatModel,
        *,
        summary_max_tokens: int = DEFAULT_SUMMARY_TOKENS,
        concurrency: int = 4,
        rerank: DenseRerank | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self._store = store
        self._rerank = rerank
        self._summarizer = MatchSummarizer(model, max_tokens=summary_max_tokens)
        self._concurrency = concurrency

    async def invoke(self, arguments: str | Mapping[str, Any], context: JournalContext) -> dict[str, Any]:
        """Validate `arguments` and search; the JSON result for the model."""
        return await self.search(parse_search_arguments(arguments), context)

    async def search(self, args: SearchArgs, context: JournalContext) -> dict[str, Any]:
        thread_id: str | None = None
        if args.scope == CURRENT_THREAD:
            if context.thread_id is None:
                raise InvalidInput(
                    "arguments.scope: 'current_thread' needs the thread the call comes from: send the "
                    "call with its thread_id, or search 'all_threads'",
                    field="arguments.scope",
                )
            thread_id = context.thread_id
        if self._rerank is not None:
            found = await self._rerank.search(
                context.scope, args.query, thread_id=thread_id, limit=args.limit, period=args.period
            )
        else:
            found = await self._store.search(
                context.scope, args.query, thread_id=thread_id, limit=args.limit, period=args.period
            )
        hits = [hit for hit in found if hit.role in SEARCHED_ROLES][: args.limit]
        out: dict[str, Any] = {
            "query": args.query,
            "scope": args.scope,
            "limit": args.limit,
            "summarized": args.summarize,
            "count": len(hits),
        }
        if not args.summarize:
            out["messages"] = [message_view(hit) for hit in hits]
            return out
        groups = group_by_thread(hits)
        gate = asyncio.Semaphore(self._concurrency)

        async def one(group: list[MessageHit]) -> dict[str, Any]:
            async with gate:
                return await self._thread_result(args.query, group, context)

        out["threads"] = list(await asyncio.gather(*(one(group) for group in groups)))
        return out

    async def _thread_result(
        self, query: str, hits: list[MessageHit], context: JournalContext
    ) -> dict[str, Any]:
        thread_id = hits[0].thread_id
        try:
            summary = await self._summarizer.summarize(query, hits_as_messages(context.scope, hits))
        except ModelError as exc:
            log.warning("search summary of thread %s failed: %s: %s", thread_id, exc.code, exc.message)
            return {
                "thread_id": thread_id,
                "summary": None,
                "note": f"the summary could not be made ({exc.code}); the matching messages follow",
                "matches": [message_view(hit) for hit in hits],
            }
        return {
            "thread_id": thread_id,
            "summary": summary.text,
            "matches": [reference_view(hit) for hit in hits],
        }
