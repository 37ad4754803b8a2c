"""When a failed request is tried again, and after how long: a pure policy, no clock or I/O.

dispatcher: outcome is a retryable error -> give_up(code, attempt, failing_for_s)? yes: answer
"failed" and dead-letter it; no: delay(attempt) seconds of backoff -> back in the queue.
Engine errors get `max_attempts`; a store outage is everyone's problem, not this request's,
so storage errors retry for `storage_retry_s` seconds however many attempts that takes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from topics.errors import ErrorCode


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    storage_retry_s: float = 300.0
    base_delay_s: float = 0.5
    max_delay_s: float = 10.0
    # The backoff is multiplied by a factor drawn from [1 - jitter, 1 + jitter], so requests
    # that failed together (one store outage) do not all come back at the same moment.
    jitter: float = 0.5
    uniform: Callable[[float, float], float] = field(default=random.uniform, repr=False,
                                                     compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("storage_retry_s", "base_delay_s", "max_delay_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter!r}")

    def give_up(self, code: ErrorCode, *, attempt: int, failing_for_s: float) -> bool:
        """True when the request that just failed `attempt` times must be answered as failed;
        `failing_for_s` is the time since its first retryable failure."""
        if code is ErrorCode.STORAGE_ERROR:
            return failing_for_s >= self.storage_retry_s
        return attempt >= self.max_attempts

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt `attempt + 1`: doubling from `base_delay_s`, capped at
        `max_delay_s`, then jittered."""
        # The exponent is capped so a long storage outage cannot overflow the float.
        exp = min(self.base_delay_s * 2.0 ** min(max(0, attempt - 1), 60), self.max_delay_s)
        return exp * self.uniform(1 - self.jitter, 1 + self.jitter)
