"""The processor runtime on faust-streaming: contract, one App per processor, DLQ, runners.

Public API:
- `Processor`, `Record`, `InvalidMessage`, `Sink`, `TransformProcessor`, `group_id` (the contract);
- `RuntimeOptions` (batching, retries, dead-letter limit, consumer-group timing);
- `build_app`, `ProcessorRuntime` (one processor in one faust App, in the current loop);
- `run_processors` (several, in the caller's loop) and `run_worker` (one, owning SIGINT/SIGTERM);
- errors: `ProcessorCrashed`, `DeadLetterLimitExceeded`, `DeadLetterUnavailable`, `UnknownProcessor`.
"""

from streams.runtime.app import ProcessorRuntime, build_app
from streams.runtime.errors import (
    DeadLetterLimitExceeded,
    DeadLetterUnavailable,
    ProcessorCrashed,
    UnknownProcessor,
)
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import InvalidMessage, Processor, Record, Sink, TransformProcessor, group_id
from streams.runtime.worker import run_processors, run_worker

__all__ = [
    "DeadLetterLimitExceeded",
    "DeadLetterUnavailable",
    "InvalidMessage",
    "Processor",
    "ProcessorCrashed",
    "ProcessorRuntime",
    "Record",
    "RuntimeOptions",
    "Sink",
    "TransformProcessor",
    "UnknownProcessor",
    "build_app",
    "group_id",
    "run_processors",
    "run_worker",
]
