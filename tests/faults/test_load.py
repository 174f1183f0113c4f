"""Unit tests of the load generator's requests (validated by the API's own request model)."""

from __future__ import annotations

import random

from faults.load import append_bodies, conversations
from memstream.api.schemas import AppendRequest


def test_every_generated_append_is_a_valid_request_with_stable_ids() -> None:
    rng = random.Random(3)
    kinds = set()
    for conversation in conversations("c", 6, seed=1):
        for k in range(40):
            bodies = append_bodies(conversation, k, rng)
            AppendRequest.model_validate(
                {"agent_id": conversation.agent_id, "user_id": conversation.user_id, "messages": bodies}
            )
            assert [b["message_id"] for b in bodies] == [
                f"{conversation.thread_id}.m{k}.{i}" for i in range(len(bodies))
            ]
            kinds.add(tuple(b["role"] for b in bodies))
    assert ("assistant", "tool") in kinds and ("user", "assistant") in kinds
    assert ("user",) in kinds and ("assistant",) in kinds


def test_conversations_mix_users_agents_and_rates() -> None:
    convs = conversations("c", 9, seed=1)
    assert len({c.thread_id for c in convs}) == 9
    assert any(c.user_id is None for c in convs) and any(c.user_id for c in convs)
    assert {c.agent_id for c in convs} == {"agent-0", "agent-1", "agent-2"}
    assert any(c.hot for c in convs) and not all(c.hot for c in convs)
