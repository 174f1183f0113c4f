"""The scenarios a profile's plan names: each injects one fault into the run's stack (under load) and
checks what is specific to it; `faults.run.Run.cycle` does the waiting and the standard checks.

- `node-kill`: kill -9 the node; the supervisor must restart it (a new node pid, /readyz 200).
- `tree-kill`: kill -9 the supervisor and all its children at once, then `memstream up` again at
  once: it must start on the first try (no stale PostgreSQL lock, no port or lock left behind).
- `supervisor-kill`: kill -9 the supervisor alone: its children must die with it, the data dir
  must stay locked while any of them lives, and `memstream up` must then start on the first try.
- `broker-kill`, `postgres-kill`: kill -9 that server: the stack must not stop - the supervisor
  starts the server again (a new pid) and the node recovers (/readyz 200); meanwhile 5xx answers
  must carry a specific code (e.g. 503 `postgres_unavailable`), never 500.
- `redis-wipe`: FLUSHALL: thresholds rebuild their counters from the journal; no compaction may
  strand. Not an outage: no 5xx is tolerated.
- `poison-record`: two records on `journal.messages` that no journal holds: one that is not JSON
  (every journal consumer must dead-letter it) and a message of a thread whose id ends in a newline
  (the record that once crash-looped the node; a consumer may store it or dead-letter it). The node
  must keep running and compactions keep flowing; then kill -9 of the node: the poison must not
  come back to stop it after the restart. (The projection may hold the newline thread, which the
  journal does not: `memstream verify` reporting it as projection-only is expected.)
- `fuzz`: the bounded schemathesis run and the crafted requests (`faults.fuzz`) against the node
  while the load goes on: no 5xx at all, the crafted requests refused or survived, and the node
  still ready afterwards.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable

from faults import fuzz
from faults.checks import CheckResult, dead_lettered, journal_consumers
from faults.injectors import (
    flush_redis,
    kill_component,
    kill_supervisor,
    kill_tree,
    produce_poison,
    wait_gone,
)
from faults.run import Injected, Run, wait_for
from faults.stack import COMPONENTS, running
from memstream.embedded.process import ServiceError

POISON_THREAD = "fz-poison\n"
"""The thread of the poison message: an id ending in a newline, which once crash-looped the node."""


def node_kill(run: Run) -> Injected:
    stack = run.stack
    pid = kill_component(stack, "node")
    injected = Injected(time.time())
    restarted = wait_for(
        lambda: stack.pid("node") not in (None, pid) and stack.ready(),
        run.profile.ready_timeout_s,
        abort=lambda: not stack.alive(),
    )
    if restarted:
        injected.ready_at = time.time()
    injected.checks.append(
        CheckResult(
            "supervisor restarts the node",
            restarted,
            f"node {pid} killed, new node {stack.pid('node')} ready"
            if restarted
            else f"no new ready node within {run.profile.ready_timeout_s:.0f}s (memstream up "
            f"{'running' if stack.alive() else 'exited ' + str(stack.exit_code())})",
        )
    )
    return injected


def _start_again(run: Run, injected: Injected, what: str) -> None:
    """`memstream up` again at once after `what`: it must come up on the first try."""
    try:
        seconds = run.stack.start(timeout=run.profile.ready_timeout_s * 2)
    except ServiceError:
        injected.checks.append(
            CheckResult(
                "memstream up starts on the first try",
                False,
                f"right after {what}: {start_failure(run.stack.output())}",
            )
        )
        return
    injected.ready_at = time.time()
    injected.checks.append(
        CheckResult("memstream up starts on the first try", True, f"ready in {seconds:.1f}s after {what}")
    )


def start_failure(output: str) -> str:
    """Why a `memstream up` failed, from its output: its `error:` line and any line naming a lock."""
    lines = output.splitlines()
    keep = [line for line in lines if line.startswith("error:")][:1]
    keep += [line for line in lines if "lock" in line.lower() and line not in keep][:1]
    return " | ".join(line.strip() for line in keep)[:400] or "exited without an error line"


def tree_kill(run: Run) -> Injected:
    pids = kill_tree(run.stack)
    injected = Injected(time.time())
    run.log(f"tree-kill: killed {len(pids)} processes {pids}")
    _start_again(run, injected, "kill -9 of the whole tree")
    return injected


def supervisor_kill(run: Run) -> Injected:
    stack = run.stack
    children = {c: pid for c in COMPONENTS if (pid := stack.pid(c)) is not None}
    kill_supervisor(stack)
    injected = Injected(time.time())
    injected.checks.append(_lock_held_check(run, list(children.values())))
    alive = wait_gone(list(children.values()), timeout=20)
    orphans = [f"{name} {pid}" for name, pid in children.items() if pid in alive]
    injected.checks.append(
        CheckResult(
            "children die with their supervisor",
            not orphans,
            f"still running 20s after kill -9 of the supervisor: {', '.join(orphans)}"
            if orphans
            else "every child ended",
        )
    )
    if orphans:
        stack.sweep()
    _start_again(run, injected, "kill -9 of the supervisor")
    return injected


def _lock_held_check(run: Run, children: list[int]) -> CheckResult:
    """Right after the supervisor died: while any of its children lives, a second `memstream up`
    must find the data dir locked. Checked on `run/lock` (the supervisor's flock) while holding it,
    so no child can end unseen."""
    path = run.stack.data_dir / "run" / "lock"
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return CheckResult("data dir stays locked while a child lives", True, "a second up is refused")
        try:
            live = [pid for pid in children if running(pid)]
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    return CheckResult(
        "data dir stays locked while a child lives",
        not live,
        f"the data-dir lock was free while {len(live)} process(es) of the stack ran"
        if live
        else "every child had ended",
    )


def _server_kill(component: str) -> Callable[[Run], Injected]:
    def scenario(run: Run) -> Injected:
        stack = run.stack
        pid = kill_component(stack, component)
        injected = Injected(time.time())
        back = wait_for(
            lambda: stack.pid(component) not in (None, pid) and stack.ready(),
            run.profile.ready_timeout_s,
            abort=lambda: not stack.alive(),
        )
        if back:
            injected.ready_at = time.time()
            detail = f"{component} {pid} killed; restarted as {stack.pid(component)}, node ready"
        elif not stack.alive():
            detail = f"memstream up stopped (exit {stack.exit_code()}): {stack.output_tail(3)!r}"
        else:
            detail = (
                f"{component} not restarted (or node not ready) within {run.profile.ready_timeout_s:.0f}s"
            )
        injected.checks.append(CheckResult(f"the stack survives the death of {component}", back, detail))
        return injected

    return scenario


def redis_wipe(run: Run) -> Injected:
    flush_redis(run.stack)
    return Injected(time.time(), outage=False, restarts=False, ready_at=time.time())


def fuzz_run(run: Run) -> Injected:
    stack = run.stack
    injected = Injected(time.time(), outage=False, restarts=False)
    result = fuzz.run_schemathesis(
        stack.url, run.subject.api_key, max_time_s=run.profile.fuzz_s, seed=run.seed, work=run.work / "fuzz"
    )
    run.totals.fuzz_requests += result.requests
    run.totals.fuzz_5xx += len(result.server_errors)
    probes = fuzz.run_probes(stack.url, run.subject.api_key, "fz-agent", stack.data_dir / "logs" / "node.log")
    injected.checks += [fuzz.check_fuzz(result), fuzz.check_probes(probes)]
    ready = wait_for(stack.ready, 10)
    injected.checks.append(
        CheckResult(
            "node ready after the fuzz run", ready, "ready" if ready else "/readyz does not answer 200"
        )
    )
    if ready:
        injected.ready_at = time.time()
    return injected


def poison_record(run: Run) -> Injected:
    stack = run.stack
    settings = stack.settings()
    node = stack.pid("node")
    needle = f"fz-poison-{time.time_ns()}"
    run.subject.injected_threads.add(POISON_THREAD)
    produce_poison(stack, POISON_THREAD, needle)
    consumers = journal_consumers(settings)
    counts: dict[str, int] = {}

    def all_dead_lettered() -> bool:
        counts.update(dead_lettered(settings, consumers, f"{needle}.garbage"))
        return all(counts.get(p, 0) > 0 for p in consumers)

    done = wait_for(all_dead_lettered, run.profile.settle_s, abort=lambda: stack.pid("node") != node)
    missing = [p for p in consumers if not counts.get(p)]
    checks = [
        CheckResult(
            "every journal consumer dead-letters a record it cannot read",
            done,
            f"in {', '.join(f'dlq.{p}' for p in consumers)}"
            if done
            else f"not in {', '.join(f'dlq.{p}' for p in missing)} after {run.profile.settle_s:.0f}s",
        ),
        CheckResult(
            "the poison does not stop the node",
            stack.pid("node") == node and stack.ready(),
            f"node {node} still serving" if stack.pid("node") == node else f"node {node} was replaced",
        ),
    ]
    injected = node_kill(run)  # then a restart: the poison must not come back
    injected.checks[:0] = checks
    restarted = stack.pid("node")

    def still_running() -> CheckResult:
        same = stack.pid("node") == restarted and stack.ready()
        return CheckResult(
            "the poison does not come back after a restart",
            same,
            f"node {restarted} still serving" if same else f"node {restarted} was replaced or is not ready",
        )

    injected.later.append(still_running)
    return injected


SCENARIOS: dict[str, Callable[[Run], Injected]] = {
    "node-kill": node_kill,
    "tree-kill": tree_kill,
    "supervisor-kill": supervisor_kill,
    "broker-kill": _server_kill("broker"),
    "postgres-kill": _server_kill("postgres"),
    "redis-wipe": redis_wipe,
    "fuzz": fuzz_run,
    "poison-record": poison_record,
}
