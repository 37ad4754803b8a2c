"""RetryPolicy: when to give up on a failing request, and how long to back off."""

from __future__ import annotations

import random

import pytest

from consumers.worker.retry import RetryPolicy
from topics.errors import ErrorCode


def no_jitter(low: float, high: float) -> float:
    return (low + high) / 2


def test_engine_errors_get_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert [policy.give_up(ErrorCode.ENGINE_ERROR, attempt=a, failing_for_s=9999.0)
            for a in (1, 2, 3, 4)] == [False, False, True, True]


def test_storage_errors_retry_for_a_window_whatever_the_attempt_count() -> None:
    policy = RetryPolicy(max_attempts=2, storage_retry_s=60.0)
    assert policy.give_up(ErrorCode.STORAGE_ERROR, attempt=50, failing_for_s=59.9) is False
    assert policy.give_up(ErrorCode.STORAGE_ERROR, attempt=1, failing_for_s=60.0) is True


def test_one_attempt_means_no_retry() -> None:
    policy = RetryPolicy(max_attempts=1)
    assert policy.give_up(ErrorCode.ENGINE_ERROR, attempt=1, failing_for_s=0.0) is True


def test_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=3.0, uniform=no_jitter)
    assert [policy.delay(a) for a in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_long_outage_does_not_overflow_the_backoff() -> None:
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=10.0, uniform=no_jitter)
    assert policy.delay(5000) == 10.0


def test_jitter_spreads_the_delay_within_its_bounds() -> None:
    rng = random.Random(3)
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=10.0, jitter=0.5, uniform=rng.uniform)
    delays = [policy.delay(2) for _ in range(200)]
    assert all(1.0 <= d <= 3.0 for d in delays)
    assert max(delays) - min(delays) > 1.0  # actually spread, not one value
    exact = RetryPolicy(base_delay_s=1.0, jitter=0.0)
    assert exact.delay(1) == 1.0


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"base_delay_s": -1.0},
                                    {"max_delay_s": float("inf")}, {"storage_retry_s": -5.0},
                                    {"jitter": 1.5}])
def test_nonsense_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
