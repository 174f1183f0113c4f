"""In-memory fakes of the store interfaces in `core/stores/` (and `core/summaries`, and agent
memory's `core/memory/store.py`), for unit tests, and `Outage`, which makes any store (fake or real)
fail on chosen methods. Each fake passes the same contract suite as the real adapters
(`tests/core/stores/`, `tests/core/memory/test_store_contract.py`)."""
