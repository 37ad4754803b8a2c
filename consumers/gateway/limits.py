"""Per-tenant limits of one gateway replica: a request rate and concurrent speech streams.

Each authenticated request -> `Limiter.admit(tenant)` -> the tenant's token bucket gives a
token or says how long until one refills (-> 429, `Retry-After`). A speech request also
takes a stream slot (`open_stream`) for as long as its answer runs and gives it back when
the answer ends, however it ends (-> 429 when all the tenant's slots are taken).

The limits are per replica: the Service spreads a tenant's connections over the replicas,
so with N replicas a tenant may reach up to N times its configured rate and streams
(docs/gateway.md says so; a shared counter would put a network round trip on every request).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from consumers.gateway.keys import Tenant


class TokenBucket:
    """`rate` tokens a second, holding at most `burst`; starts full."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()

    def take(self) -> float:
        """0.0 when a token was taken, else the seconds until one will be there."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate


@dataclass(frozen=True)
class Refusal:
    reason: str
    retry_after_s: int  # whole seconds, at least 1 (the header's unit)


class Limiter:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._streams: dict[str, int] = {}

    def admit(self, tenant: Tenant) -> Refusal | None:
        bucket = self._buckets.get(tenant.name)
        if bucket is None or bucket.rate != tenant.rate:  # new tenant or its rate changed
            bucket = TokenBucket(tenant.rate, max(1.0, tenant.rate), self._clock)
            self._buckets[tenant.name] = bucket
        wait = bucket.take()
        if wait == 0.0:
            return None
        return Refusal(f"rate limit of tenant {tenant.name}: {tenant.rate:g} requests/s",
                       max(1, math.ceil(wait)))

    def open_stream(self, tenant: Tenant) -> Refusal | None:
        now_open = self._streams.get(tenant.name, 0)
        if now_open >= tenant.streams:
            return Refusal(f"tenant {tenant.name} has {now_open} speech requests open, "
                           f"limit {tenant.streams}", 1)
        self._streams[tenant.name] = now_open + 1
        return None

    def close_stream(self, tenant: Tenant) -> None:
        left = self._streams.get(tenant.name, 0) - 1
        if left > 0:
            self._streams[tenant.name] = left
        else:
            self._streams.pop(tenant.name, None)

    def open_streams(self) -> int:
        return sum(self._streams.values())
