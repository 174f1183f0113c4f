"""memstream's fault suite: real stacks driven through crashes, outages and hostile input under load.

Like a database's crash tests, the suite runs the real thing - `memstream up` (the supervisor with
the embedded Tansu broker, PostgreSQL, Redis and the node) on a temporary data directory and free
ports - while a multi-threaded appender writes conversations through the HTTP API and records
exactly what was acknowledged (`faults.ledger`). Between injected faults (`faults.injectors`) it
pauses the load and checks (`faults.checks`):

- every acknowledged append is in the journal once, at the offset it was acknowledged with, with
  gap-free per-thread offsets; an append whose outcome was unknown (timeout, reset, 5xx) is there
  at most once (the appender retries it with the same message ids, as a client would);
- the processors caught up: `memstream verify` (the node's `/admin/v1/verify`) is clean with
  nothing pending, and every processor is running;
- no stranded compaction: no thread is over the compaction thresholds since its last summary, no
  flush-and-summarize guard is still held, and no summary version went backwards;
- 5xx answers only inside an injected outage, each with a specific error code (never 500).

Scenarios (`faults.scenarios`): kill -9 of the node alone (the supervisor restarts it), of the whole
tree, of the supervisor alone (its children must die with it), of the broker and of PostgreSQL; a
Redis FLUSHALL; a poison record on `journal.messages`; a second writer (a second stack on the same
journal); and a bounded schemathesis run against `/openapi.json` with a real API key plus a table of
hostile requests (`faults.fuzz`).

Profiles (`faults.profiles`): `short` (a few cycles, ~5 min, run by `tests/faults/`) and `long`
(20 kill -9 cycles and longer fuzzing): `python -m faults run --long` prints progress and a summary
table and exits 1 when any check failed.
"""
