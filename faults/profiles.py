"""How much the suite does: the `short` profile (CI, ~5 min) and the `long` one (20 kill -9 cycles).

A profile is a plan - the scenarios run one after another on one stack under continuous load
(`faults.scenarios.SCENARIOS` names them) - then, unless disabled, the second-writer phase on
stacks of its own, and the timings every cycle uses.
"""

from __future__ import annotations

from dataclasses import dataclass

EVERY_FAULT = ("supervisor-kill", "broker-kill", "postgres-kill", "redis-wipe")


@dataclass(frozen=True)
class Profile:
    name: str
    plan: tuple[str, ...]
    second_writer: bool = True
    fuzz_s: float = 40.0  # schemathesis --max-time
    warm_s: float = 4.0  # load before each fault
    post_s: float = 3.0  # load after the stack is ready again
    ready_timeout_s: float = 60.0  # longest wait for /readyz after a fault
    catch_up_s: float = 45.0  # longest wait for the projection to hold the journal
    settle_s: float = 45.0  # longest wait for compactions once the load paused
    observe_s: float = 15.0  # second writer: how long both stacks are watched
    conversations: int = 24
    workers: int = 4
    rate: float = 20.0  # appends per second, all workers together

    def kill_cycles(self) -> int:
        return sum(1 for name in self.plan if name in ("node-kill", "tree-kill"))


SHORT = Profile(
    "short",
    # the broker is killed twice: the second time on a stack that already lived through one, while
    # the consumers carry positions and offsets of the topics the first kill replaced
    plan=("node-kill", "tree-kill", *EVERY_FAULT, "broker-kill", "fuzz", "poison-record"),
)


def long_profile(cycles: int = 20) -> Profile:
    """`cycles` kill -9 cycles alternating node alone / whole tree, one of every other fault after
    every fifth cycle (round robin), then the fuzz run (5 min) and the poison record."""
    plan: list[str] = []
    others = list(EVERY_FAULT)
    for i in range(cycles):
        plan.append("node-kill" if i % 2 == 0 else "tree-kill")
        if i % 5 == 4:
            plan.append(others[(i // 5) % len(others)])
    plan += [name for name in EVERY_FAULT if name not in plan]
    plan += ["fuzz", "poison-record"]
    return Profile(
        "long", plan=tuple(plan), fuzz_s=300.0, warm_s=8.0, post_s=5.0, observe_s=60.0, conversations=40
    )
