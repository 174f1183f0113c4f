"""The retry rules: what is retried, the backoff with jitter, Retry-After, and the bounds."""

from __future__ import annotations

import pytest

from memstream.client.errors import (
    AuthError,
    ConflictError,
    InvalidInputError,
    MemstreamApiError,
    NotFoundError,
    ServerError,
    UnavailableError,
)
from memstream.client.retry import RetryPolicy, RetryState, retryable


def _unavailable(
    status: int | None = 503, code: str = "journal_unavailable", after: float | None = None
) -> UnavailableError:
    return UnavailableError("down", code=code, status=status, retry_after_s=after)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _state(policy: RetryPolicy, *, idempotent: bool = True, clock: _Clock | None = None) -> RetryState:
    """A state whose jitter always draws the top of its range (`uniform(a, b) = b`)."""
    return RetryState(policy, idempotent, clock=clock or _Clock(), uniform=lambda low, high: high)


@pytest.mark.parametrize(
    "error",
    [
        AuthError("no", code="unauthorized", status=401),
        NotFoundError("no", code="not_found", status=404),
        ConflictError("no", code="conflict", status=409),
        InvalidInputError("no", code="invalid_input", status=422),
        ServerError("no", code="internal_error", status=500),
    ],
)
def test_only_unavailability_is_retried(error: MemstreamApiError) -> None:
    assert not retryable(error, idempotent=True)
    assert not retryable(error, idempotent=False)


def test_an_idempotent_call_is_retried_after_any_unavailability() -> None:
    for error in (
        _unavailable(503),
        _unavailable(502),
        _unavailable(504),
        _unavailable(None, "network_error"),
    ):
        assert retryable(error, idempotent=True)


def test_a_call_that_is_not_idempotent_is_retried_only_when_it_surely_did_not_run() -> None:
    assert retryable(_unavailable(503), idempotent=False)  # the server: "the call did not succeed"
    assert retryable(_unavailable(None, "connect_failed"), idempotent=False)  # never sent
    assert not retryable(_unavailable(None, "network_error"), idempotent=False)  # may have run
    assert not retryable(_unavailable(502), idempotent=False)
    assert not retryable(_unavailable(504), idempotent=False)


def test_backoff_doubles_up_to_its_cap_with_jitter_in_the_upper_half() -> None:
    policy = RetryPolicy(max_attempts=10, initial_backoff_s=0.1, max_backoff_s=0.5, max_elapsed_s=100)
    state = _state(policy)
    assert [state.next_delay(_unavailable()) for _ in range(5)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    draws: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        draws.append((low, high))
        return low

    jittered = RetryState(policy, True, clock=_Clock(), uniform=uniform)
    assert jittered.next_delay(_unavailable()) == pytest.approx(0.05)
    assert jittered.next_delay(_unavailable()) == pytest.approx(0.1)
    assert draws == [pytest.approx((0.05, 0.1)), pytest.approx((0.1, 0.2))]


def test_retry_after_is_a_floor_of_the_wait() -> None:
    state = _state(RetryPolicy(initial_backoff_s=0.1, max_elapsed_s=100))
    assert state.next_delay(_unavailable(after=2.0)) == 2.0
    assert state.next_delay(_unavailable(after=0.0)) == pytest.approx(0.2)  # backoff when longer
    ignoring = _state(RetryPolicy(initial_backoff_s=0.1, honour_retry_after=False))
    assert ignoring.next_delay(_unavailable(after=2.0)) == pytest.approx(0.1)


def test_attempts_are_bounded() -> None:
    state = _state(RetryPolicy(max_attempts=3, max_elapsed_s=100))
    assert state.next_delay(_unavailable()) is not None
    assert state.next_delay(_unavailable()) is not None
    assert state.next_delay(_unavailable()) is None  # the third attempt was the last
    assert _state(RetryPolicy(max_attempts=1)).next_delay(_unavailable()) is None


def test_no_wait_ends_after_the_time_budget() -> None:
    clock = _Clock()
    state = _state(
        RetryPolicy(max_attempts=100, initial_backoff_s=1, max_backoff_s=1, max_elapsed_s=5), clock=clock
    )
    assert state.next_delay(_unavailable()) == 1
    clock.now += 3.5
    assert state.next_delay(_unavailable()) == 1  # ends at 4.5 s
    clock.now += 1
    assert state.next_delay(_unavailable()) is None  # would end at 5.5 s
    long_retry_after = _state(RetryPolicy(max_elapsed_s=5))
    assert long_retry_after.next_delay(_unavailable(after=30)) is None  # a Retry-After past the budget


def test_a_final_error_is_not_retried_even_with_attempts_left() -> None:
    state = _state(RetryPolicy())
    assert state.next_delay(ConflictError("no", code="conflict", status=409)) is None
    assert _state(RetryPolicy(), idempotent=False).next_delay(_unavailable(None, "network_error")) is None


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"initial_backoff_s": -1}, {"max_elapsed_s": -1}, {"multiplier": 0.5}],
)
def test_nonsense_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
