"""Token bucket rate and concurrent-stream limits per tenant, with Retry-After values."""

from __future__ import annotations

from consumers.gateway.keys import Tenant
from consumers.gateway.limits import Limiter, TokenBucket


def test_the_bucket_allows_a_burst_then_refills_at_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=2.0, clock=lambda: now[0])
    assert bucket.take() == 0.0 and bucket.take() == 0.0
    assert bucket.take() == 0.5  # one token takes half a second at 2/s
    now[0] = 0.5
    assert bucket.take() == 0.0
    now[0] = 100.0
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.5]  # never more than burst


def test_rate_refusals_say_when_to_retry_in_whole_seconds() -> None:
    now = [0.0]
    limiter = Limiter(clock=lambda: now[0])
    slow = Tenant("slow", rate=0.1, streams=1)
    assert limiter.admit(slow) is None
    refusal = limiter.admit(slow)
    assert refusal is not None and refusal.retry_after_s == 10
    assert "0.1 requests/s" in refusal.reason
    assert limiter.admit(Tenant("other", 0.1, 1)) is None  # tenants do not share buckets


def test_streams_are_counted_per_tenant_and_given_back() -> None:
    limiter = Limiter()
    acme = Tenant("acme", rate=10, streams=2)
    assert limiter.open_stream(acme) is None and limiter.open_stream(acme) is None
    refusal = limiter.open_stream(acme)
    assert refusal is not None and refusal.retry_after_s == 1 and "limit 2" in refusal.reason
    limiter.close_stream(acme)
    assert limiter.open_streams() == 1
    assert limiter.open_stream(acme) is None
    limiter.close_stream(acme)
    limiter.close_stream(acme)
    limiter.close_stream(acme)  # an extra close never goes negative
    assert limiter.open_streams() == 0
