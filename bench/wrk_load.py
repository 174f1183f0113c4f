"""HTTP load from `wrk` (a C load generator, so the client is not the bottleneck) for bench_http.

`find_wrk` finds the binary (or installs Debian's package when asked); the Lua scripts that wrk
runs are generated here into a directory the caller owns: `append_script` POSTs appends of
`per_call` fresh messages (unique `message_id`s, so every call writes) spread over the bench's
threads, `context_script` GETs random threads' contexts. Every script reports its figures from
wrk's `done()` hook as one `BENCH key=value ...` line, parsed by `run_wrk`.

The benches run as scripts (`.venv/bin/python bench/bench_x.py`), so this module is imported as
`wrk_load` from the bench directory.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MISSING = (
    "wrk (the HTTP load generator) is not on PATH. Install it: `apt-get install -y wrk` on "
    "Debian/Ubuntu (or pass --install-wrk to let this script do it as root), `brew install wrk` on "
    "macOS, or build it from its sources; or pass --wrk PATH."
)

# wrk's done() hook: one parseable line (latencies in microseconds)
_DONE = """
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d p50_us=%.0f p99_us=%.0f"
    .. " status=%d connect=%d read=%d write=%d timeout=%d\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.status, e.connect, e.read, e.write, e.timeout))
end
"""

# every wrk thread gets its own number (in its own Lua state) for ids and random seeds
_SETUP = """
local next_id = 0
function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
end
"""


def find_wrk(explicit: str | None, install: bool) -> str:
    """The wrk binary to use: `explicit`, else wrk on PATH, else (when `install`) Debian's package
    installed with apt-get. Raises SystemExit with what to do when there is none."""
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise SystemExit(f"--wrk {explicit}: not an executable file")
        return explicit
    found = shutil.which("wrk")
    if found is None and install:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise SystemExit("--install-wrk needs root and apt-get. " + MISSING)
        print("wrk not found: installing Debian's package (apt-get install -y wrk)", flush=True)
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=False, stdout=subprocess.DEVNULL)
        if shutil.which("wrk") is None:  # the package lists may be missing: update once, retry
            subprocess.run(["apt-get", "update"], check=False, stdout=subprocess.DEVNULL)
            subprocess.run(["apt-get", "install", "-y", "wrk"], check=False, stdout=subprocess.DEVNULL)
        found = shutil.which("wrk")
    if found is None:
        raise SystemExit(MISSING)
    return found


def wrk_version(wrk: str) -> str:
    """wrk's first line of `-v` output (it names the version and the event backend)."""
    result = subprocess.run([wrk, "-v"], capture_output=True, text=True, check=False)
    return (
        (result.stdout or result.stderr).splitlines()[0].strip() if (result.stdout or result.stderr) else wrk
    )


def _lua(value: str) -> str:
    """A Lua string literal: JSON's escaping is valid Lua for printable ASCII text."""
    if not (value.isascii() and value.isprintable()):
        raise ValueError(f"not printable ASCII: {value[:40]!r}")
    return json.dumps(value)


def append_script(
    directory: Path,
    key: str,
    agent: str,
    threads: int,
    per_call: int,
    content: str,
    *,
    delay_ms: float = 0.0,
    only: Sequence[int] | None = None,
) -> Path:
    """A wrk script POSTing `per_call` new messages of `content` per call to `/v1/threads/{t}/
    messages`, t cycling through `threads` bench threads (`thread-000`...; with `only`, through
    these of them), each call with its thread's `agent_id` and `user_id` (`user-{t % 10}`) and
    fresh message ids. With `delay_ms`,
    each connection pauses that long before each call (wrk's `delay()` hook): `c` connections
    then send at most `c * 1000 / delay_ms` calls/s (a rate cap, not a fixed rate)."""
    run = uuid.uuid4().hex[:8]
    pause = f"\nfunction delay()\n  return {delay_ms:.3f}\nend\n" if delay_ms > 0 else ""
    tail = '","role":"user","content":' + json.dumps(content) + "}"
    script = (
        f"""
local threads, per_call, run = {threads}, {per_call}, {_lua(run)}
local only = {{{", ".join(str(t) for t in only or range(threads))}}}
local headers = {{["Authorization"] = {_lua("Bearer " + key)}, ["Content-Type"] = "application/json"}}
local head, tail = '{{"message_id":"', {_lua(tail)}
local counter = 0
function request()
  counter = counter + 1
  local t = only[(counter + id * 37) % #only + 1]
  local prefix = run .. "-" .. id .. "-" .. counter .. "-"
  local parts = {{}}
  for i = 1, per_call do
    parts[i] = head .. prefix .. i .. tail
  end
  local body = '{{"agent_id":"{agent}","user_id":"user-' .. (t % 10) .. '","messages":['
    .. table.concat(parts, ",") .. ']}}'
  return wrk.format("POST", string.format("/v1/threads/thread-%03d/messages", t), headers, body)
end
"""
        + pause
    )
    return _write(directory / f"append-{per_call}-{run}.lua", _SETUP + script + _DONE)


def context_script(directory: Path, key: str, threads: int) -> Path:
    """A wrk script GETting `/v1/threads/{t}/context` of a random bench thread per call."""
    script = f"""
local threads = {threads}
local headers = {{["Authorization"] = {_lua("Bearer " + key)}}}
function init(args)
  math.randomseed(1000 + id)
end
function request()
  local t = math.random(0, threads - 1)
  return wrk.format("GET", string.format("/v1/threads/thread-%03d/context", t), headers)
end
"""
    return _write(directory / "context.lua", _SETUP + script + _DONE)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@dataclass(frozen=True)
class WrkResult:
    """One wrk run: calls completed, its duration, latency percentiles, errors, wrk's own CPU."""

    calls: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: dict[str, int]
    client_cpu_s: float

    @property
    def per_second(self) -> float:
        return self.calls / self.seconds

    @property
    def failed(self) -> int:
        """Non-2xx/3xx answers, connection errors and timeouts."""
        return sum(self.errors.values())


def run_wrk(
    wrk: str, url: str, script: Path, connections: int, duration_s: float, timeout_s: float = 30.0
) -> WrkResult:
    """Run `script` against `url` with `connections` open connections for `duration_s` (two wrk
    threads at most: the machine's other core serves the node). Raises RuntimeError when wrk
    fails or prints no `BENCH` line."""
    threads = min(2, connections)
    argv = [
        wrk,
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(duration_s))}s",
        f"--timeout={timeout_s:.0f}s",
        "-s",
        str(script),
        url,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    line = next((x for x in result.stdout.splitlines() if x.startswith("BENCH ")), None)
    if result.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({' '.join(argv)}):\n{result.stdout}\n{result.stderr}")
    fields = dict(item.split("=", 1) for item in line.split()[1:])
    return WrkResult(
        calls=int(fields["requests"]),
        seconds=int(fields["duration_us"]) / 1e6,
        p50_ms=float(fields["p50_us"]) / 1e3,
        p99_ms=float(fields["p99_us"]) / 1e3,
        errors={k: int(fields[k]) for k in ("status", "connect", "read", "write", "timeout")},
        client_cpu_s=cpu,
    )
