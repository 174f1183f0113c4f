"""The processor runtime on faust-streaming: contract, one App per processor, DLQ, runners.

Public API:
- `Processor`, `Record`, `InvalidMessage`, `Sink`, `TransformProcessor`, `group_id` (the contract);
- `RuntimeOptions` (batching, retries, outages, dead-letter limit, restarts, consumer-group timing);
- `build_app`, `ProcessorRuntime` (one processor in one faust App, in the current loop);
- `ProcessorSupervisor` (processors kept running: a crashed one restarted alone, with backoff);
- `run_processors` (several, in the caller's loop; a crash ends the run; `memstream worker NAME`
  runs one supervised: `memstream.worker.run_worker`);
- `is_outage` (the one classifier of "a store is unavailable: wait" versus "the record may be bad");
- errors: `SinkUnavailable` (raise it for a store outage), `ProcessorCannotRun` (from `start()`:
  never restarted), `ProcessorCrashed`, `DeadLetterLimitExceeded`, `DeadLetterUnavailable`,
  `UnknownProcessor`.
"""

from streams.runtime.app import ProcessorRuntime, build_app
from streams.runtime.errors import (
    DeadLetterLimitExceeded,
    DeadLetterUnavailable,
    ProcessorCannotRun,
    ProcessorCrashed,
    SinkUnavailable,
    UnknownProcessor,
)
from streams.runtime.options import RuntimeOptions
from streams.runtime.outages import is_outage
from streams.runtime.processor import InvalidMessage, Processor, Record, Sink, TransformProcessor, group_id
from streams.runtime.supervisor import ProcessorSupervisor
from streams.runtime.worker import run_processors

__all__ = [
    "DeadLetterLimitExceeded",
    "DeadLetterUnavailable",
    "InvalidMessage",
    "Processor",
    "ProcessorCannotRun",
    "ProcessorCrashed",
    "ProcessorRuntime",
    "ProcessorSupervisor",
    "Record",
    "RuntimeOptions",
    "Sink",
    "SinkUnavailable",
    "TransformProcessor",
    "UnknownProcessor",
    "build_app",
    "group_id",
    "is_outage",
    "run_processors",
]
