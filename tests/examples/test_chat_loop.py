"""examples/chat_loop.py against a real node, with a scripted model in place of the OpenAI-compatible
endpoint (memstream's offline chat model serves none): what the loop sends the model, and what it
records in the thread and in memory."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from core.config import Settings
from memstream.client import MemstreamClient
from tests.memstream.client.node_scenario import node_with_key

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chat_loop.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chat_loop", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chat_loop"] = module
    spec.loader.exec_module(module)
    return module


chat_loop = _load()


class ScriptedModel:
    """Answers with `replies` in order and keeps what it was sent."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.sent: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        self.sent.append((messages, tools))
        return self.replies.pop(0)


def _call(call_id: str, name: str, arguments: dict[str, Any] | str) -> Any:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return chat_loop.ModelToolCall(id=call_id, name=name, arguments=text)


@pytest.fixture
def node(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, str]]:
    yield from node_with_key(settings, tmp_path)


def test_a_turn_runs_the_models_tool_calls_through_memstream_and_records_them(node: tuple[str, str]) -> None:
    url, key = node
    who = chat_loop.Agent(agent_id="bot", user_id="ada", thread_id="chat-1")
    store = {
        "key": "user.diet",
        "content": "Ada is vegetarian.",
        "category": "user_profile",
        "importance": 0.9,
    }
    model = ScriptedModel(
        chat_loop.Reply(
            content="Let me remember that.",
            tool_calls=[
                _call("call-1", "memory_store", store),
                _call("call-2", "weather", {"city": "Paris"}),  # no such tool
                _call("call-3", "memory_recall", "{not json"),  # garbled arguments
            ],
        ),
        chat_loop.Reply(content="Noted: you are vegetarian."),
        chat_loop.Reply(content="", tool_calls=[_call("call-4", "memory_recall", {"query": "vegetarian"})]),
        chat_loop.Reply(content="You are vegetarian."),
    )
    with MemstreamClient(url, key) as ms:
        ms.bind_agent("bot", ["memory"])
        assert chat_loop.turn(ms, model, who, "I'm vegetarian, remember it.") == "Noted: you are vegetarian."

        first_messages, tools = model.sent[0]
        assert first_messages == [
            {"role": "system", "content": chat_loop.SYSTEM_PROMPT},
            {"role": "user", "content": "I'm vegetarian, remember it."},
        ]
        assert {t["function"]["name"] for t in tools} >= {
            "memory_store",
            "memory_recall",
            "journal_message_search",
        }
        # the second round sees the calls and their results, read back from memstream's context
        second_messages, _ = model.sent[1]
        results = {
            m["tool_call_id"]: json.loads(m["content"]) for m in second_messages if m["role"] == "tool"
        }
        assert results["call-1"]["entry"]["content"] == "Ada is vegetarian."
        assert results["call-2"]["error"]["code"] == "unknown_tool"
        assert results["call-3"]["error"]["code"] == "invalid_input"
        calls = [m["tool_calls"][0] for m in second_messages if m.get("tool_calls")]
        assert [(c["id"], c["function"]["name"]) for c in calls] == [
            ("call-1", "memory_store"),
            ("call-2", "weather"),
            ("call-3", "memory_recall"),
        ]
        assert calls[2]["function"]["arguments"] == "{}"

        assert chat_loop.turn(ms, model, who, "What do I eat?") == "You are vegetarian."
        third_messages, _ = model.sent[2]
        assert third_messages[1]["role"] == "system" and "Ada is vegetarian." in third_messages[1]["content"]
        fourth_messages, _ = model.sent[3]
        recalled = json.loads(fourth_messages[-1]["content"])
        assert [hit["key"] for hit in recalled["results"]] == ["user.diet"]

        stored = ms.read_messages("chat-1").messages
        assert [
            (m.role, m.content) for m in stored if m.role in ("user", "assistant") and m.tool_call is None
        ] == [
            ("user", "I'm vegetarian, remember it."),
            ("assistant", "Noted: you are vegetarian."),
            ("user", "What do I eat?"),
            ("assistant", "You are vegetarian."),
        ]
        assert len(stored) == 12  # 2 user, 4 tool calls and their 4 results, 2 answers
        assert [e.key for e in ms.list_memory("bot", user_id="ada").entries] == ["user.diet"]


def test_a_model_that_keeps_calling_tools_is_stopped(node: tuple[str, str]) -> None:
    url, key = node
    who = chat_loop.Agent(agent_id="bot", user_id=None, thread_id="chat-2")
    search = {"query": "anything", "summarize": False}
    model = ScriptedModel(
        *(
            chat_loop.Reply(content=None, tool_calls=[_call(f"c-{n}", "journal_message_search", search)])
            for n in range(chat_loop.MAX_TOOL_ROUNDS)
        )
    )
    with MemstreamClient(url, key) as ms:
        answer = chat_loop.turn(ms, model, who, "hello")
        assert answer.startswith("(stopped")
        assert len(model.sent) == chat_loop.MAX_TOOL_ROUNDS
        assert ms.read_messages("chat-2").messages[-1].content == answer
