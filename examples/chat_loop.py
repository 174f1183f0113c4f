"""An OpenAI-compatible chat loop with memstream's context and tools.

    export MEMSTREAM_URL=http://127.0.0.1:8080 MEMSTREAM_API_KEY=$(cat .memstream/api-key)
    export OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_MODEL=qwen2.5-7b-instruct OPENAI_API_KEY=sk-...
    .venv/bin/python examples/chat_loop.py --agent support-bot --user u-42 --thread t-1

For each user turn: append the user message to the thread; get memstream's context (pinned facts,
summary, recent window) as the messages to send; offer the agent's tools from memstream (the
memory tools when `memory` is bound - `--bind-memory` binds it - and the journal tools); run the
model's tool calls through memstream, appending each call and its result to the thread, and ask
again; append the assistant's answer. Any OpenAI-compatible `/v1/chat/completions` server works
(OpenAI, vLLM, llama.cpp's server): memstream's offline chat model serves no such endpoint.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from memstream.client import (
    InvalidInputError,
    MemstreamClient,
    NotFoundError,
    chat_messages,
    tool_definitions,
)
from memstream.client.calls import MessageInput

SYSTEM_PROMPT = (
    "You are a helpful assistant with a long-term memory. Use memory_recall before answering "
    "questions about the user or earlier work, and memory_store for lasting facts worth keeping."
)
MAX_TOOL_ROUNDS = 5


@dataclass(frozen=True)
class ModelToolCall:
    id: str
    name: str
    arguments: str
    """JSON text, as the model sent it."""


@dataclass(frozen=True)
class Reply:
    """One answer of the model: text, tool calls, or both."""

    content: str | None
    tool_calls: list[ModelToolCall] = field(default_factory=list)


class ChatModel(Protocol):
    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply: ...


class OpenAIChatModel:
    """A model behind any OpenAI-compatible endpoint (the `openai` package)."""

    def __init__(self, base_url: str | None, api_key: str, model: str) -> None:
        from openai import OpenAI

        self._client = OpenAI(base_url=base_url, api_key=api_key)
        self._model = model

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        response = self._client.chat.completions.create(
            model=self._model,
            messages=messages,  # type: ignore[arg-type]  # plain dicts of the documented shape
            tools=tools or None,  # type: ignore[arg-type]
        )
        message = response.choices[0].message
        calls = [
            ModelToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "{}")
            for call in message.tool_calls or []
            if call.type == "function"
        ]
        return Reply(content=message.content, tool_calls=calls)


@dataclass(frozen=True)
class Agent:
    """Who talks: the agent, the user it acts for, the thread."""

    agent_id: str
    user_id: str | None
    thread_id: str


def run_tool(ms: MemstreamClient, who: Agent, call: ModelToolCall) -> str:
    """The tool's result as JSON text for the model; a refused call (unknown tool, invalid
    arguments) becomes an error result the model can correct, not a crash."""
    try:
        result = ms.call_tool(
            who.agent_id, call.name, call.arguments, user_id=who.user_id, thread_id=who.thread_id
        )
    except (NotFoundError, InvalidInputError) as exc:
        return json.dumps({"error": {"code": exc.code, "message": exc.message, "field": exc.field}})
    return json.dumps(result.result)


def recorded_arguments(arguments: str) -> str:
    """The call's arguments as the thread keeps them: a JSON object's text. Arguments the model
    garbled are kept as `{}` (memstream's journal refuses anything else); the tool call itself still
    gets the garbled text and answers with an error the model sees."""
    try:
        return arguments if isinstance(json.loads(arguments), dict) else "{}"
    except ValueError:
        return "{}"


def turn(ms: MemstreamClient, model: ChatModel, who: Agent, user_text: str) -> str:
    """One user turn (see the module doc); the assistant's answer."""
    ms.append(
        who.thread_id, [{"role": "user", "content": user_text}], agent_id=who.agent_id, user_id=who.user_id
    )
    tools = tool_definitions(ms.list_tools(who.agent_id, user_id=who.user_id))
    for _ in range(MAX_TOOL_ROUNDS):
        context = ms.get_context(who.thread_id)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, *chat_messages(context)]
        reply = model.complete(messages, tools)
        if not reply.tool_calls:
            answer = reply.content or ""
            ms.append(who.thread_id, [{"role": "assistant", "content": answer}])
            return answer
        recorded: list[MessageInput] = []
        for index, call in enumerate(reply.tool_calls):  # memstream keeps one tool call per message
            tool_call = {"id": call.id, "name": call.name, "arguments": recorded_arguments(call.arguments)}
            text = (reply.content or "") if index == 0 else ""
            recorded.append({"role": "assistant", "content": text, "tool_call": tool_call})
            recorded.append({"role": "tool", "tool_call": {"id": call.id, "result": run_tool(ms, who, call)}})
        ms.append(who.thread_id, recorded)
    answer = "(stopped: too many tool calls in one turn)"
    ms.append(who.thread_id, [{"role": "assistant", "content": answer}])
    return answer


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agent", default="support-bot")
    parser.add_argument("--user", default=None, help="the user the agent talks to (default: none)")
    parser.add_argument("--thread", default="chat-1")
    parser.add_argument("--bind-memory", action="store_true", help="bind the memory capability first")
    args = parser.parse_args(argv)
    model = OpenAIChatModel(
        base_url=os.environ.get("OPENAI_BASE_URL"),
        api_key=os.environ.get("OPENAI_API_KEY", "unused"),
        model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
    )
    who = Agent(agent_id=args.agent, user_id=args.user, thread_id=args.thread)
    url = os.environ.get("MEMSTREAM_URL", "http://127.0.0.1:8080")
    with MemstreamClient(url, os.environ["MEMSTREAM_API_KEY"]) as ms:
        if args.bind_memory:
            ms.bind_agent(args.agent, ["memory"])
        while True:
            try:
                text = input("you> ").strip()
            except EOFError:
                return
            if text:
                print(f"assistant> {turn(ms, model, who, text)}")


if __name__ == "__main__":
    main()
