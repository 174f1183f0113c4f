"""A run of a profile: one stack under continuous load, a cycle per planned scenario, then the
second-writer phase; answers a `RunReport`.

A cycle (`Run.cycle`): the load runs `warm_s`, the scenario injects its fault (and does what its
recovery needs from outside, e.g. `memstream up` again after the whole tree died), the run waits
for `/readyz` (restart-to-ready), then for `memstream verify` to find the projection holding the
whole journal while the load goes on (restart-to-caught-up), lets the load run `post_s` more,
pauses it (every open append resolved) and runs the standard checks (`standard_checks`). A stack
that did not come back is started again by the harness (a failed check, counted in the totals), so
one failure does not hide the next scenario's.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from faults import checks, compaction_checks
from faults.checks import CheckResult, Window
from faults.ledger import Conversation, Ledger
from faults.load import Load, Target, conversations
from faults.profiles import Profile
from faults.report import CycleResult, RunReport, Totals
from faults.stack import Ports, Stack
from memstream.embedded.bootstrap import DEFAULT_ACCOUNT
from memstream.embedded.process import ServiceError
from memstream.ops.admin_token import read_admin_token
from memstream.wiring.processors import threshold_namespace

GRACE_S = 10.0
"""5xx with a specific code stay tolerated this long after the stack is ready again."""

Say = Callable[[str], None]


class RunAborted(RuntimeError):
    """The harness cannot go on (a stack that cannot be started at all)."""


@dataclass
class Subject:
    """What the checks read: a node's API and admin API, its object store and Redis, and the ledger
    of the load that wrote to it."""

    url: str
    api_key: str
    admin_token: str
    objects: Path
    redis_url: str
    thresholds_namespace: str  # the deployment's Redis namespace of the threshold state
    environment: str
    ledger: Ledger
    account: str = DEFAULT_ACCOUNT
    summary_versions: dict[str, int] = field(default_factory=dict)  # highest seen per thread
    injected_threads: set[str] = field(default_factory=set)  # put on the topic, not in the journal

    @classmethod
    def of(cls, stack: Stack, ledger: Ledger, *, objects: Path | None = None) -> Subject:
        settings = stack.settings()
        return cls(
            url=stack.url,
            api_key=api_key(stack),
            admin_token=read_admin_token(settings),
            objects=objects or settings.data_path / "objects",
            redis_url=settings.redis,
            thresholds_namespace=threshold_namespace(settings),
            environment=settings.environment,
            ledger=ledger,
        )

    def conversations(self) -> list[Conversation]:
        return list(self.ledger.view().conversations.values())


def api_key(stack: Stack) -> str:
    return (stack.data_dir / "api-key").read_text().strip()


def _guarded(name: str, check: Callable[[], CheckResult]) -> CheckResult:
    """Run `check`; a failure to even read what it checks is a failed check naming the error."""
    try:
        return check()
    except Exception as exc:
        return CheckResult(name, False, f"could not check: {type(exc).__name__}: {exc}")


def standard_checks(
    subject: Subject, *, since: float, windows: list[Window], settle_s: float
) -> list[CheckResult]:
    """The invariants after every fault (module doc of `faults.checks`), with the load paused."""
    view = subject.ledger.view()
    names = list(view.conversations)
    journal: dict[str, list[checks.JournalRow]] = {}

    def journal_check() -> CheckResult:
        journal.update(checks.read_journal(subject.url, subject.api_key, names))
        return checks.check_journal(view, journal)

    results = [
        _guarded("journal", journal_check),
        checks.check_rejections(view, since),
        _guarded(
            "memstream verify",
            lambda: checks.check_projection(
                checks.verify(subject.url, subject.admin_token, settle_s=60), subject.injected_threads
            ),
        ),
        _guarded("processors running", lambda: checks.check_processors(subject.url, subject.admin_token)),
    ]
    if journal:
        results.append(
            _guarded("no stranded compaction", lambda: compaction_check(subject, journal, settle_s))
        )
    results.append(checks.check_server_errors([e for e in view.server_errors if e.at >= since], windows))
    return results


def compaction_check(
    subject: Subject, journal: dict[str, list[checks.JournalRow]], settle_s: float
) -> CheckResult:
    """Wait up to `settle_s` for every compaction to finish, then judge
    (`compaction_checks.check_compaction`)."""
    convs = subject.conversations()
    deadline = time.monotonic() + settle_s
    while True:
        summaries = compaction_checks.read_summaries(
            subject.objects, subject.environment, subject.account, convs
        )
        stranded = compaction_checks.stranded_threads(journal, summaries)
        guards = compaction_checks.read_guards(
            subject.redis_url, subject.thresholds_namespace, subject.environment, subject.account, convs
        )
        if (not stranded and not guards) or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    backwards = compaction_checks.versions_backwards(subject.summary_versions, summaries)
    for thread_id, summary in summaries.items():
        if summary is not None:
            subject.summary_versions[thread_id] = max(
                subject.summary_versions.get(thread_id, 0), summary.version
            )
    return compaction_checks.check_compaction(summaries, stranded, guards, backwards, settle_s)


def wait_for(
    condition: Callable[[], bool], timeout: float, *, abort: Callable[[], bool] = lambda: False
) -> bool:
    """Poll `condition` until true (True), `timeout` passes or `abort` is true (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if abort():
            return False
        time.sleep(0.2)
    return condition()


@dataclass
class Injected:
    """What a scenario did: when the fault hit, its own checks, and whether it is an outage (5xx
    with a specific code tolerated until the stack is ready again, plus `GRACE_S`)."""

    at: float
    checks: list[CheckResult] = field(default_factory=list)
    outage: bool = True
    restarts: bool = True  # something was killed: restart-to-ready and -caught-up are measured
    ready_at: float | None = None  # when the scenario already saw the stack ready again
    later: list[Callable[[], CheckResult]] = field(default_factory=list)  # run after the standard checks


class Run:
    """See the module doc."""

    def __init__(self, profile: Profile, work: Path, *, say: Say = print, seed: int = 7) -> None:
        self.profile = profile
        self.work = work
        self.say = say
        self.seed = seed
        self.stack = Stack("main", work / "main", Ports.free())
        self.ledger = Ledger()
        self.windows: list[Window] = []
        self.cycles: list[CycleResult] = []
        self.totals = Totals()
        self._started = time.monotonic()
        self._load: Load | None = None
        self._subject: Subject | None = None

    @property
    def load(self) -> Load:
        assert self._load is not None
        return self._load

    @property
    def subject(self) -> Subject:
        assert self._subject is not None
        return self._subject

    def log(self, line: str) -> None:
        self.say(f"[{time.monotonic() - self._started:6.1f}s] {line}")

    # ---- the run

    def execute(self) -> RunReport:
        from faults.scenarios import SCENARIOS
        from faults.second_writer import second_writer

        for name in self.profile.plan:
            if name not in SCENARIOS:
                raise ValueError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
        try:
            seconds = self.stack.start()
            self.log(f"stack up in {seconds:.1f}s at {self.stack.url} (data {self.stack.data_dir})")
            self._subject = Subject.of(self.stack, self.ledger)
            self._load = Load(
                self.ledger,
                Target(self.stack.url, self.subject.api_key),
                conversations("c", self.profile.conversations, seed=self.seed),
                workers=self.profile.workers,
                rate=self.profile.rate,
                seed=self.seed,
            )
            self.load.start()
            counts: dict[str, int] = {}
            for name in self.profile.plan:
                counts[name] = counts.get(name, 0) + 1
                self.cycle(name, counts[name], SCENARIOS[name])
        except RunAborted as exc:
            self.log(f"run aborted: {exc}")
        finally:
            if self._load is not None:
                self._load.stop(timeout=10)
                self._account(self.ledger)
            left = self.stack.stop()
            if left:
                self.log(f"main stack: killed leftover processes {', '.join(left)}")
        if self.profile.second_writer:
            self.cycles.append(second_writer(self))
        self._count_losses()
        return RunReport(self.profile.name, self.cycles, self.totals, time.monotonic() - self._started)

    def cycle(self, name: str, index: int, scenario: Callable[[Run], Injected]) -> None:
        result = CycleResult(name, index, time.time())
        try:
            self._cycle(result, scenario)
        except RunAborted as exc:
            result.checks.append(CheckResult("the run goes on", False, str(exc)))
            raise
        finally:
            self.cycles.append(result)
            self.report_cycle(result)

    def _cycle(self, result: CycleResult, scenario: Callable[[Run], Injected]) -> None:
        started = result.started_at
        clock = time.monotonic()
        self.load.resume()
        time.sleep(self.profile.warm_s)
        try:
            injected = scenario(self)
        except Exception as exc:  # a harness error: reported, and the run goes on
            injected = Injected(time.time())
            injected.checks.append(CheckResult("scenario runs", False, f"{type(exc).__name__}: {exc}"))
        result.checks += injected.checks
        ready_at = injected.ready_at or self.await_ready(
            result, blamed=not all(c.ok for c in injected.checks)
        )
        if injected.outage:
            self.windows.append(Window(injected.at - 1.0, ready_at + GRACE_S))
        if injected.restarts:
            result.ready_s = ready_at - injected.at
            result.caught_up_s = self.measure_catch_up(injected.at)
            result.catch_up_measured = True
        time.sleep(self.profile.post_s)
        if not self.load.pause(timeout=60):
            result.notes.append("some appends were still unresolved 60s after the load paused")
        result.checks += standard_checks(
            self.subject, since=started, windows=self.windows, settle_s=self.profile.settle_s
        )
        result.checks += [_guarded("scenario", check) for check in injected.later]
        result.count_journal()
        result.seconds = time.monotonic() - clock

    def report_cycle(self, result: CycleResult) -> None:
        ready = f"{result.ready_s:.1f}s" if result.ready_s is not None else "-"
        caught = "never" if result.catch_up_measured else "-"
        if result.caught_up_s is not None:
            caught = f"{result.caught_up_s:.1f}s"
        self.log(
            f"{result.scenario} #{result.index}: {'ok' if result.ok else 'FAILED'} "
            f"(ready {ready}, caught up {caught}, journal {result.journal_messages} messages, "
            f"{result.seconds:.0f}s)"
        )
        for check in result.checks:
            if not check.ok:
                self.say(f"          FAIL {check.name}: {check.detail}")
        for note in result.notes:
            self.say(f"          note: {note}")

    def await_ready(self, result: CycleResult, *, blamed: bool = False) -> float:
        """When the stack answered /readyz again. When it stopped, or stayed unready for
        `ready_timeout_s`, the harness starts it anew; that is a failed check unless the scenario
        already failed one for it (`blamed`)."""
        if wait_for(self.stack.ready, self.profile.ready_timeout_s, abort=lambda: not self.stack.alive()):
            return time.time()
        if not blamed:
            if self.stack.alive():
                detail = f"not ready {self.profile.ready_timeout_s:.0f}s after the fault"
            else:
                detail = f"memstream up exited with code {self.stack.exit_code()}"
            result.checks.append(
                CheckResult(
                    "stack recovers by itself",
                    False,
                    f"{detail}; its output ends: {self.stack.output_tail(3)!r}",
                )
            )
        self.restart_stack(result)
        return time.time()

    def restart_stack(self, result: CycleResult, tries: int = 4) -> float:
        """Stop what is left of the stack and start it again (a harness restart); seconds to ready."""
        self.totals.harness_restarts += 1
        for attempt in range(1, tries + 1):
            left = self.stack.stop(timeout=30)
            if left:
                result.notes.append(f"harness killed leftover processes: {', '.join(left)}")
            try:
                seconds = self.stack.start(timeout=self.profile.ready_timeout_s * 2)
            except ServiceError as exc:
                result.notes.append(f"harness restart attempt {attempt} failed: {str(exc).splitlines()[0]}")
                time.sleep(5.0)
                continue
            result.notes.append(f"the harness restarted the stack (attempt {attempt}, {seconds:.1f}s)")
            return seconds
        raise RunAborted(
            f"the stack could not be started again after {tries} attempts; see {self.stack.log_path}"
        )

    def measure_catch_up(self, since: float) -> float | None:
        """Seconds from `since` until `memstream verify` found the projection holding the journal
        (threads the harness put on the topic itself aside), asked every second or so for up to
        `catch_up_s`; None when it never did."""
        deadline = time.monotonic() + self.profile.catch_up_s
        while True:
            try:
                report = checks.verify(self.stack.url, self.subject.admin_token, settle_s=1.0)
            except Exception:
                report = {}
            if report and checks.check_projection(report, self.subject.injected_threads).ok:
                return time.time() - since
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.5)

    def _account(self, ledger: Ledger) -> None:
        """Add a ledger's outcomes to the totals (after its load stopped)."""
        view = ledger.view()
        outcomes = view.outcomes()
        self.totals.appends_sent += len({m.rsplit(".", 1)[0] for m in view.messages})
        self.totals.messages_acked += outcomes.get("acked", 0)
        self.totals.unresolved += outcomes.get("unknown", 0)
        self.totals.load_5xx += len(view.server_errors)

    def _count_losses(self) -> None:
        """Lost and duplicated messages: the worst journal check of each stack's run, added up."""
        for phase in (
            [c for c in self.cycles if c.scenario != "second-writer"],
            [c for c in self.cycles if c.scenario == "second-writer"],
        ):
            journal = [check for c in phase for check in c.checks if check.name == "journal"]
            self.totals.lost += max((int(check.figures.get("lost", 0)) for check in journal), default=0)
            self.totals.duplicated += max(
                (int(check.figures.get("duplicated", 0)) for check in journal), default=0
            )


@contextlib.contextmanager
def work_dir(path: Path | None, *, keep: bool) -> Iterator[Path]:
    """`path`, or a new temporary directory removed at the end unless `keep`."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path.resolve()
        return
    made = Path(tempfile.mkdtemp(prefix="memstream-faults-"))
    try:
        yield made
    finally:
        if not keep:
            shutil.rmtree(made, ignore_errors=True)
