"""Fault injectors: what the suite does to a running `Stack`. Each acts at once and returns what it hit.

Every kill is a SIGKILL (`kill -9`) by pid, taken from the supervisor's state file
(`Stack.pid`) or from the harness's own child (`Stack.supervisor_pid`). Recovery is not the
injector's business: the scenarios (`faults.scenarios`) wait for it and check it.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime

import redis
from confluent_kafka import Producer

from core.journal.models import Message
from faults.stack import Stack, running
from memstream.embedded.bootstrap import DEFAULT_ACCOUNT
from streams.codecs import journal_messages


class InjectionFailed(RuntimeError):
    """The fault could not be injected (e.g. the component had no pid): a harness error, not a finding."""


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_component(stack: Stack, component: str) -> int:
    """kill -9 one supervised component (broker, postgres, redis or node); returns its pid."""
    pid = stack.pid(component)
    if pid is None or not running(pid):
        raise InjectionFailed(f"{stack.name}: no running {component} to kill (state: {stack.state()})")
    kill(pid)
    return pid


def kill_supervisor(stack: Stack) -> int:
    """kill -9 the supervisor (`memstream up`) alone; its children are left to their fate."""
    pid = stack.supervisor_pid()
    if pid is None or not stack.alive():
        raise InjectionFailed(f"{stack.name}: the supervisor is not running")
    kill(pid)
    assert stack.up is not None and stack.up.proc is not None
    stack.up.proc.wait(10)
    return pid


def kill_tree(stack: Stack) -> list[int]:
    """kill -9 the supervisor and every child it recorded, at once (a crash of the whole machine's
    process tree); returns the pids. The supervisor is reaped; its children are not waited for."""
    pids = [stack.pid(component) for component in ("worker", "node", "redis", "postgres", "broker")]
    supervisor = stack.supervisor_pid()
    targets = [pid for pid in [supervisor, *pids] if pid is not None]
    for pid in targets:
        kill(pid)
    if stack.up is not None and stack.up.proc is not None:
        stack.up.proc.wait(10)
    return targets


def flush_redis(stack: Stack) -> None:
    """FLUSHALL on the stack's Redis: every key gone (thresholds state, guards, caches, locks)."""
    client = redis.Redis.from_url(stack.settings().redis, socket_timeout=5)
    try:
        client.flushall()
    finally:
        client.close()


def produce_poison(stack: Stack, thread_id: str, needle: str) -> None:
    """Put two records on the stack's `journal.messages` that its journal does not hold:
    - `{needle}.garbage`: a value that is not JSON at all (no consumer can read it);
    - `{needle}.newline`: a message of thread `thread_id` (e.g. an id ending in a newline, the record
      that once crash-looped the node), encoded exactly as the relay encodes messages. Its seq is 1,
      the lowest: a processor that checkpoints by seq can only be sent further back by it, never
      past real messages."""
    settings = stack.settings()
    message = Message.model_construct(
        message_id=f"{needle}.newline",
        environment=settings.environment,
        account_id=DEFAULT_ACCOUNT,
        agent_id="agent-0",
        user_id=None,
        thread_id=thread_id,
        offset=0,
        seq=1,
        role="user",
        content="a record no journal holds",
        reasoning=None,
        tool_call=None,
        created_at=datetime.now(UTC),
        token_count=6,
    )
    event = journal_messages.encode(message)
    producer = Producer({"bootstrap.servers": settings.broker_bootstrap})
    topic = settings.topic("journal.messages")
    garbage = f"{{not json {needle}.garbage".encode()
    producer.produce(topic, value=garbage, key=event.key, headers=[("message_id", f"{needle}.garbage")])
    producer.produce(topic, value=event.value, key=event.key, headers=event.headers)
    if producer.flush(15) != 0:
        raise InjectionFailed(f"{stack.name}: the poison records were not acknowledged by the broker")


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait up to `timeout` for every pid to end; the ones still running."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if running(pid)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)
