"""`memstream up` under faults, end to end with the real supervisor and servers:
- an embedded server killed -9 under load is restarted and the node rides it out: every
  acknowledged append is present once, the ClickHouse projection catches up (`memstream verify`);
- a supervisor killed -9 takes its children along, and a new `up` starts right away;
- `up` starts at once right after the whole tree was killed -9, ten times in a row;
- a node fenced by a second writer on its journal stops the stack (exit status 4), unrestarted;
- the data directory and everything in it is private to the running user."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from memstream import exit_codes
from memstream.embedded.datadir_lock import process_alive
from memstream.embedded.process import free_port
from memstream.embedded.services import PG_OS_USER
from tests.memstream.embedded.up_process import (
    run_memstream,
    running_pids,
    stack_env,
    start_up,
    wait_for_line,
)
from tests.memstream.test_node_crash import Appender, _journal_ids


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    # not under pytest's tmp dir: as root, PostgreSQL's OS user must traverse the data dir's parents,
    # and a concurrent pytest session takes that right away from pytest's (0700) root again
    parent = Path(tempfile.mkdtemp(prefix="memstream-up-", dir="/tmp"))
    try:
        yield stack_env(parent / "data")
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def _data(env: dict[str, str]) -> Path:
    return Path(env["MEMSTREAM_DATA_DIR"])


def _api(env: dict[str, str]) -> str:
    return f"http://127.0.0.1:{env['MEMSTREAM_API_PORT']}"


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(60)


def _kill_and_wait_restart(log: Path, env: dict[str, str], name: str) -> None:
    mark = len(log.read_text())
    killed = running_pids(env)[name]
    os.kill(killed, signal.SIGKILL)
    wait_for_line(log, f"{name} ready again", after=mark)
    time.sleep(0.5)
    restarted = running_pids(env)[name]  # `memstream status` shows the new process
    assert restarted != killed and process_alive(restarted), (name, killed, restarted)


def _verify_until_clean(env: dict[str, str], timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while True:
        result = run_memstream(env, "verify", "--wait", "20", timeout=90)
        if result.returncode == 0:
            return result.stdout
        if time.monotonic() > deadline:
            pytest.fail(f"the projection did not catch up:\n{result.stdout}{result.stderr}")
        time.sleep(2)


@pytest.mark.engine
def test_killed_servers_are_restarted_and_nothing_acknowledged_is_lost(
    env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "up.log"
    proc = start_up(env, log)
    key = (_data(env) / "api-key").read_text().strip()
    appender = Appender(_api(env), key)
    appender.start()
    try:
        time.sleep(2)
        for name in ("broker", "redis", "postgres"):
            _kill_and_wait_restart(log, env, name)
            time.sleep(2)  # appends keep coming while the node catches up
        before = len(appender.acked)
        time.sleep(3)
        assert len(appender.acked) > before, "no append was acknowledged after the restarts"
    finally:
        appender.stop.set()
        appender.join(10)
    try:
        assert proc.poll() is None, log.read_text()
        acked = dict(appender.acked)
        journal = _journal_ids(_api(env), key)
        for thread, rows in journal.items():
            assert [offset for offset, _ in rows] == list(range(len(rows))), f"{thread}: offsets have gaps"
            ids = [message_id for _, message_id in rows]
            assert len(ids) == len(set(ids)), f"{thread}: a message is in the journal twice"
        where = {message_id: thread for thread, rows in journal.items() for _, message_id in rows}
        missing = [m for m, thread in acked.items() if where.get(m) != thread]
        assert not missing, f"{len(missing)} acknowledged appends are missing: {missing[:5]}"
        assert "the projection matches the journal" in _verify_until_clean(env)
        assert httpx.get(f"{_api(env)}/readyz", timeout=10).status_code == 200
    finally:
        assert _stop(proc) == exit_codes.OK, log.read_text()


@pytest.mark.engine
def test_a_killed_supervisor_takes_its_children_along(env: dict[str, str], tmp_path: Path) -> None:
    first = start_up(env, tmp_path / "up-1.log")
    children = running_pids(env)
    lock = str((_data(env) / "run" / "lock").resolve())
    for name, pid in children.items():  # every child holds the data directory's lock
        assert lock in {f.path for f in psutil.Process(pid).open_files()}, name
    first.kill()
    first.wait(10)
    second: subprocess.Popen[bytes] | None = None
    try:
        second = start_up(env, tmp_path / "up-2.log")  # waits for the old children, never refused
        deadline = time.monotonic() + 20
        while any(process_alive(pid) for pid in children.values()):
            assert time.monotonic() < deadline, {n: p for n, p in children.items() if process_alive(p)}
            time.sleep(0.1)
        assert set(running_pids(env).values()).isdisjoint(children.values())
        assert httpx.get(f"{_api(env)}/healthz", timeout=10).status_code == 200
    finally:
        for pid in children.values():
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
        if second is not None:
            assert _stop(second) == exit_codes.OK


@pytest.mark.engine
def test_up_starts_at_once_after_the_whole_tree_was_killed(env: dict[str, str], tmp_path: Path) -> None:
    for cycle in range(10):
        proc = start_up(env, tmp_path / f"up-{cycle}.log")  # fails the test if `up` exits
        pids = [proc.pid, *running_pids(env).values()]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        proc.wait(10)
    proc = start_up(env, tmp_path / "up-last.log")
    assert _stop(proc) == exit_codes.OK


@pytest.mark.engine
def test_a_fenced_node_stops_the_stack_for_good(env: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "up.log"
    proc = start_up(env, log)
    with (tmp_path / "other.log").open("wb") as other_log:
        other = subprocess.Popen(
            [sys.executable, "-m", "memstream", "node"],
            env={
                **env,
                "MEMSTREAM_DATA_DIR": str(tmp_path / "other"),
                "MEMSTREAM_JOURNAL_URL": f"file://{_data(env) / 'journal'}",
                "MEMSTREAM_BROKER_URL": f"kafka://127.0.0.1:{env['MEMSTREAM_PORTS__BROKER']}",
                "MEMSTREAM_POSTGRES_DSN": f"postgresql://postgres@127.0.0.1:{env['MEMSTREAM_PORTS__POSTGRES']}/memstream",
                "MEMSTREAM_REDIS_URL": f"redis://127.0.0.1:{env['MEMSTREAM_PORTS__REDIS']}/0",
                "MEMSTREAM_API_PORT": str(free_port()),
            },
            stdout=other_log,
            stderr=subprocess.STDOUT,
        )
    try:
        code = proc.wait(90)  # the other node opened the journal: ours is fenced, and the stack stops
        output = log.read_text()
        assert code == exit_codes.FENCED, output
        assert "another writer opened the journal" in output and "does not restart" in output, output
        assert "node ready again" not in output and "node exited" not in output, output
    finally:
        if proc.poll() is None:
            proc.kill()
        other.send_signal(signal.SIGTERM)
        other.wait(30)


@pytest.mark.engine
def test_the_data_dir_is_private_to_its_user(env: dict[str, str], tmp_path: Path) -> None:
    data = _data(env)
    data.mkdir(mode=0o755)  # as an older version left it
    data.chmod(0o755)
    proc = start_up(env, tmp_path / "up.log")
    try:
        as_root = os.geteuid() == 0
        assert stat.S_IMODE(data.stat().st_mode) == (0o711 if as_root else 0o700)
        postgres = data / "postgres"
        if as_root:  # PostgreSQL runs as its own OS user, owns its directory and nothing else
            assert postgres.owner() == PG_OS_USER
            assert stat.S_IMODE(postgres.stat().st_mode) == 0o700
        for secret in ("api-key", "admin.token"):
            assert stat.S_IMODE((data / secret).stat().st_mode) == 0o600, secret
        loose = []
        for root, dirs, files in os.walk(data):
            for name in dirs + files:
                path = Path(root, name)
                info = path.lstat()
                if stat.S_ISLNK(info.st_mode):
                    continue
                foreign = as_root and info.st_uid != 0 and postgres not in (path, *path.parents)
                if stat.S_IMODE(info.st_mode) & 0o077 or foreign:
                    loose.append(f"{path} {stat.filemode(info.st_mode)} uid {info.st_uid}")
        assert not loose, "\n".join(loose)
    finally:
        assert _stop(proc) == exit_codes.OK
