"""The second-writer phase: a second stack opens the journal of a stack under load.

Two deployments configured with the same journal, as in issue 9: stack A (`memstream up` with an
external PostgreSQL and Redis, so A stopping does not take them away) serves the load; stack B
starts with its own data dir and broker but A's journal (`MEMSTREAM_JOURNAL_URL`), A's summaries
(`MEMSTREAM_OBJECT_STORE_URL`) and the same PostgreSQL and Redis. Opening the journal fences A.
Once B is ready the load fails over to B (appends without an answer are retried there with the
same message ids), and both stacks are watched for `observe_s`:

- the fenced writer stops for good: A's `memstream up` exits and its node is never restarted
  (a restarted node would fence B in turn: writers that never settle);
- the new writer keeps the journal: B's node stays the same process and ready throughout (a few
  slow /readyz answers aside);
- then the standard checks on B: every acknowledged append (to A or B) in the journal once, and
  B's projection complete although A's relay had moved the shared relay cursor while publishing
  to A's broker (B must find and republish that gap itself).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from bench.server_group import server_group
from faults.checks import CheckResult, Window
from faults.ledger import Ledger
from faults.load import Load, Target, conversations
from faults.report import CycleResult
from faults.run import GRACE_S, Subject, standard_checks
from faults.stack import Ports, Stack
from memstream.embedded import services
from memstream.embedded.process import ServiceError, free_port

if TYPE_CHECKING:
    from faults.run import Run

_NODE_EXITED = re.compile(r"node exited \(code (-?\d+|None)\)")


def node_exits(output: str) -> list[str]:
    """Exit codes of the nodes a supervisor restarted, from its output."""
    return _NODE_EXITED.findall(output)


def second_writer(run: Run) -> CycleResult:
    profile = run.profile
    work = run.work / "second-writer"
    result = CycleResult("second-writer", 1, time.time())
    clock = time.monotonic()
    pg_port, redis_port = free_port(), free_port()
    ledger = Ledger()
    load: Load | None = None
    with server_group(work / "servers", keep=True) as group:
        group.start(services.postgres_process(work / "servers", pg_port))
        services.ensure_database(pg_port)
        group.start(services.redis_process(work / "servers", redis_port))
        shared = {
            "MEMSTREAM_POSTGRES_DSN": f"postgresql://postgres@127.0.0.1:{pg_port}/memstream",
            "MEMSTREAM_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        }
        a = Stack("writer-a", work / "a", Ports.free(), extra_env=shared)
        objects = a.data_dir / "objects"
        b = Stack(
            "writer-b",
            work / "b",
            Ports.free(),
            extra_env={
                **shared,
                "MEMSTREAM_JOURNAL_URL": f"file://{a.data_dir / 'journal'}",
                "MEMSTREAM_OBJECT_STORE_URL": f"file://{objects}",
            },
        )
        try:
            a.start()
            subject_a = Subject.of(a, ledger)
            load = Load(
                ledger,
                Target(a.url, subject_a.api_key),
                conversations("w", profile.conversations // 2, seed=run.seed + 1),
                workers=profile.workers,
                rate=profile.rate,
                seed=run.seed + 1,
            )
            load.start()
            time.sleep(profile.warm_s)
            at = time.time()
            try:
                b.start()
            except ServiceError as exc:
                result.checks.append(CheckResult("the second writer starts", False, str(exc).splitlines()[0]))
                return result
            ready_at = time.time()
            result.ready_s = ready_at - at
            load.retarget(Target(b.url, subject_a.api_key))
            run.log(f"second-writer: stack B ready in {result.ready_s:.1f}s on A's journal; load moved to B")
            result.checks += observe(a, b, profile.observe_s)
            if not load.pause(timeout=60):
                result.notes.append("some appends were still unresolved 60s after the load paused")
            if b.ready():
                subject_b = Subject.of(b, ledger, objects=objects)
                result.checks += standard_checks(
                    subject_b,
                    since=result.started_at,
                    windows=[Window(at - 1.0, ready_at + GRACE_S)],
                    settle_s=profile.settle_s,
                )
            else:
                result.checks.append(
                    CheckResult("the new writer serves", False, "B is not ready: nothing to check")
                )
        finally:
            if load is not None:
                load.stop(timeout=10)
            for stack in (b, a):
                left = stack.stop(timeout=30)
                if left:
                    result.notes.append(f"{stack.name}: killed leftover processes {', '.join(left)}")
            run._account(ledger)
            result.count_journal()
            result.seconds = time.monotonic() - clock
            run.report_cycle(result)
    return result


def observe(a: Stack, b: Stack, seconds: float) -> list[CheckResult]:
    """Watch both stacks for `seconds` (module doc); the two checks of who writes."""
    a_nodes = {a.pid("node")}
    b_nodes = {b.pid("node")}
    b_unready = 0
    samples = 0
    a_exited_after: float | None = None
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        samples += 1
        b_nodes.add(b.pid("node"))
        if a.alive():
            a_nodes.add(a.pid("node"))
        if not b.ready():
            b_unready += 1
        if a_exited_after is None and not a.alive():
            a_exited_after = time.monotonic() - started
        time.sleep(0.5)
    a_restarts = node_exits(a.output())
    b_restarts = node_exits(b.output())
    a_nodes.discard(None)
    if len(a_nodes) > 1 and not a_restarts:  # a restart the output did not announce
        a_restarts = ["?"] * (len(a_nodes) - 1)
    a_tail = a.output_tail(2).replace("\n", " | ")
    if a_exited_after is not None and not a_restarts:
        fenced = CheckResult(
            "the fenced writer stops for good",
            True,
            f"memstream up of A exited with code {a.exit_code()} after {a_exited_after:.1f}s: {a_tail}",
        )
    else:
        fenced = CheckResult(
            "the fenced writer stops for good",
            False,
            f"A's supervisor restarted its node {len(a_restarts)} time(s) "
            f"(exit codes {', '.join(a_restarts) or '-'}), "
            f"memstream up of A {'still running' if a.alive() else f'exited {a.exit_code()}'}: {a_tail}",
        )
    b_nodes.discard(None)
    # a /readyz slower than its 2 s timeout on a loaded machine is not a handover: tolerate a few
    steady = len(b_nodes) == 1 and not b_restarts and b_unready <= samples // 10 and b.alive()
    kept = CheckResult(
        "the new writer keeps the journal",
        steady,
        f"B's node stayed {next(iter(b_nodes))}, ready in {samples - b_unready} of {samples} samples"
        if steady
        else f"B's node restarted {len(b_restarts)} time(s) (exit codes {', '.join(b_restarts) or '-'}), "
        f"unready in {b_unready} of {samples} samples, memstream up of B "
        f"{'running' if b.alive() else f'exited {b.exit_code()}'}",
        {"handovers": float(len(a_restarts) + len(b_restarts))},
    )
    return [fenced, kept]
