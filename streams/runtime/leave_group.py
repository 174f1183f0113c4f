"""Leaving a consumer group for a faust member that will not (Tansu: generation 0).

aiokafka sends LeaveGroup on close only when its generation is > 0; Tansu hands out generation 0,
so a stopped faust member lingers in the group: the broker keeps refusing admin offset changes
(`UNKNOWN_MEMBER_ID`) and a new member waits a session timeout to join. `member_of(runtime)` reads
the member id and generation of a running runtime (faust/aiokafka internals, read only: faust reads
the same attribute itself); after the runtime stopped, `leave_group(bootstrap, group, member)` sends
the LeaveGroup aiokafka skipped. It is best effort: a failure is logged, never raised.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from aiokafka.client import AIOKafkaClient, CoordinationType  # type: ignore[import-untyped]
from aiokafka.protocol.group import LeaveGroupRequest  # type: ignore[import-untyped]

from streams.runtime.app import ProcessorRuntime

log = logging.getLogger("memstream.runtime")


@dataclass(frozen=True)
class Member:
    group_id: str
    member_id: str
    generation: int

    @property
    def leaves_by_itself(self) -> bool:
        """aiokafka sends LeaveGroup itself for a generation > 0 (module doc)."""
        return self.generation > 0


def member_of(runtime: ProcessorRuntime) -> Member | None:
    """The runtime's group membership, or None when it has none (not joined, or internals moved)."""
    try:
        thread: Any = getattr(runtime.app.consumer, "_thread")  # noqa: B009 (private, read only)
        coordinator = thread._consumer._coordinator
        member_id, generation = str(coordinator.member_id), int(coordinator.generation)
    except Exception:  # faust/aiokafka internals: absent when not started
        return None
    if not member_id:
        return None
    return Member(group_id=runtime.group_id, member_id=member_id, generation=generation)


async def leave_group(bootstrap: str, member: Member, *, timeout_s: float = 10.0) -> bool:
    """Send LeaveGroup for `member` (module doc); True when the broker accepted it."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=int(timeout_s * 1000))
    try:
        await client.bootstrap()
        node_id = await client.coordinator_lookup(CoordinationType.GROUP, member.group_id)
        response = await client.send(node_id, LeaveGroupRequest(member.group_id, member.member_id))
        error = getattr(response, "error_code", 0)
        if error:
            log.warning("LeaveGroup of %s in %s answered error %s", member.member_id, member.group_id, error)
            return False
        log.info("member %s left group %s", member.member_id, member.group_id)
        return True
    except Exception as exc:
        log.warning("LeaveGroup of %s in %s failed: %r", member.member_id, member.group_id, exc)
        return False
    finally:
        await client.close()
